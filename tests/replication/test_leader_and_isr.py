"""The controller's elections and ISR removal (Kafka's PartitionLeaderElectionAlgorithms), table-driven."""

from __future__ import annotations

import pytest

from tidelog.replication.leader_and_isr import (
    NO_LEADER,
    LeaderAndIsr,
    controlled_shutdown_election,
    initial_leader_and_isr,
    offline_partition_election,
    preferred_replica_election,
    remove_replica_from_isr,
    remove_replicas_from_isr,
)


def state(leader: int, isr: tuple[int, ...], epoch: int = 4) -> LeaderAndIsr:
    return LeaderAndIsr(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1, partition_epoch=9)


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "unclean", "expected"),
    [
        ((1, 2, 3), (1, 2, 3), {2, 3}, False, (2, (2, 3))),  # first live ISR member in assignment order
        ((3, 2, 1), (1, 2, 3), {1, 2}, False, (2, (1, 2))),  # assignment order, not ISR order
        ((1, 2, 3), (1,), {2, 3}, False, None),  # no live ISR member: offline
        ((1, 2, 3), (1,), {2, 3}, True, (2, (2,))),  # unclean: first live replica, ISR of itself
        ((1, 2, 3), (1, 2), set(), True, None),  # nobody alive
    ],
)
def test_offline_partition_election(
    assignment: tuple[int, ...],
    isr: tuple[int, ...],
    live: set[int],
    unclean: bool,
    expected: tuple[int, tuple[int, ...]] | None,
) -> None:
    elected = offline_partition_election(assignment, state(1, isr), live, unclean=unclean)
    if expected is None:
        assert elected is None
        return
    assert elected is not None
    assert (elected.leader, elected.isr) == expected
    assert (elected.leader_epoch, elected.controller_epoch, elected.partition_epoch) == (5, 1, 9)


def test_controlled_shutdown_moves_leadership_and_drops_the_broker_from_the_isr() -> None:
    moved = controlled_shutdown_election((1, 2, 3), state(1, (1, 2, 3)), {1, 2, 3}, {1})
    assert moved is not None
    assert (moved.leader, moved.isr, moved.leader_epoch) == (2, (2, 3), 5)
    assert controlled_shutdown_election((1, 2), state(1, (1,)), {1, 2}, {1}) is None


def test_preferred_replica_election() -> None:
    back = preferred_replica_election((1, 2, 3), state(2, (1, 2, 3)), {1, 2, 3})
    assert back is not None
    assert (back.leader, back.isr, back.leader_epoch) == (1, (1, 2, 3), 5)
    assert preferred_replica_election((1, 2, 3), state(1, (1, 2)), {1, 2}) is None
    assert preferred_replica_election((1, 2, 3), state(2, (2, 3)), {1, 2, 3}) is None
    assert preferred_replica_election((1, 2, 3), state(2, (1, 2)), {2, 3}) is None


def test_removing_replicas_never_empties_the_isr() -> None:
    follower_gone = remove_replica_from_isr(state(1, (1, 2, 3)), 3)
    assert (follower_gone.leader, follower_gone.isr, follower_gone.leader_epoch) == (1, (1, 2), 5)
    leader_gone = remove_replica_from_isr(state(1, (1, 2)), 1)
    assert (leader_gone.leader, leader_gone.isr) == (NO_LEADER, (2,))
    last = remove_replica_from_isr(state(2, (2,)), 2)
    assert (last.leader, last.isr) == (NO_LEADER, (2,))
    assert not last.has_leader


def test_initial_state_leads_with_the_first_live_replica_and_an_isr_of_the_live_ones() -> None:
    first = initial_leader_and_isr((3, 1, 2), {1, 2, 3}, controller_epoch=7)
    assert first == LeaderAndIsr(leader=3, leader_epoch=0, isr=(3, 1, 2), controller_epoch=7)
    partial = initial_leader_and_isr((3, 1, 2), {1, 2}, controller_epoch=7)
    assert partial is not None
    assert (partial.leader, partial.isr) == (1, (1, 2))
    assert initial_leader_and_isr((3, 1, 2), {4}, controller_epoch=7) is None


def test_removing_several_replicas_is_one_leader_epoch_and_never_empties_the_isr() -> None:
    followers = remove_replicas_from_isr(state(1, (1, 2, 3)), {2, 3})
    assert followers is not None
    assert (followers.leader, followers.isr, followers.leader_epoch) == (1, (1,), 5)
    everyone = remove_replicas_from_isr(state(1, (1, 2, 3)), {1, 2, 3})
    assert everyone is not None
    assert (everyone.leader, everyone.isr, everyone.leader_epoch) == (NO_LEADER, (3,), 5)
    assert remove_replicas_from_isr(state(1, (1, 2)), {4}) is None  # not in the ISR: nothing to write
    assert remove_replicas_from_isr(state(NO_LEADER, (2,)), {2}) is None  # already offline, ISR kept
