"""The partitions of an offset request that are not forwarded to the group coordinator, and why.

Invariant: a partition of a topic the principal may not READ is TOPIC_AUTHORIZATION_FAILED, which wins over
UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster lacks; every other partition is forwarded. With no
authorizer only the unknown partitions are held back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from tidelog.protocol.errors import ErrorCode
from tidelog.server.dispatch import RequestContext
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.security.acl import AclOperation

from .authz import Authz, topic_allowed

__all__ = ["unreadable_or_unknown"]


class _Partition(Protocol):
    @property
    def partition_index(self) -> int: ...


class _Topic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[_Partition]: ...


def unreadable_or_unknown(
    authz: Authz, ctx: RequestContext, metadata: MetadataCache, topics: Iterable[_Topic]
) -> dict[tuple[str, int], int]:
    """``{(topic, partition): error}`` for the partitions of ``topics`` not to forward: those of a topic
    without READ (TOPIC_AUTHORIZATION_FAILED) and those the cluster lacks (UNKNOWN_TOPIC_OR_PARTITION)."""
    errors: dict[tuple[str, int], int] = {}
    for topic in topics:
        readable = topic_allowed(authz, ctx, AclOperation.READ, topic.name)
        for p in topic.partitions:
            if not readable:
                errors[(topic.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not metadata.has_partition(topic.name, p.partition_index):
                errors[(topic.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return errors
