"""The share coordinator fences share-partition leaders by leader epoch: a write from an older leader epoch
than the one that last wrote the share-partition is refused with FENCED_LEADER_EPOCH and writes nothing,
also after the state is replayed from its ShareSnapshot record (a new coordinator after failover)."""

from __future__ import annotations

import uuid

from tidelog.coordinator.common import CoordinatorRecord
from tidelog.coordinator.share.state_coordinator import ShareStateCoordinator
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import WriteShareGroupStateRequest, WriteShareGroupStateResponse

TOPIC_ID = uuid.UUID(int=7)


def _coordinator() -> ShareStateCoordinator:
    coordinator = ShareStateCoordinator(1)
    coordinator.begin_loading(0, 0)
    return coordinator


def _write(
    coordinator: ShareStateCoordinator, leader_epoch: int, start: int
) -> tuple[int, list[CoordinatorRecord]]:
    request = WriteShareGroupStateRequest(
        group_id="g",
        topics=[
            WriteShareGroupStateRequest.WriteStateData(
                topic_id=TOPIC_ID,
                partitions=[
                    WriteShareGroupStateRequest.PartitionData(
                        partition=0, state_epoch=1, leader_epoch=leader_epoch, start_offset=start
                    )
                ],
            )
        ],
    )
    result = coordinator.handle(request, 0, now_ms=0)
    assert isinstance(result.response, WriteShareGroupStateResponse)
    return result.response.results[0].partitions[0].error_code, result.records.get(0, [])


def test_an_older_leader_epoch_is_fenced() -> None:
    coordinator = _coordinator()
    coordinator.complete_loading(0, 0)
    assert _write(coordinator, 5, 10)[0] == ErrorCode.NONE
    error, records = _write(coordinator, 4, 3)
    assert (error, records) == (ErrorCode.FENCED_LEADER_EPOCH, [])
    assert _write(coordinator, 5, 12)[0] == ErrorCode.NONE
    state = coordinator.state("g", TOPIC_ID, 0)
    assert state is not None
    assert (state.start_offset, state.leader_epoch) == (12, 5)


def test_the_fence_survives_a_replay() -> None:
    first = _coordinator()
    first.complete_loading(0, 0)
    _error, records = _write(first, 6, 20)
    second = _coordinator()
    for record in records:
        second.replay(0, record.key, record.value)
    second.complete_loading(0, 0)
    assert _write(second, 5, 1)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert _write(second, 7, 21)[0] == ErrorCode.NONE
