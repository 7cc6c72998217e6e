"""Reconciliation of one member with its target, table-driven: revoke first, then take what is free."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tidelog.coordinator.group.consumer_group_member import ConsumerGroupMember, MemberState
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.reconciliation import reconcile
from tidelog.protocol.errors import ErrorCode

T = uuid.UUID(int=1)
S = MemberState


def member(
    epoch: int,
    state: MemberState = S.STABLE,
    assigned: frozenset[int] | set[int] = frozenset(),
    revoking: frozenset[int] | set[int] = frozenset(),
) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        member_id="m",
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        state=state,
        assigned_partitions={T: frozenset(assigned)} if assigned else {},
        partitions_pending_revocation={T: frozenset(revoking)} if revoking else {},
    )


def owners(*owned: int) -> Callable[[uuid.UUID, int], int]:
    """partition_epoch: the listed partitions belong to another member at epoch 9."""
    return lambda topic, partition: 9 if partition in owned else -1


def outcome(m: ConsumerGroupMember) -> tuple[object, ...]:
    return (
        m.state,
        m.member_epoch,
        m.previous_member_epoch,
        sorted(m.assigned_partitions.get(T, ())),
        sorted(m.partitions_pending_revocation.get(T, ())),
    )


CASES = [
    # (name, member, target epoch, target, others own, owned by the member, expected outcome)
    ("reconciled stays", member(3, assigned={0, 1}), 3, {0, 1}, (), [0, 1], (S.STABLE, 3, 2, [0, 1], [])),
    ("new epoch, more partitions", member(3, assigned={0}), 4, {0, 1}, (), [0], (S.STABLE, 4, 3, [0, 1], [])),
    ("join from nothing", member(0), 1, {0, 1, 2}, (), [], (S.STABLE, 1, 0, [0, 1, 2], [])),
    (
        "must revoke first, keeps its epoch",
        member(3, assigned={0, 1, 2}),
        4,
        {0, 3},
        (3,),
        [0, 1, 2],
        (S.UNREVOKED_PARTITIONS, 3, 3, [0], [1, 2]),
    ),
    (
        "revocation already done (owned list has them gone)",
        member(3, assigned={0, 1, 2}),
        4,
        {0},
        (),
        [0],
        (S.STABLE, 4, 3, [0], []),
    ),
    (
        "still owns a revoked partition: no progress",
        member(3, S.UNREVOKED_PARTITIONS, assigned={0}, revoking={1}),
        4,
        {0},
        (),
        [0, 1],
        (S.UNREVOKED_PARTITIONS, 3, 2, [0], [1]),
    ),
    (
        "owned unknown (null) counts as owning",
        member(3, S.UNREVOKED_PARTITIONS, assigned={0}, revoking={1}),
        4,
        {0},
        (),
        None,
        (S.UNREVOKED_PARTITIONS, 3, 2, [0], [1]),
    ),
    (
        "revoked: moves to the target epoch",
        member(3, S.UNREVOKED_PARTITIONS, assigned={0}, revoking={1}),
        4,
        {0, 2},
        (),
        [0],
        (S.STABLE, 4, 3, [0, 2], []),
    ),
    (
        "partition still owned elsewhere: unreleased",
        member(3, assigned={0}),
        4,
        {0, 1, 2},
        (2,),
        [0],
        (S.UNRELEASED_PARTITIONS, 4, 3, [0, 1], []),
    ),
    (
        "only unreleased partitions to get",
        member(3, assigned={0}),
        4,
        {0, 2},
        (2,),
        [0],
        (S.UNRELEASED_PARTITIONS, 4, 3, [0], []),
    ),
    (
        "unreleased then released",
        member(4, S.UNRELEASED_PARTITIONS, assigned={0}),
        4,
        {0, 2},
        (),
        [0],
        (S.STABLE, 4, 4, [0, 2], []),
    ),
    (
        "gets back a partition it is revoking itself",
        member(3, S.UNREVOKED_PARTITIONS, assigned={0}, revoking={1}),
        4,
        {0, 1},
        (1,),
        [0],
        (S.STABLE, 4, 3, [0, 1], []),
    ),
    (
        "unknown state, owns nothing: starts over at the target epoch",
        member(3, S.UNKNOWN, assigned={0}),
        5,
        {0, 1},
        (),
        [],
        (S.STABLE, 5, 3, [0, 1], []),
    ),
]


@pytest.mark.parametrize(
    ("m", "target_epoch", "target", "others", "owned", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_reconcile(
    m: ConsumerGroupMember,
    target_epoch: int,
    target: set[int],
    others: tuple[int, ...],
    owned: list[int] | None,
    expected: tuple[object, ...],
) -> None:
    owned_pairs = None if owned is None else ([(T, owned)] if owned else [])
    result = reconcile(
        m, target_epoch, {T: frozenset(target)} if target else {}, owners(*others), owned_pairs
    )
    assert outcome(result) == expected


def test_unknown_state_owning_partitions_is_fenced() -> None:
    with pytest.raises(CoordinatorError) as info:
        reconcile(member(3, S.UNKNOWN, assigned={0}), 4, {T: frozenset({0})}, owners(), [(T, [0])])
    assert info.value.error_code == ErrorCode.FENCED_MEMBER_EPOCH
