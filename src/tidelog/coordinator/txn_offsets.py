"""Transactional offset commits of one ``__consumer_offsets`` shard: TxnOffsetCommit and the offsets it
leaves pending until its transaction's marker (Kafka's ``OffsetMetadataManager.commitTransactionalOffset``,
``pendingTransactionalOffsets`` and ``replayEndTransactionMarker``).

A TxnOffsetCommit writes ordinary OffsetCommit records, but in a transactional batch of the producer
(``producer_id`` / ``producer_epoch``): replaying such a record does not change the committed offsets; it
adds a *pending* offset of that producer. The COMMIT marker of the producer's transaction on this
partition makes its pending offsets committed, the ABORT marker drops them.

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
- Validation is Kafka's for TxnOffsetCommit: member id, generation and instance id are checked only when
  one of them is given (versions before 3 carry none: accepted in every group state); a group that does
  not exist accepts generation -1 (a simple group is created by the replay) and refuses others with
  ILLEGAL_GENERATION; a KIP-848 member's stale epoch is ILLEGAL_GENERATION.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidelog.coordinator.consumer_group import ConsumerGroup
from tidelog.coordinator.errors import CoordinatorError
from tidelog.coordinator.group import ClassicGroup
from tidelog.coordinator.offsets import OffsetAndMetadata, OffsetStore
from tidelog.coordinator.records import OffsetCommitKey
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

if TYPE_CHECKING:
    from tidelog.coordinator.shard_state import ShardState

__all__ = [
    "PendingTransactionalOffsets",
    "commit_transactional_offsets",
    "txn_offset_commit_response",
    "validate_transactional_commit",
]

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


def validate_transactional_commit(
    request: TxnOffsetCommitRequest, classic: ClassicGroup | None, consumer: ConsumerGroup | None
) -> None:
    """Kafka's ``validateTransactionalOffsetCommit`` for the group the request names (a classic group, a
    KIP-848 consumer group, or neither when it does not exist)."""
    generation_id, member_id, instance_id = (
        request.generation_id,
        request.member_id,
        request.group_instance_id,
    )
    if consumer is not None:
        if generation_id < 0 and not consumer.members:
            return
        if generation_id < 0 and not member_id and instance_id is None:
            return  # TxnOffsetCommit needs no member fields: checked only when given
        member = consumer.members.get(member_id)
        if member is None:
            raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != member.member_epoch:
            raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)  # a stale member epoch, as Kafka maps it
        return
    if classic is not None:
        classic.validate_offset_commit(member_id, instance_id, generation_id, is_transactional=True)
        return
    if generation_id >= 0:
        raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)


def commit_transactional_offsets(
    state: ShardState, request: TxnOffsetCommitRequest, *, now_ms: int
) -> TxnOffsetCommitResponse:
    """Validate a TxnOffsetCommit and emit its offset records, replayed at once as pending offsets of
    ``request.producer_id`` (the runtime appends them in a transactional batch of that producer)."""
    if not request.group_id:
        return txn_offset_commit_response(request, ErrorCode.INVALID_GROUP_ID)
    try:
        validate_transactional_commit(
            request, state.groups.get(request.group_id), state.consumer_groups.get(request.group_id)
        )
    except CoordinatorError as exc:
        return txn_offset_commit_response(request, exc.error_code)
    max_metadata = state.config.offset_metadata_max_bytes
    response = TxnOffsetCommitResponse()
    for topic in request.topics:
        topic_response = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=topic.name)
        response.topics.append(topic_response)
        for p in topic.partitions:
            metadata = p.committed_metadata or ""
            error = ErrorCode.NONE
            if len(metadata) > max_metadata:
                error = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offset = OffsetAndMetadata(
                    committed_offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch,
                    metadata=metadata,
                    commit_timestamp_ms=now_ms,
                    expire_timestamp_ms=-1,
                )
                key = OffsetCommitKey(group=request.group_id, topic=topic.name, partition=p.partition_index)
                state.write(key, offset.to_record(), replay=True, producer_id=request.producer_id)
            topic_response.partitions.append(
                TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=error
                )
            )
    return response


def txn_offset_commit_response(request: TxnOffsetCommitRequest, error: ErrorCode) -> TxnOffsetCommitResponse:
    """``error`` for every partition of the request, in request order."""
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )
