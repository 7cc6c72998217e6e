"""The replica sets of a partition move (Kafka's ``ReplicaAssignment.reassignTo``), its completeness, the
state that completes it and the validation of a target."""

from __future__ import annotations

from tidelog.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from tidelog.replication.reassignment import PartitionReassignment, completed_state, invalid_target


def test_a_move_lists_target_first_then_the_replicas_it_removes() -> None:
    moved = PartitionReassignment((1, 2, 3)).reassign_to([2, 3, 4])
    assert moved == PartitionReassignment((2, 3, 4, 1), adding=(4,), removing=(1,))
    assert moved.origin == (2, 3, 1)
    assert moved.target == (2, 3, 4)
    assert moved.is_being_reassigned


def test_a_new_target_replaces_a_move_in_progress_relative_to_the_original_replicas() -> None:
    moving = PartitionReassignment((1, 2, 3)).reassign_to([2, 3, 4])
    assert moving.reassign_to([2, 3, 5]) == PartitionReassignment((2, 3, 5, 1), adding=(5,), removing=(1,))
    assert moving.reassign_to([1, 2, 3]) == PartitionReassignment((1, 2, 3))
    assert moving.cancelled() == PartitionReassignment((2, 3, 1))
    assert moving.completed() == PartitionReassignment((2, 3, 4))


def test_a_reorder_is_no_move() -> None:
    assert not PartitionReassignment((1, 2, 3)).reassign_to([3, 2, 1]).is_being_reassigned


def test_complete_once_every_target_replica_is_in_the_isr() -> None:
    moving = PartitionReassignment((1, 2, 3)).reassign_to([2, 3, 4])
    assert not moving.is_complete((1, 2, 3))
    assert moving.is_complete((1, 2, 3, 4))


def test_the_completing_state_moves_the_leader_into_the_target_and_drops_the_removed_replicas() -> None:
    state = LeaderAndIsr(1, 5, (1, 2, 3, 4), controller_epoch=1, partition_epoch=9)
    done = completed_state(state, (2, 3, 4), live={1, 2, 3, 4})
    assert (done.leader, done.leader_epoch, done.isr) == (2, 6, (2, 3, 4))
    kept = completed_state(LeaderAndIsr(3, 5, (1, 2, 3, 4), controller_epoch=1), (2, 3, 4), live={1, 2, 3, 4})
    assert (kept.leader, kept.leader_epoch, kept.isr) == (3, 6, (2, 3, 4))
    dead_leader = completed_state(LeaderAndIsr(3, 5, (2, 3, 4), controller_epoch=1), (2, 3, 4), live={2, 4})
    assert (dead_leader.leader, dead_leader.isr) == (2, (2, 3, 4))


def test_a_cancel_whose_original_replicas_left_the_isr_leaves_no_leader_and_keeps_the_isr() -> None:
    state = LeaderAndIsr(4, 5, (4,), controller_epoch=1)
    done = completed_state(state, (1, 2, 3), live={1, 2, 3, 4})
    assert (done.leader, done.isr) == (NO_LEADER, (4,))


def test_invalid_targets() -> None:
    current = PartitionReassignment((1, 2, 3))
    live = {1, 2, 3, 4}
    assert invalid_target(current, [], live) == "Empty replica list specified in partition reassignment."
    assert invalid_target(current, [1, 1, 2], live) is not None
    assert invalid_target(current, [1, -2, 3], live) is not None
    assert invalid_target(current, [1, 2, 9], live) == (
        "Replica assignment has brokers that are not alive. Replica list: [9], live broker list: [1, 2, 3, 4]"
    )
    assert invalid_target(current, [2, 3, 4], live) is None
    assert invalid_target(PartitionReassignment((1, 2, 9)), [1, 2, 9], live) is None  # nothing added
