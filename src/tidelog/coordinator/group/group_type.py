"""Kinds of group a coordinator holds (Kafka's ``Group.GroupType``).

Invariant: ``value`` is the wire name (ListGroups ``group_type``, its types filter compares
case-insensitively). Only CLASSIC groups exist today; CONSUMER (KIP-848, ConsumerGroupHeartbeat with
server-side assignment) is named so that the shard's group table, ListGroups and the record types
already have a place for it.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["GroupType"]


class GroupType(Enum):
    CLASSIC = "classic"
    CONSUMER = "consumer"

    def __str__(self) -> str:
        return self.value
