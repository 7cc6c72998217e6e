"""The plan of ``tidelog brokers drain``: which partitions move, the order of their replicas, the new
replica chosen for balance and racks, and the refusals (pure: no cluster)."""

from __future__ import annotations

import pytest

from tidelog.cli._drain_plan import DrainError, plan_drain

NO_RACKS: dict[int, str | None] = {1: None, 2: None, 3: None, 4: None}


def test_only_partitions_on_the_broker_move_keeping_the_order_of_the_others() -> None:
    assignment = {
        ("t", 0): (1, 2, 3),  # broker 1 leads: 2 becomes the preferred leader
        ("t", 1): (2, 1, 3),  # broker 2 stays the preferred leader
        ("t", 2): (2, 3, 4),  # not on broker 1: not in the plan
        ("__consumer_offsets", 0): (3, 4, 1),
    }
    plan = plan_drain(1, NO_RACKS, assignment)
    assert plan.broker_id == 1
    assert plan.current == {
        ("__consumer_offsets", 0): (3, 4, 1),
        ("t", 0): (1, 2, 3),
        ("t", 1): (2, 1, 3),
    }
    assert plan.proposed == {
        ("__consumer_offsets", 0): (3, 4, 2),
        ("t", 0): (2, 3, 4),
        ("t", 1): (2, 3, 4),
    }
    assert list(plan.proposed) == sorted(plan.proposed)


def test_the_new_replicas_go_to_the_least_loaded_brokers() -> None:
    live: dict[int, str | None] = dict.fromkeys(range(1, 6))
    assignment = {
        ("a", 0): (2, 3),
        ("a", 1): (2, 3),
        ("a", 2): (2, 4),
        ("b", 0): (1, 2),
        ("b", 1): (1, 3),
        ("b", 2): (3, 1),
        ("b", 3): (1, 2),
    }
    # load before: 2 -> 5, 3 -> 4, 4 -> 1, 5 -> 0
    plan = plan_drain(1, live, assignment)
    assert plan.proposed == {
        ("b", 0): (2, 5),  # 5 (0 replicas)
        ("b", 1): (3, 4),  # 4 (1) over 5 (1): lowest id on a tie
        ("b", 2): (3, 5),  # 5 (1) over 4 (2)
        ("b", 3): (2, 4),  # 4 (2) over 5 (2): lowest id
    }


def test_racks_are_spread_when_every_other_broker_has_one() -> None:
    live = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "a"}
    assignment = {("t", 0): (1, 3, 4), ("u", 0): (3, 1, 5)}
    # load before: 2 -> 0, 3 -> 2, 4 -> 1, 5 -> 1, 6 -> 0
    plan = plan_drain(1, live, assignment)
    # t-0 keeps rack b: 2, 5 and 6 are on other racks; 2 and 6 hold nothing, 2 by id
    assert plan.proposed[("t", 0)] == (3, 4, 2)
    # u-0 keeps racks b and c: 2 and 6 are on rack a; 6 holds nothing now, 2 one
    assert plan.proposed[("u", 0)] == (3, 5, 6)


def test_racks_win_over_balance() -> None:
    live = {1: "a", 2: "a", 3: "b", 4: "c", 5: "b"}
    assignment = {("t", 0): (1, 3, 4), ("u", 0): (2, 3), ("u", 1): (2, 4), ("u", 2): (2, 3)}
    # broker 2 holds the most replicas, 5 none, but 2 is the only other broker on rack a
    assert plan_drain(1, live, assignment).proposed == {("t", 0): (3, 4, 2)}


def test_without_a_free_rack_the_least_loaded_candidate_is_taken() -> None:
    live = {1: "a", 2: "b", 3: "b", 4: "b", 5: "b"}
    assignment = {("t", 0): (1, 3, 4), ("u", 0): (2, 3)}
    assert plan_drain(1, live, assignment).proposed == {("t", 0): (3, 4, 5)}


def test_racks_are_ignored_unless_every_other_broker_has_one() -> None:
    live = {1: "a", 2: "a", 3: "b", 4: None}
    assignment = {("t", 0): (1, 3), ("u", 0): (2, 3)}
    # rack-aware would take 2 (rack a, none of t-0's); without racks 4 (no replica) wins
    assert plan_drain(1, live, assignment).proposed == {("t", 0): (3, 4)}


def test_a_stopped_broker_can_be_drained_and_dead_replicas_are_kept() -> None:
    live: dict[int, str | None] = {2: None, 3: None, 4: None}  # 1 and 5 are not registered
    plan = plan_drain(1, live, {("t", 0): (5, 1, 2)})
    assert plan.proposed == {("t", 0): (5, 2, 3)}


def test_a_broker_holding_nothing_has_an_empty_plan() -> None:
    plan = plan_drain(4, NO_RACKS, {("t", 0): (1, 2, 3)})
    assert plan.current == {}
    assert plan.proposed == {}


def test_refuses_an_unknown_broker() -> None:
    with pytest.raises(DrainError) as refused:
        plan_drain(9, NO_RACKS, {("t", 0): (1, 2, 3)})
    assert str(refused.value) == "broker 9 is not a known broker (live brokers: 1, 2, 3, 4)"


def test_refuses_when_too_few_other_brokers_are_alive() -> None:
    live: dict[int, str | None] = {1: None, 2: None, 3: None}
    assignment = {("t", 0): (1, 2, 3), ("t", 1): (2, 1, 3), ("u", 0): (1, 2)}
    with pytest.raises(DrainError) as refused:
        plan_drain(1, live, assignment)
    assert str(refused.value) == (
        "cannot move the replicas off broker 1: partitions t-0, t-1 need 3 brokers (their replication "
        "factor) and only 2 live brokers other than 1 are left (2, 3)"
    )


def test_refuses_while_moves_of_those_partitions_are_in_progress() -> None:
    assignment = {("t", 0): (1, 2, 3), ("t", 1): (2, 3, 4), ("u", 0): (4, 1, 2)}
    with pytest.raises(DrainError) as refused:
        plan_drain(1, NO_RACKS, assignment, moving=[("t", 1), ("u", 0), ("t", 0)])
    assert str(refused.value) == (
        "partitions being moved have a replica on broker 1: t-0, u-0; wait until their moves complete "
        "(tidelog reassign verify) or cancel them (tidelog reassign cancel), then drain"
    )
    # a move elsewhere does not stop the drain
    assert plan_drain(1, NO_RACKS, assignment, moving=[("t", 1)]).proposed == {
        ("t", 0): (2, 3, 4),
        ("u", 0): (4, 2, 3),
    }
