"""The share coordinator (Kafka's ``ShareCoordinatorShard``): share-partition state kept in the compacted
internal topic ``__share_group_state`` as Kafka's ShareSnapshot records, served through the coordinator
runtime as ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87: start offsets only, for the admin side; it fences nobody, changes
nothing, and answers start offset -1 for a share-partition with no state).

Invariants:
- A share-partition (group, topic id, partition) lives on ``partition_for(group_id)`` of the topic (all of
  a group's share-partitions on one partition, so one group's writes are ordered).
- Every write is one ShareSnapshot record (key type 0) holding the partition's whole persisted window: its
  start offset and state batches (AVAILABLE with a delivery count, ACKNOWLEDGED, ARCHIVING (waiting for a
  dead-letter copy), ARCHIVED; ACQUIRED is never persisted). Compaction keeps the last one per key, so replaying a partition costs one record per
  share-partition (the window is offset ranges: a few batches), and no ShareUpdate deltas are needed. A
  ShareUpdate (key type 1) found in the log is applied over the snapshot (batches replace what they cover).
- Leader epochs fence share-partition leaders (Kafka's ``readStateAndMaybeUpdateLeaderEpoch``): a read
  with a higher leader epoch than the share-partition's records it (a ShareSnapshot, answered once
  committed), so from then on a write with a lower one is refused whole with FENCED_LEADER_EPOCH, and so is
  a read with a lower one: a deposed leader cannot bring an older window back.
- State epochs fence stale share-partition leaders after an administrator's reset or delete (Kafka's
  ``FENCED_STATE_EPOCH``): each share-partition's state carries the state epoch it was written with; a
  write whose state epoch (other than -1, "keep") is lower than the stored one is refused whole with
  FENCED_STATE_EPOCH and writes nothing; an equal or higher one is taken (and stored). A reset (the admin
  side's AlterShareGroupOffsets) writes the stored state epoch + 1, so the leader still holding the older
  window is fenced at its next write. A read answers the stored state epoch, which the leader writes with.
- A delete (a share group or its offsets removed by an admin) is a ShareSnapshot tombstone per
  share-partition: compaction then drops the key, and a replay forgets its state. The coordinator
  remembers the deleted state's epoch + 1 as the key's fence (also when replaying the tombstone after its
  snapshot): a stale leader's later write, at the old epoch, is FENCED_STATE_EPOCH and cannot resurrect
  the deleted state; a read of the key answers no state (start offset -1) at the fence epoch, so a leader
  that reloads writes new state at it. The fence lasts as long as the tombstone is in the log
  (``delete.retention.ms`` of the compacted topic, 24 h by default) or this coordinator keeps the
  partition loaded, whichever is longer.
- A write answers only once its record is committed (the runtime's rule); a read answers the state replayed
  and written so far. Requests for a loading partition get COORDINATOR_LOAD_IN_PROGRESS, for one not owned
  NOT_COORDINATOR.
"""

# ruff: noqa: ARG002 - PartitionedCoordinator methods whose arguments the share coordinator does not need
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tidelog.coordinator.common import CoordinatorRecord, CoordinatorRecordError, CoordinatorResult
from tidelog.coordinator.common._generated.records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
)
from tidelog.coordinator.common.partitioning import partition_for
from tidelog.coordinator.common.records import decode_body, encode_framed, read_prefix
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from tidelog.protocol.records import NO_PRODUCER_ID
from tidelog.protocol.schema import Request, Response

__all__ = ["SHARE_STATE_TOPIC", "PersistedState", "ShareStateCoordinator"]

SHARE_STATE_TOPIC = "__share_group_state"
_SNAPSHOT = 0
_UPDATE = 1

Batch = tuple[int, int, int, int]
"""(first_offset, last_offset, delivery_state, delivery_count)"""


@dataclass(slots=True)
class PersistedState:
    state_epoch: int
    start_offset: int
    batches: list[Batch] = field(default_factory=list)
    leader_epoch: int = 0
    """The share-partition leader's leader epoch that wrote it (older ones are fenced)."""


_Key = tuple[str, uuid.UUID, int]


class ShareStateCoordinator:
    """Share-partition state over the partitions of ``__share_group_state`` this broker leads."""

    def __init__(self, num_partitions: int) -> None:
        self._num_partitions = num_partitions
        self._loading: set[int] = set()
        self._states: dict[int, dict[_Key, PersistedState]] = {}
        self._fences: dict[int, dict[_Key, int]] = {}
        """Per partition: deleted share-partitions and the state epoch their next state must be at least."""
        self._group_counts: dict[str, int] = {}
        """Per group: how many share-partitions it has persisted (answers "is this a share group" in O(1))."""

    # -- PartitionedCoordinator ------------------------------------------------------------------------

    @property
    def topic_name(self) -> str:
        return SHARE_STATE_TOPIC

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @property
    def owned_partitions(self) -> list[int]:
        return sorted(self._states)

    def partition_for(self, key: str) -> int:
        return partition_for(key, self._num_partitions)

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def begin_loading(self, partition: int, coordinator_epoch: int) -> object:
        if partition in self._states:
            raise RuntimeError(f"{SHARE_STATE_TOPIC}-{partition} is owned already")
        self._states[partition] = {}
        self._fences[partition] = {}
        self._loading.add(partition)
        return self._states[partition]

    def replay(
        self,
        partition: int,
        key: bytes | memoryview,
        value: bytes | memoryview | None,
        producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        states = self._states[partition]
        record_type = read_prefix(key, "key", CoordinatorRecordError)
        if record_type == _SNAPSHOT:
            k = decode_body(ShareSnapshotKey, 0, key, CoordinatorRecordError, "ShareSnapshotKey")
            share_key = (k.group_id, k.topic_id, k.partition)
            if value is None:
                self._pop_and_fence(partition, share_key)
                return
            v = decode_body(ShareSnapshotValue, 0, value, CoordinatorRecordError, "ShareSnapshotValue")
            self._put(
                states,
                share_key,
                PersistedState(
                    v.state_epoch,
                    v.start_offset,
                    [
                        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in v.state_batches
                    ],
                    v.leader_epoch,
                ),
            )
        elif record_type == _UPDATE:
            u = decode_body(ShareUpdateKey, 1, key, CoordinatorRecordError, "ShareUpdateKey")
            share_key = (u.group_id, u.topic_id, u.partition)
            state = states.get(share_key)
            if value is None or state is None:
                return
            uv = decode_body(ShareUpdateValue, 0, value, CoordinatorRecordError, "ShareUpdateValue")
            state.start_offset = max(state.start_offset, uv.start_offset)
            for b in uv.state_batches:
                state.batches = _overlay(
                    state.batches, (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                )
        else:
            raise CoordinatorRecordError(f"record type {record_type} is not a share coordinator record")

    def replay_end_transaction_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        pass

    def complete_loading(self, partition: int, now_ms: int) -> CoordinatorResult[object]:
        self._loading.discard(partition)
        return CoordinatorResult()

    def unload(self, partition: int) -> CoordinatorResult[object]:
        for key in self._states.pop(partition, {}):
            self._count(key[0], -1)
        self._fences.pop(partition, None)
        self._loading.discard(partition)
        return CoordinatorResult()

    def on_timeout(self, key: object, now_ms: int) -> CoordinatorResult[object]:
        return CoordinatorResult()

    def handle(
        self, request: Request, api_version: int, *, now_ms: int, client_id: str = "", client_host: str = ""
    ) -> CoordinatorResult[object]:
        if isinstance(request, ReadShareGroupStateRequest):
            return self._read(request)
        if isinstance(request, WriteShareGroupStateRequest):
            return self._write(request)
        if isinstance(request, DeleteShareGroupStateRequest):
            return self._delete(request)
        if isinstance(request, ReadShareGroupStateSummaryRequest):
            return self._read_summary(request)
        raise TypeError(f"the share coordinator does not serve {type(request).__name__}")

    def error_response(self, request: Request, api_version: int, error: ErrorCode) -> Response:
        if isinstance(request, ReadShareGroupStateRequest):
            return ReadShareGroupStateResponse(
                results=[
                    ReadShareGroupStateResponse.ReadStateResult(
                        topic_id=t.topic_id,
                        partitions=[
                            ReadShareGroupStateResponse.PartitionResult(
                                partition=p.partition, error_code=error
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in request.topics
                ]
            )
        if isinstance(request, DeleteShareGroupStateRequest):
            return _delete_errors(request, error)
        if isinstance(request, ReadShareGroupStateSummaryRequest):
            return _summary(request, lambda _t, _p: (error, 0, -1))
        assert isinstance(request, WriteShareGroupStateRequest)
        return _write_errors(request, error)

    def append_error_to_response_error(self, error: ErrorCode) -> ErrorCode:
        if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # -- reads and writes ------------------------------------------------------------------------------

    def state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> PersistedState | None:
        """What is persisted for one share-partition (tests, tools)."""
        return self._states.get(self.partition_for(group_id), {}).get((group_id, topic_id, partition))

    def group_ids(self) -> set[str]:
        """The groups with persisted share-partition state on the partitions this broker owns."""
        return set(self._group_counts)

    def has_group(self, group_id: str) -> bool:
        return group_id in self._group_counts

    def _put(self, states: dict[_Key, PersistedState], key: _Key, state: PersistedState) -> None:
        if key not in states:
            self._count(key[0], 1)
        states[key] = state
        self._fences.get(self.partition_for(key[0]), {}).pop(key, None)  # the state carries its epoch now

    def _pop_and_fence(self, partition: int, key: _Key) -> PersistedState | None:
        """Delete ``key``'s state; a deleted state's epoch + 1 fences the writes of leaders that held it."""
        state = self._pop(self._states[partition], key)
        if state is not None:
            self._fences[partition][key] = state.state_epoch + 1
        return state

    def state_epoch(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """The state epoch of a share-partition: its state's, else its fence's (deleted), else 0."""
        key = (group_id, topic_id, partition)
        owner = self.partition_for(group_id)
        state = self._states.get(owner, {}).get(key)
        if state is not None:
            return state.state_epoch
        return self._fences.get(owner, {}).get(key, 0)

    def _pop(self, states: dict[_Key, PersistedState], key: _Key) -> PersistedState | None:
        state = states.pop(key, None)
        if state is not None:
            self._count(key[0], -1)
        return state

    def _count(self, group_id: str, delta: int) -> None:
        count = self._group_counts.get(group_id, 0) + delta
        if count:
            self._group_counts[group_id] = count
        else:
            self._group_counts.pop(group_id, None)

    def states_of(self, group_id: str) -> dict[tuple[uuid.UUID, int], PersistedState]:
        """Every persisted share-partition of ``group_id``, by (topic id, partition)."""
        states = self._states.get(self.partition_for(group_id), {})
        return {(k[1], k[2]): v for k, v in states.items() if k[0] == group_id}

    def _owner_error(self, group_id: str) -> ErrorCode:
        partition = self.partition_for(group_id)
        if partition not in self._states:
            return ErrorCode.NOT_COORDINATOR
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def _read(self, request: ReadShareGroupStateRequest) -> CoordinatorResult[object]:
        error = self._owner_error(request.group_id)
        if error != ErrorCode.NONE:
            return CoordinatorResult(response=self.error_response(request, 0, error))
        partition = self.partition_for(request.group_id)
        states = self._states[partition]
        response = ReadShareGroupStateResponse()
        records: list[CoordinatorRecord] = []
        for t in request.topics:
            result = ReadShareGroupStateResponse.ReadStateResult(topic_id=t.topic_id)
            for p in t.partitions:
                state = states.get((request.group_id, t.topic_id, p.partition))
                if state is None:
                    result.partitions.append(
                        ReadShareGroupStateResponse.PartitionResult(
                            partition=p.partition,
                            state_epoch=self.state_epoch(request.group_id, t.topic_id, p.partition),
                            start_offset=-1,
                        )
                    )
                    continue
                if p.leader_epoch < state.leader_epoch:
                    result.partitions.append(
                        ReadShareGroupStateResponse.PartitionResult(
                            partition=p.partition, error_code=ErrorCode.FENCED_LEADER_EPOCH
                        )
                    )
                    continue
                if p.leader_epoch > state.leader_epoch:  # a new leader: older ones are fenced from now on
                    state.leader_epoch = p.leader_epoch
                    records.append(_snapshot(request.group_id, t.topic_id, p.partition, state))
                result.partitions.append(
                    ReadShareGroupStateResponse.PartitionResult(
                        partition=p.partition,
                        state_epoch=state.state_epoch,
                        start_offset=state.start_offset,
                        state_batches=[
                            ReadShareGroupStateResponse.StateBatch(
                                first_offset=f, last_offset=last, delivery_state=s, delivery_count=c
                            )
                            for f, last, s, c in state.batches
                        ],
                    )
                )
            response.results.append(result)
        return CoordinatorResult(response=response, records={partition: records} if records else {})

    def _read_summary(self, request: ReadShareGroupStateSummaryRequest) -> CoordinatorResult[object]:
        error = self._owner_error(request.group_id)
        if error != ErrorCode.NONE:
            return CoordinatorResult(response=self.error_response(request, 0, error))
        states = self._states[self.partition_for(request.group_id)]

        def one(topic_id: uuid.UUID, partition: int) -> tuple[ErrorCode, int, int]:
            state = states.get((request.group_id, topic_id, partition))
            if state is None:
                return ErrorCode.NONE, self.state_epoch(request.group_id, topic_id, partition), -1
            return ErrorCode.NONE, state.state_epoch, state.start_offset

        return CoordinatorResult(response=_summary(request, one))

    def _write(self, request: WriteShareGroupStateRequest) -> CoordinatorResult[object]:
        error = self._owner_error(request.group_id)
        if error != ErrorCode.NONE:
            return CoordinatorResult(response=_write_errors(request, error))
        partition = self.partition_for(request.group_id)
        states = self._states[partition]
        for t in request.topics:
            for p in t.partitions:
                known = states.get((request.group_id, t.topic_id, p.partition))
                if known is not None and p.leader_epoch < known.leader_epoch:
                    return CoordinatorResult(response=_write_errors(request, ErrorCode.FENCED_LEADER_EPOCH))
                stored = self.state_epoch(request.group_id, t.topic_id, p.partition)
                if p.state_epoch != -1 and p.state_epoch < stored:  # reset or deleted since it was read
                    return CoordinatorResult(response=_write_errors(request, ErrorCode.FENCED_STATE_EPOCH))
        records: list[CoordinatorRecord] = []
        for t in request.topics:
            for p in t.partitions:
                batches = [
                    (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                    for b in p.state_batches
                ]
                state_epoch = p.state_epoch
                if state_epoch == -1:
                    state_epoch = self.state_epoch(request.group_id, t.topic_id, p.partition)
                self._put(
                    states,
                    (request.group_id, t.topic_id, p.partition),
                    PersistedState(state_epoch, p.start_offset, batches, p.leader_epoch),
                )
                records.append(
                    _snapshot(
                        request.group_id,
                        t.topic_id,
                        p.partition,
                        states[(request.group_id, t.topic_id, p.partition)],
                    )
                )
        return CoordinatorResult(
            response=_write_errors(request, ErrorCode.NONE), records={partition: records}
        )

    def _delete(self, request: DeleteShareGroupStateRequest) -> CoordinatorResult[object]:
        error = self._owner_error(request.group_id)
        if error != ErrorCode.NONE:
            return CoordinatorResult(response=_delete_errors(request, error))
        partition = self.partition_for(request.group_id)
        records: list[CoordinatorRecord] = []
        for t in request.topics:
            for p in t.partitions:
                if self._pop_and_fence(partition, (request.group_id, t.topic_id, p.partition)) is None:
                    continue
                key = ShareSnapshotKey(group_id=request.group_id, topic_id=t.topic_id, partition=p.partition)
                records.append(CoordinatorRecord(encode_framed(_SNAPSHOT, key, 0), None))
        return CoordinatorResult(
            response=_delete_errors(request, ErrorCode.NONE), records={partition: records} if records else {}
        )


def _summary(
    request: ReadShareGroupStateSummaryRequest,
    answer: Callable[[uuid.UUID, int], tuple[ErrorCode, int, int]],
) -> ReadShareGroupStateSummaryResponse:
    """A summary response: (error, state epoch, start offset) of each share-partition asked for."""
    response = ReadShareGroupStateSummaryResponse()
    for t in request.topics:
        result = ReadShareGroupStateSummaryResponse.ReadStateSummaryResult(topic_id=t.topic_id)
        for p in t.partitions:
            error, state_epoch, start = answer(t.topic_id, p.partition)
            result.partitions.append(
                ReadShareGroupStateSummaryResponse.PartitionResult(
                    partition=p.partition, error_code=error, state_epoch=state_epoch, start_offset=start
                )
            )
        response.results.append(result)
    return response


def _delete_errors(request: DeleteShareGroupStateRequest, error: ErrorCode) -> DeleteShareGroupStateResponse:
    return DeleteShareGroupStateResponse(
        results=[
            DeleteShareGroupStateResponse.DeleteStateResult(
                topic_id=t.topic_id,
                partitions=[
                    DeleteShareGroupStateResponse.PartitionResult(partition=p.partition, error_code=error)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def _snapshot(group_id: str, topic_id: uuid.UUID, partition: int, state: PersistedState) -> CoordinatorRecord:
    """The ShareSnapshot record of one share-partition's whole persisted state."""
    key = ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition)
    value = ShareSnapshotValue(
        snapshot_epoch=0,
        state_epoch=state.state_epoch,
        leader_epoch=state.leader_epoch,
        start_offset=state.start_offset,
        state_batches=[
            ShareSnapshotValue.StateBatch(
                first_offset=f, last_offset=last, delivery_state=s, delivery_count=c
            )
            for f, last, s, c in state.batches
        ],
    )
    return CoordinatorRecord(encode_framed(_SNAPSHOT, key, 0), encode_framed(0, value, 0))


def _write_errors(request: WriteShareGroupStateRequest, error: ErrorCode) -> WriteShareGroupStateResponse:
    return WriteShareGroupStateResponse(
        results=[
            WriteShareGroupStateResponse.WriteStateResult(
                topic_id=t.topic_id,
                partitions=[
                    WriteShareGroupStateResponse.PartitionResult(partition=p.partition, error_code=error)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def _overlay(batches: list[Batch], new: Batch) -> list[Batch]:
    """``batches`` with ``new`` replacing the offsets it covers."""
    first, last = new[0], new[1]
    out: list[Batch] = []
    for b in batches:
        if b[1] < first or b[0] > last:
            out.append(b)
            continue
        if b[0] < first:
            out.append((b[0], first - 1, b[2], b[3]))
        if b[1] > last:
            out.append((last + 1, b[1], b[2], b[3]))
    out.append(new)
    return sorted(out)
