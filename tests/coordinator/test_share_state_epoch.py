"""The share coordinator fences stale share-partition leaders by state epoch (Kafka's FENCED_STATE_EPOCH):
a write at a lower state epoch than the stored one is refused and writes nothing, an equal one is taken,
an administrator's reset (stored epoch + 1) fences the leader that still writes the old one, and after a
delete a stale leader's write cannot bring the deleted state back (also after a replay of the tombstone),
while a leader that reloads (reads the fence epoch) writes new state."""

from __future__ import annotations

from tests.support.share_state import (
    TOPIC_ID,
    delete_state,
    loading_coordinator,
    read_state,
    write_state,
)

from tidelog.coordinator.common import CoordinatorRecord
from tidelog.coordinator.share.state_coordinator import ShareStateCoordinator
from tidelog.protocol.errors import ErrorCode


def _coordinator() -> ShareStateCoordinator:
    coordinator = loading_coordinator()
    coordinator.complete_loading(0, 0)
    return coordinator


def _write(
    coordinator: ShareStateCoordinator, state_epoch: int, start: int
) -> tuple[int, list[CoordinatorRecord]]:
    return write_state(coordinator, state_epoch=state_epoch, leader_epoch=3, start=start)


def _read(coordinator: ShareStateCoordinator) -> tuple[int, int, int]:
    p, _records = read_state(coordinator, 3)
    return p.error_code, p.state_epoch, p.start_offset


def _delete(coordinator: ShareStateCoordinator) -> list[CoordinatorRecord]:
    return delete_state(coordinator)


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
