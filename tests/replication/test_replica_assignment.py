"""Replica placement as Kafka's AdminUtils does it, and the checks of a client's assignment."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.replication.replica_assignment import (
    AssignmentError,
    assign_replicas_to_brokers,
    check_assignment,
)


def test_rack_unaware_matches_kafkas_own_example() -> None:
    """AdminUtilsTest.testReplicaAssignment: brokers 0-4, 10 partitions, RF 3, start index 0."""
    assignment = assign_replicas_to_brokers(dict.fromkeys(range(5)), 10, 3, fixed_start_index=0)
    assert assignment == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


@given(
    brokers=st.integers(1, 8),
    partitions=st.integers(1, 40),
    factor=st.integers(1, 8),
    seed=st.integers(0, 1000),
    racks=st.integers(0, 4),
)
def test_every_partition_gets_distinct_brokers_spread_over_racks(
    brokers: int, partitions: int, factor: int, seed: int, racks: int
) -> None:
    rack_of = {b: (f"r{b % racks}" if racks else None) for b in range(brokers)}
    if factor > brokers:
        with pytest.raises(AssignmentError) as raised:
            assign_replicas_to_brokers(rack_of, partitions, factor, rng=random.Random(seed))
        assert raised.value.invalid_replication_factor
        return
    assignment = assign_replicas_to_brokers(rack_of, partitions, factor, rng=random.Random(seed))
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == factor
        assert len(set(replicas)) == factor
        if racks:
            assert len({rack_of[b] for b in replicas}) == min(factor, len(set(rack_of.values())))
    leaders = Counter(replicas[0] for replicas in assignment.values())
    assert (
        max(leaders.values()) - min(leaders.get(b, 0) for b in range(brokers)) <= 1
    )  # leaders spread evenly


def test_new_partitions_continue_the_spread() -> None:
    first = assign_replicas_to_brokers(dict.fromkeys(range(3)), 3, 2, fixed_start_index=0)
    more = assign_replicas_to_brokers(dict.fromkeys(range(3)), 3, 2, fixed_start_index=0, start_partition=3)
    assert sorted(more) == [3, 4, 5]
    assert [r[0] for r in first.values()] == [r[0] for r in more.values()] == [0, 1, 2]


def test_racks_on_some_brokers_only_are_refused() -> None:
    with pytest.raises(AssignmentError, match="Not all brokers have rack information"):
        assign_replicas_to_brokers({1: "a", 2: None}, 1, 1)


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ({}, "empty"),
        ({0: [1], 2: [2]}, "without gaps"),
        ({0: [1, 2], 1: [2]}, "same number of replicas"),
        ({0: [1, 1]}, "Duplicate brokers"),
        ({0: [1, 9]}, "unknown brokers"),
    ],
)
def test_client_assignments_are_checked(assignment: dict[int, list[int]], message: str) -> None:
    with pytest.raises(AssignmentError, match=message):
        check_assignment(assignment, [1, 2, 3])
    check_assignment({0: [1, 2], 1: [2, 3]}, [1, 2, 3])
