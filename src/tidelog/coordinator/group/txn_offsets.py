"""Offsets of open transactions in one ``__consumer_offsets`` shard, pending until their transaction's
marker (Kafka's ``OffsetMetadataManager.pendingTransactionalOffsets`` and ``replayEndTransactionMarker``).

A TxnOffsetCommit (:mod:`tidelog.coordinator.group.txn_offset_commit`) writes ordinary OffsetCommit
records, but in a transactional batch of the producer (``producer_id`` / ``producer_epoch``): replaying
such a record does not change the committed offsets; it adds a *pending* offset of that producer. The
COMMIT marker of the producer's transaction on this partition makes its pending offsets committed, the
ABORT marker drops them.

Invariants:

- :class:`PendingTransactionalOffsets` changes only by replay (a transactional offset record, a regular
  offset record or tombstone, an end-transaction marker), live or while loading, so a reload rebuilds it.
- Each replayed offset record gets the next number of the shard's replay order (the log order, live and
  loading alike). A COMMIT marker materialises a pending offset only if no regular commit of the same
  partition was replayed after it (Kafka keeps the most recent record by log offset: otherwise the
  compaction of ``__consumer_offsets`` could resurrect the older offset).
- A tombstone for a partition drops the pending offsets of every open transaction of its group too.
- A partition has pending offsets exactly while some producer's transactional commit of it awaits its
  marker: OffsetFetch with ``require_stable`` then answers UNSTABLE_OFFSET_COMMIT, expiry keeps the
  group's offsets, and OffsetDelete/DeleteGroups write tombstones for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tidelog.coordinator.group.offsets import OffsetAndMetadata, OffsetStore

__all__ = ["PendingTransactionalOffsets"]

_Key = tuple[str, str, int]
"""(group, topic, partition)."""


@dataclass(frozen=True, slots=True)
class _Pending:
    offset: OffsetAndMetadata
    order: int
    """Position of its record in the shard's replay order."""


class PendingTransactionalOffsets:
    """The pending transactional offsets of one shard, by producer id."""

    __slots__ = ("_by_group", "_by_producer", "_committed_order", "_order")

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[_Key, _Pending]] = {}
        self._by_group: dict[str, set[int]] = {}
        """Producers with pending offsets, by group."""
        self._committed_order: dict[_Key, int] = {}
        """Replay position of the record behind each committed offset."""
        self._order = 0

    # -- replay ----------------------------------------------------------------------------------------

    def _next_order(self) -> int:
        self._order += 1
        return self._order

    def on_committed(self, group_id: str, topic: str, partition: int) -> None:
        """A regular (non-transactional) offset record was replayed."""
        self._committed_order[(group_id, topic, partition)] = self._next_order()

    def on_tombstone(self, group_id: str, topic: str, partition: int) -> None:
        """A tombstone for the partition's offset: its pending offsets go too (Kafka does the same)."""
        key = (group_id, topic, partition)
        self._committed_order.pop(key, None)
        producers = self._by_group.get(group_id)
        for producer_id in list(producers or ()):
            pending = self._by_producer.get(producer_id, {})
            pending.pop(key, None)
            if producers is not None and not any(k[0] == group_id for k in pending):
                producers.discard(producer_id)
        if producers is not None and not producers:
            del self._by_group[group_id]

    def add(
        self, producer_id: int, group_id: str, topic: str, partition: int, offset: OffsetAndMetadata
    ) -> None:
        """A transactional offset record of ``producer_id`` was replayed."""
        key = (group_id, topic, partition)
        self._by_producer.setdefault(producer_id, {})[key] = _Pending(offset, self._next_order())
        self._by_group.setdefault(group_id, set()).add(producer_id)

    def complete(self, producer_id: int, committed: bool, store: OffsetStore) -> list[str]:
        """The producer's transaction ended on this partition: on COMMIT its pending offsets become the
        committed ones in ``store`` (unless a newer regular commit exists); on ABORT they are dropped.
        Returns the groups that received offsets (which must exist as groups)."""
        pending = self._by_producer.pop(producer_id, None)
        if pending is None:
            return []
        for group_id in {k[0] for k in pending}:
            producers = self._by_group.get(group_id)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._by_group[group_id]
        if not committed:
            return []
        groups: dict[str, None] = {}
        for key, entry in pending.items():
            if self._committed_order.get(key, 0) > entry.order:
                continue  # a regular commit replayed after this one wins
            group_id, topic, partition = key
            store.put(group_id, topic, partition, entry.offset)
            self._committed_order[key] = entry.order
            groups[group_id] = None
        return list(groups)

    # -- queries ---------------------------------------------------------------------------------------

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        key = (group_id, topic, partition)
        return any(key in self._by_producer.get(p, {}) for p in self._by_group.get(group_id, ()))

    def has_pending_group(self, group_id: str) -> bool:
        """Whether any open transaction holds offsets of the group."""
        return any(
            any(k[0] == group_id for k in self._by_producer.get(p, {}))
            for p in self._by_group.get(group_id, ())
        )

    def group_ids(self) -> list[str]:
        """Every group with a pending offset (a snapshot)."""
        return list(self._by_group)

    def pending_partitions(self, group_id: str) -> Iterator[tuple[str, int]]:
        """(topic, partition) of every pending offset of the group, without repeats."""
        seen: set[tuple[str, int]] = set()
        for producer_id in sorted(self._by_group.get(group_id, ())):
            for group, topic, partition in self._by_producer.get(producer_id, {}):
                if group == group_id and (topic, partition) not in seen:
                    seen.add((topic, partition))
                    yield topic, partition

    def pending_by_producer(self) -> dict[int, dict[_Key, OffsetAndMetadata]]:
        """Everything pending (a copy, for tests and debugging)."""
        return {
            p: {k: e.offset for k, e in offsets.items()}
            for p, offsets in self._by_producer.items()
            if offsets
        }
