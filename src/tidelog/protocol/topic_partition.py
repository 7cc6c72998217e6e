"""A topic and a partition number: the name Kafka gives every partition on the wire, on disk and in logs.

Invariants: a plain, immutable, hashable value (a ``NamedTuple``), ordered by topic then partition;
``str()`` is ``<topic>-<partition>``, which is also the partition's directory name on disk. It lives in
``protocol`` because every layer speaks of partitions (requests name them, storage lays them out,
coordinators put them in records and transaction markers) and ``protocol`` is the layer all of them
may import.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    """A topic and a partition number; ``str()`` is the directory name ``<topic>-<partition>``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
