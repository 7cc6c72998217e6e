"""Committed offsets of one coordinator shard (Kafka's ``OffsetAndMetadata`` and offsets store).

Invariants: the store changes only through :meth:`OffsetStore.put` / :meth:`OffsetStore.remove`, which
the shard calls only while replaying an ``OffsetCommit`` record (live or loading); iteration order is
the order offsets were first committed (stable, so responses listing all offsets are deterministic);
a group or topic with no offsets left has no entry at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tidelog.coordinator.group.records import OffsetCommitValue

__all__ = ["OffsetAndMetadata", "OffsetStore", "is_offset_expired"]


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int
    """-1 when the client did not say (OffsetCommit before v6)."""
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int
    """-1 unless an OffsetCommit v2-v4 gave an explicit retention (the old per-commit expiry)."""

    @classmethod
    def from_record(cls, value: OffsetCommitValue) -> OffsetAndMetadata:
        return cls(
            committed_offset=value.offset,
            leader_epoch=value.leader_epoch,
            metadata=value.metadata,
            commit_timestamp_ms=value.commit_timestamp,
            expire_timestamp_ms=value.expire_timestamp,
        )

    def to_record(self) -> OffsetCommitValue:
        return OffsetCommitValue(
            offset=self.committed_offset,
            leader_epoch=self.leader_epoch,
            metadata=self.metadata,
            commit_timestamp=self.commit_timestamp_ms,
            expire_timestamp=self.expire_timestamp_ms,
        )


def is_offset_expired(
    offset: OffsetAndMetadata, base_timestamp_ms: int, now_ms: int, retention_ms: int
) -> bool:
    """Kafka's ``OffsetExpirationConditionImpl``: an explicit expire timestamp wins; otherwise the offset
    expires ``retention_ms`` after ``base_timestamp_ms`` (the group's emptiness or the commit time)."""
    if offset.expire_timestamp_ms != -1:
        return now_ms >= offset.expire_timestamp_ms
    return now_ms - base_timestamp_ms >= retention_ms


class OffsetStore:
    """group -> topic -> partition -> :class:`OffsetAndMetadata`."""

    __slots__ = ("_by_group",)

    def __init__(self) -> None:
        self._by_group: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        topics = self._by_group.get(group_id)
        if topics is None:
            return None
        partitions = topics.get(topic)
        return None if partitions is None else partitions.get(partition)

    def put(self, group_id: str, topic: str, partition: int, offset: OffsetAndMetadata) -> None:
        self._by_group.setdefault(group_id, {}).setdefault(topic, {})[partition] = offset

    def remove(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        topics = self._by_group.get(group_id)
        if topics is None:
            return None
        partitions = topics.get(topic)
        if partitions is None:
            return None
        removed = partitions.pop(partition, None)
        if not partitions:
            del topics[topic]
            if not topics:
                del self._by_group[group_id]
        return removed

    def group_offsets(self, group_id: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        """The group's offsets by topic and partition (a live view: do not mutate)."""
        return self._by_group.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._by_group

    def group_ids(self) -> list[str]:
        """Every group with an offset, in the order of their first commits (a snapshot)."""
        return list(self._by_group)

    def iter_group(self, group_id: str) -> Iterator[tuple[str, int, OffsetAndMetadata]]:
        """``(topic, partition, offset)`` for every offset of the group, over a snapshot."""
        for topic, partitions in list(self._by_group.get(group_id, {}).items()):
            for partition, offset in list(partitions.items()):
                yield topic, partition, offset

    def snapshot(self) -> dict[str, dict[str, dict[int, OffsetAndMetadata]]]:
        """A deep copy of everything (for tests and debugging)."""
        return {g: {t: dict(ps) for t, ps in ts.items()} for g, ts in self._by_group.items()}

    def __len__(self) -> int:
        return sum(len(ps) for ts in self._by_group.values() for ps in ts.values())
