"""The controller's view and the decisions it makes from a freshly read partition state (pure)."""

from __future__ import annotations

import uuid

from tidelog.protocol import TopicPartition
from tidelog.replication.controller_context import BrokerChanges, ControllerContext
from tidelog.replication.leader_and_isr import NO_LEADER, LeaderAndIsr

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def state(leader: int, isr: tuple[int, ...], leader_epoch: int = 3) -> LeaderAndIsr:
    return LeaderAndIsr(leader, leader_epoch, isr, controller_epoch=1, partition_epoch=8)


def context(live: dict[int, int] | None = None) -> ControllerContext:
    ctx = ControllerContext(epoch=2)
    ctx.add_live_brokers(live if live is not None else {1: 100, 2: 200, 3: 300})
    ctx.add_topic("t", uuid.uuid4(), {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    return ctx


def test_broker_changes_tell_new_dead_and_bounced_brokers() -> None:
    ctx = context()
    assert ctx.broker_changes({1: 100, 2: 200, 3: 300}) == BrokerChanges()
    assert not ctx.broker_changes({1: 100, 2: 200, 3: 300})
    changes = ctx.broker_changes({1: 150, 3: 300, 4: 400})
    assert changes == BrokerChanges(new=(4,), dead=(2,), bounced=(1,))


def test_shutting_down_brokers_are_registered_but_not_live() -> None:
    ctx = context()
    ctx.shutting_down_broker_ids.add(2)
    assert ctx.live_broker_ids == {1, 3}
    assert ctx.live_or_shutting_down_broker_ids == {1, 2, 3}
    ctx.remove_live_brokers([2])
    assert ctx.shutting_down_broker_ids == set()


def test_new_and_offline_partitions_leave_out_topics_being_deleted() -> None:
    ctx = context()
    ctx.leadership[T0] = state(1, (1, 2, 3))
    ctx.leadership[T1] = state(4, (4,))  # leader not registered
    assert ctx.new_partitions() == [T2]
    assert ctx.offline_partitions() == [T1]
    ctx.shutting_down_broker_ids.add(1)
    assert ctx.offline_partitions() == [T1]  # a broker shutting down still leads
    ctx.topics_to_delete.add("t")
    assert ctx.new_partitions() == []
    assert ctx.offline_partitions() == []


def test_initial_state_uses_live_replicas_in_assignment_order() -> None:
    ctx = context({1: 100, 3: 300})
    assert ctx.initial_state(T1) == LeaderAndIsr(3, 0, (3, 1), controller_epoch=2)


def test_offline_decision_elects_the_first_live_isr_member_or_takes_the_leader_away() -> None:
    ctx = context({2: 200, 3: 300})
    elected = ctx.decide_offline(T0, state(1, (1, 3, 2)), unclean=False)
    assert elected is not None
    assert (elected.leader, elected.isr, elected.leader_epoch) == (2, (3, 2), 4)  # ISR order kept
    nobody = ctx.decide_offline(T0, state(1, (1,)), unclean=False)
    assert nobody is not None
    assert (nobody.leader, nobody.isr, nobody.leader_epoch) == (NO_LEADER, (1,), 4)
    assert ctx.decide_offline(T0, state(NO_LEADER, (1,)), unclean=False) is None  # stays offline
    unclean = ctx.decide_offline(T0, state(NO_LEADER, (1,)), unclean=True)
    assert unclean is not None
    assert (unclean.leader, unclean.isr) == (2, (2,))


def test_offline_decision_removes_failed_followers_only_when_asked() -> None:
    ctx = context({2: 200, 3: 300})
    assert ctx.decide_offline(T1, state(2, (2, 1, 3)), unclean=False) is None
    removed = ctx.decide_offline(T1, state(2, (2, 1, 3)), unclean=False, offline_followers=[1])
    assert removed is not None
    assert (removed.leader, removed.isr, removed.leader_epoch) == (2, (2, 3), 4)


def test_only_partitions_without_live_isr_members_need_the_unclean_config() -> None:
    ctx = context({2: 200})
    assert ctx.needs_unclean_check(state(1, (1, 3)))
    assert not ctx.needs_unclean_check(state(1, (1, 2)))
    assert not ctx.needs_unclean_check(state(2, (2,)))


def test_controlled_shutdown_moves_leadership_and_leaves_follower_isrs() -> None:
    ctx = context()
    ctx.shutting_down_broker_ids.add(1)
    moved = ctx.decide_controlled_shutdown(T0, state(1, (1, 2, 3)), 1)
    assert moved is not None
    assert (moved.leader, moved.isr, moved.leader_epoch) == (2, (2, 3), 4)
    left = ctx.decide_controlled_shutdown(T1, state(2, (2, 3, 1)), 1)
    assert left is not None
    assert (left.leader, left.isr) == (2, (2, 3))
    assert ctx.decide_controlled_shutdown(T0, state(1, (1,)), 1) is None  # nobody else can lead
    assert ctx.decide_controlled_shutdown(T1, state(2, (2, 3)), 1) is None  # not in the ISR
    assert ctx.decide_controlled_shutdown(T1, state(NO_LEADER, (1,)), 1) is None  # never emptied


def test_preferred_replica_imbalance_is_per_broker_above_the_percentage() -> None:
    ctx = context()
    ctx.add_topic("u", None, {0: [1, 2], 1: [1, 2], 2: [1, 2], 3: [2, 1]})
    for tp in ctx.partitions():
        ctx.leadership[tp] = state(ctx.replicas(tp)[0], ctx.replicas(tp))
    assert ctx.preferred_replica_imbalance(10) == []
    ctx.leadership[TopicPartition("u", 0)] = state(2, (2, 1))  # broker 1 leads 3 of its 4 preferred
    assert ctx.preferred_replica_imbalance(25) == []  # 1/4 is not above 25 %
    assert ctx.preferred_replica_imbalance(24) == [TopicPartition("u", 0)]
    ctx.remove_live_brokers([1])  # the preferred replica is not live
    assert ctx.preferred_replica_imbalance(0) == []


def test_unclean_decision_only_for_partitions_without_a_leader() -> None:
    ctx = context({3: 300})
    assert ctx.decide_unclean(T2, state(3, (3,))) is None
    elected = ctx.decide_unclean(T0, state(NO_LEADER, (1,)))
    assert elected is not None
    assert (elected.leader, elected.isr) == (3, (3,))


def test_removing_a_topic_forgets_its_states_and_deletion() -> None:
    ctx = context()
    ctx.leadership[T0] = state(1, (1,))
    ctx.topics_to_delete.add("t")
    ctx.remove_topic("t")
    assert (ctx.all_topics, ctx.leadership, ctx.topics_to_delete, ctx.topic_ids) == (
        frozenset(),
        {},
        set(),
        {},
    )
