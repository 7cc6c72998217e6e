"""The share coordinator fences share-partition leaders by leader epoch: a write (or read) from an older
leader epoch than the one that last wrote or read the share-partition is refused with FENCED_LEADER_EPOCH
and writes nothing, also after the state is replayed from its ShareSnapshot record (a new coordinator
after failover); a read from a newer leader epoch records it (a ShareSnapshot) before answering."""

from __future__ import annotations

from tests.support.share_state import TOPIC_ID, loading_coordinator, read_state, write_state

from tidelog.coordinator.common import CoordinatorRecord
from tidelog.coordinator.share.state_coordinator import ShareStateCoordinator
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ReadShareGroupStateResponse


def _coordinator() -> ShareStateCoordinator:
    return loading_coordinator()


def _write(
    coordinator: ShareStateCoordinator, leader_epoch: int, start: int
) -> tuple[int, list[CoordinatorRecord]]:
    return write_state(coordinator, state_epoch=1, leader_epoch=leader_epoch, start=start)


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


def _read(
    coordinator: ShareStateCoordinator, leader_epoch: int
) -> tuple[ReadShareGroupStateResponse.PartitionResult, list[CoordinatorRecord]]:
    return read_state(coordinator, leader_epoch)


def test_a_new_leaders_read_fences_the_old_leader() -> None:
    coordinator = _coordinator()
    coordinator.complete_loading(0, 0)
    _write(coordinator, 2, 30)
    same, none = _read(coordinator, 2)
    assert (same.error_code, same.start_offset, none) == (ErrorCode.NONE, 30, [])
    newer, records = _read(coordinator, 3)
    assert (newer.error_code, newer.start_offset, len(records)) == (ErrorCode.NONE, 30, 1)
    assert _write(coordinator, 2, 31)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert _read(coordinator, 2)[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    replayed = _coordinator()
    for record in records:
        replayed.replay(0, record.key, record.value)
    replayed.complete_loading(0, 0)
    assert _write(replayed, 2, 31)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert _write(replayed, 3, 31)[0] == ErrorCode.NONE
