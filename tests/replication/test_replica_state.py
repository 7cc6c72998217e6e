"""A leader's view of one follower: caught-up time as Kafka's Replica.updateFetchState computes it."""

from __future__ import annotations

from tidelog.replication.replica_state import UNKNOWN_OFFSET, FollowerState

LAG_MS = 10_000


def fetch(state: FollowerState, offset: int, at_ms: int, leader_leo: int) -> None:
    state.update_fetch_state(
        fetch_offset=offset,
        log_start_offset=0,
        fetch_time_ms=at_ms,
        leader_log_end_offset=leader_leo,
        broker_epoch=7,
    )


def test_a_fetch_reaching_the_leader_end_is_caught_up_now() -> None:
    state = FollowerState(2)
    fetch(state, 10, 1_000, 10)
    assert (state.log_end_offset, state.last_caught_up_time_ms, state.broker_epoch) == (10, 1_000, 7)


def test_reaching_the_previous_fetch_time_leader_end_counts_as_caught_up_then() -> None:
    state = FollowerState(2)
    fetch(state, 5, 1_000, 10)  # behind: not caught up
    assert state.last_caught_up_time_ms == 0
    fetch(state, 10, 2_000, 15)  # reached what the leader had at the previous fetch
    assert state.last_caught_up_time_ms == 1_000
    fetch(state, 12, 3_000, 20)  # behind both: unchanged
    assert state.last_caught_up_time_ms == 1_000
    assert not state.is_caught_up(leader_log_end_offset=20, now_ms=1_000 + LAG_MS + 1, max_lag_ms=LAG_MS)
    assert state.is_caught_up(leader_log_end_offset=20, now_ms=1_000 + LAG_MS, max_lag_ms=LAG_MS)
    assert state.is_caught_up(leader_log_end_offset=12, now_ms=10**9, max_lag_ms=LAG_MS)  # same end


def test_caught_up_time_never_goes_back() -> None:
    state = FollowerState(2)
    fetch(state, 10, 5_000, 10)
    fetch(state, 10, 4_000, 10)  # a late fetch
    assert state.last_caught_up_time_ms == 5_000


def test_reset_on_a_new_leader_epoch() -> None:
    state = FollowerState(2)
    fetch(state, 10, 5_000, 10)
    state.reset(now_ms=9_000, leader_log_end_offset=12, new_leader=False, in_sync=True)
    assert (state.log_end_offset, state.last_caught_up_time_ms, state.last_fetch_time_ms) == (
        10,
        9_000,
        9_000,
    )
    assert state.last_fetch_leader_log_end_offset == 12
    state.reset(now_ms=9_500, leader_log_end_offset=12, new_leader=True, in_sync=False)
    assert (state.log_end_offset, state.last_caught_up_time_ms, state.broker_epoch) == (UNKNOWN_OFFSET, 0, -1)
