"""The share coordinator fences stale share-partition leaders by state epoch (Kafka's FENCED_STATE_EPOCH):
a write at a lower state epoch than the stored one is refused and writes nothing, an equal one is taken,
an administrator's reset (stored epoch + 1) fences the leader that still writes the old one, and after a
delete a stale leader's write cannot bring the deleted state back (also after a replay of the tombstone),
while a leader that reloads (reads the fence epoch) writes new state."""

from __future__ import annotations

import uuid

from tidelog.coordinator.common import CoordinatorRecord
from tidelog.coordinator.share.state_coordinator import ShareStateCoordinator
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)

TOPIC_ID = uuid.UUID(int=7)


def _coordinator() -> ShareStateCoordinator:
    coordinator = ShareStateCoordinator(1)
    coordinator.begin_loading(0, 0)
    coordinator.complete_loading(0, 0)
    return coordinator


def _write(
    coordinator: ShareStateCoordinator, state_epoch: int, start: int
) -> tuple[int, list[CoordinatorRecord]]:
    request = WriteShareGroupStateRequest(
        group_id="g",
        topics=[
            WriteShareGroupStateRequest.WriteStateData(
                topic_id=TOPIC_ID,
                partitions=[
                    WriteShareGroupStateRequest.PartitionData(
                        partition=0, state_epoch=state_epoch, leader_epoch=3, start_offset=start
                    )
                ],
            )
        ],
    )
    result = coordinator.handle(request, 0, now_ms=0)
    assert isinstance(result.response, WriteShareGroupStateResponse)
    return result.response.results[0].partitions[0].error_code, result.records.get(0, [])


def _read(coordinator: ShareStateCoordinator) -> tuple[int, int, int]:
    request = ReadShareGroupStateRequest(
        group_id="g",
        topics=[
            ReadShareGroupStateRequest.ReadStateData(
                topic_id=TOPIC_ID,
                partitions=[ReadShareGroupStateRequest.PartitionData(partition=0, leader_epoch=3)],
            )
        ],
    )
    response = coordinator.handle(request, 0, now_ms=0).response
    assert isinstance(response, ReadShareGroupStateResponse)
    p = response.results[0].partitions[0]
    return p.error_code, p.state_epoch, p.start_offset


def _delete(coordinator: ShareStateCoordinator) -> list[CoordinatorRecord]:
    request = DeleteShareGroupStateRequest(
        group_id="g",
        topics=[
            DeleteShareGroupStateRequest.DeleteStateData(
                topic_id=TOPIC_ID, partitions=[DeleteShareGroupStateRequest.PartitionData(partition=0)]
            )
        ],
    )
    return coordinator.handle(request, 0, now_ms=0).records.get(0, [])


def test_a_lower_state_epoch_is_fenced_an_equal_one_taken() -> None:
    coordinator = _coordinator()
    assert _write(coordinator, 0, 10)[0] == ErrorCode.NONE
    assert _write(coordinator, 0, 11)[0] == ErrorCode.NONE
    assert _write(coordinator, 2, 12)[0] == ErrorCode.NONE  # a reset: the stored epoch + 1 (and more)
    assert _write(coordinator, 1, 13) == (ErrorCode.FENCED_STATE_EPOCH, [])
    assert _write(coordinator, -1, 14)[0] == ErrorCode.NONE  # -1: keep the stored epoch
    assert _read(coordinator) == (ErrorCode.NONE, 2, 14)
    assert coordinator.state_epoch("g", TOPIC_ID, 0) == 2


def test_a_reset_fences_the_leader_that_read_before_it() -> None:
    coordinator = _coordinator()
    _write(coordinator, 0, 10)
    _error, epoch, _start = _read(coordinator)  # the leader loads epoch 0
    _write(coordinator, coordinator.state_epoch("g", TOPIC_ID, 0) + 1, 50)  # the admin's reset
    assert _write(coordinator, epoch, 12) == (ErrorCode.FENCED_STATE_EPOCH, [])
    assert _read(coordinator) == (ErrorCode.NONE, 1, 50)  # the leader reloads the reset window
    assert _write(coordinator, 1, 51)[0] == ErrorCode.NONE


def test_a_stale_write_after_a_delete_is_fenced_also_after_a_replay() -> None:
    coordinator = _coordinator()
    _error, written = _write(coordinator, 4, 10)
    tombstones = _delete(coordinator)
    assert [r.value for r in tombstones] == [None]
    assert coordinator.state("g", TOPIC_ID, 0) is None
    assert coordinator.group_ids() == set()
    assert _write(coordinator, 4, 12) == (ErrorCode.FENCED_STATE_EPOCH, [])
    assert coordinator.state("g", TOPIC_ID, 0) is None  # not resurrected

    replayed = ShareStateCoordinator(1)
    replayed.begin_loading(0, 0)
    for record in [*written, *tombstones]:
        replayed.replay(0, record.key, record.value)
    replayed.complete_loading(0, 0)
    assert _write(replayed, 4, 12)[0] == ErrorCode.FENCED_STATE_EPOCH
    assert _read(replayed) == (ErrorCode.NONE, 5, -1)  # no state, at the fence epoch
    assert _write(replayed, 5, 0)[0] == ErrorCode.NONE  # a reloaded leader starts afresh
    assert _write(replayed, 4, 1)[0] == ErrorCode.FENCED_STATE_EPOCH
    state = replayed.state("g", TOPIC_ID, 0)
    assert state is not None
    assert (state.state_epoch, state.start_offset) == (5, 0)
