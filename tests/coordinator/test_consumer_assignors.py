"""Server-side assignors (uniform, range): exact assignments for given members and topics."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator.group.assignors import (
    ASSIGNORS,
    MemberSubscription,
    RangeAssignor,
    UniformAssignor,
    assignor_name,
)

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


def spec(
    member_id: str, *topics: uuid.UUID, current: dict[uuid.UUID, set[int]] | None = None
) -> MemberSubscription:
    return MemberSubscription(
        member_id=member_id,
        subscribed_topic_ids=frozenset(topics),
        current={t: frozenset(ps) for t, ps in (current or {}).items()},
    )


def flat(result: dict[str, dict[uuid.UUID, frozenset[int]]], topic: uuid.UUID = T) -> dict[str, list[int]]:
    return {m: sorted(a.get(topic, ())) for m, a in result.items()}


# -- uniform ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "partitions", "expected"),
    [
        (["a"], 6, {"a": [0, 1, 2, 3, 4, 5]}),
        (["a", "b"], 6, {"a": [0, 2, 4], "b": [1, 3, 5]}),
        (["a", "b", "c"], 6, {"a": [0, 3], "b": [1, 4], "c": [2, 5]}),
        (["a", "b", "c", "d"], 6, {"a": [0, 4], "b": [1, 5], "c": [2], "d": [3]}),
        (["a", "b", "c"], 2, {"a": [0], "b": [1], "c": []}),
    ],
)
def test_uniform_from_scratch(members: list[str], partitions: int, expected: dict[str, list[int]]) -> None:
    result = UniformAssignor().assign({m: spec(m, T) for m in members}, {T: partitions})
    assert flat(result) == expected


def test_uniform_is_sticky_when_a_member_joins() -> None:
    members = {
        "a": spec("a", T, current={T: {0, 1, 2}}),
        "b": spec("b", T, current={T: {3, 4, 5}}),
        "c": spec("c", T),
    }
    result = flat(UniformAssignor().assign(members, {T: 6}))
    assert result == {"a": [0, 1], "b": [3, 4], "c": [2, 5]}  # each gives up one, nothing else moves


def test_uniform_is_sticky_when_a_member_leaves() -> None:
    members = {"a": spec("a", T, current={T: {0, 3}}), "c": spec("c", T, current={T: {2, 5}})}
    result = flat(UniformAssignor().assign(members, {T: 6}))
    assert result == {"a": [0, 1, 3], "c": [2, 4, 5]}


def test_uniform_drops_partitions_of_unsubscribed_or_shrunk_topics() -> None:
    members = {"a": spec("a", T, current={T: {0, 1, 7}, U: {0}}), "b": spec("b", T)}
    result = UniformAssignor().assign(members, {T: 4})
    assert flat(result) == {"a": [0, 1], "b": [2, 3]}
    assert U not in result["a"]


def test_uniform_heterogeneous_subscriptions_balance_where_they_can() -> None:
    members = {"a": spec("a", T), "b": spec("b", T, U), "c": spec("c", U)}
    result = UniformAssignor().assign(members, {T: 4, U: 2})
    counts = {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}
    assert counts == {"a": 2, "b": 2, "c": 2}
    assert set(result["a"]) <= {T}
    assert set(result["c"]) <= {U}


@given(
    st.lists(st.frozensets(st.sampled_from([T, U]), min_size=1), min_size=1, max_size=6),
    st.integers(1, 12),
    st.integers(1, 12),
)
def test_uniform_assigns_every_partition_once_to_a_subscriber(
    subscriptions: list[frozenset[uuid.UUID]], t_partitions: int, u_partitions: int
) -> None:
    members = {f"m{i}": MemberSubscription(f"m{i}", s, {}) for i, s in enumerate(subscriptions)}
    partitions = {T: t_partitions, U: u_partitions}
    result = UniformAssignor().assign(members, partitions)
    seen: list[tuple[uuid.UUID, int]] = []
    for member_id, assignment in result.items():
        for topic, ps in assignment.items():
            assert topic in members[member_id].subscribed_topic_ids
            seen.extend((topic, p) for p in ps)
    subscribed = {t for s in subscriptions for t in s}
    assert sorted(seen) == sorted((t, p) for t in subscribed for p in range(partitions[t]))
    if len(set(subscriptions)) == 1:  # identical subscriptions: counts differ by at most one
        counts = [sum(len(ps) for ps in a.values()) for a in result.values()]
        assert max(counts) - min(counts) <= 1


# -- range -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "partitions", "expected"),
    [
        (["a", "b"], 6, {"a": [0, 1, 2], "b": [3, 4, 5]}),
        (["a", "b", "c"], 7, {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}),
        (["b", "a", "c"], 2, {"a": [0], "b": [1], "c": []}),
    ],
)
def test_range(members: list[str], partitions: int, expected: dict[str, list[int]]) -> None:
    assert flat(RangeAssignor().assign({m: spec(m, T) for m in members}, {T: partitions})) == expected


def test_range_co_partitions_topics_with_the_same_subscribers() -> None:
    result = RangeAssignor().assign({"a": spec("a", T, U), "b": spec("b", T, U)}, {T: 4, U: 4})
    assert flat(result, T) == flat(result, U) == {"a": [0, 1], "b": [2, 3]}


def test_assignor_names() -> None:
    assert sorted(ASSIGNORS) == ["range", "uniform"]
    assert assignor_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert assignor_name(" uniform ") == "uniform"
    with pytest.raises(ValueError, match="sticky"):
        assignor_name("sticky")
