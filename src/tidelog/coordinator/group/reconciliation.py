"""Moving one member from its current assignment to its target (Kafka's ``CurrentAssignmentBuilder``).

Given a member, the group's target assignment (and its epoch) and the partitions the member says it
owns, :func:`reconcile` returns the member's next state:

1. Partitions it holds that the target no longer gives it must be revoked first. While the member
   still reports owning any of them it stays in UNREVOKED_PARTITIONS at its current epoch (its
   offset commits stay valid) and gets only what it keeps.
2. Once they are revoked (or if there were none) it moves to the target epoch and gets the target
   partitions nobody else holds; a partition another member still owns or revokes stays pending, and
   the member waits in UNRELEASED_PARTITIONS until its previous owner lets go.

This is incremental, cooperative rebalancing: a partition is assigned to its new owner only after its
previous owner has acknowledged (in a heartbeat's owned partitions) that it revoked it.

Invariants: pure; never hands out a partition for which ``partition_epoch`` is not -1, except one the
member itself is revoking; ``owned`` ``None`` (the heartbeat did not say) counts as still owning
everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from uuid import UUID

from tidelog.coordinator.group.consumer_group_member import Assignment, ConsumerGroupMember, MemberState
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.protocol.errors import ErrorCode

__all__ = ["OwnedPartitions", "PartitionEpoch", "reconcile"]

OwnedPartitions = Iterable[tuple[UUID, Iterable[int]]] | None
"""What a heartbeat says the member owns: (topic id, partitions) pairs, or ``None`` (unchanged)."""
PartitionEpoch = Callable[[UUID, int], int]
"""The epoch of a partition's current owner, -1 when it is free."""


def _owns_any(owned: list[tuple[UUID, list[int]]] | None, revoking: Assignment) -> bool:
    if owned is None:
        return True
    return any(p in revoking.get(topic_id, ()) for topic_id, partitions in owned for p in partitions)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: OwnedPartitions,
) -> ConsumerGroupMember:
    """The member's next state, or ``member`` itself when it cannot move on yet."""
    owned_list = None if owned is None else [(t, list(ps)) for t, ps in owned]
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned_list)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned_list, member.partitions_pending_revocation):
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned_list)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned_list)
    # UNKNOWN: written by a newer coordinator; start over from nothing.
    if owned_list is None or owned_list:
        raise CoordinatorError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            "the member is in an unknown state: it must abandon all its partitions and rejoin",
        )
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned_list)


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: list[tuple[UUID, list[int]]] | None,
) -> ConsumerGroupMember:
    current = member.assigned_partitions
    new_assigned: dict[UUID, frozenset[int]] = {}
    new_revoking: dict[UUID, frozenset[int]] = {}
    new_pending: dict[UUID, frozenset[int]] = {}
    has_unreleased = False
    for topic_id in sorted(set(target) | set(current)):
        wanted = target.get(topic_id, frozenset())
        held = current.get(topic_id, frozenset())
        kept = held & wanted
        revoking = held - kept
        pending = wanted - kept
        own_revoking = member.partitions_pending_revocation.get(topic_id, frozenset())
        unreleased = {p for p in pending if partition_epoch(topic_id, p) != -1 and p not in own_revoking}
        if unreleased:
            has_unreleased = True
            pending -= unreleased
        if kept:
            new_assigned[topic_id] = kept
        if revoking:
            new_revoking[topic_id] = revoking
        if pending:
            new_pending[topic_id] = pending

    if new_revoking and _owns_any(owned, new_revoking):
        # Revoke first: same epoch, only what it keeps.
        return member.with_epoch(member_epoch, MemberState.UNREVOKED_PARTITIONS, new_assigned, new_revoking)
    if new_pending:
        for topic_id, partitions in new_pending.items():
            new_assigned[topic_id] = new_assigned.get(topic_id, frozenset()) | partitions
        state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
        return member.with_epoch(target_epoch, state, new_assigned, {})
    if has_unreleased:
        return member.with_epoch(target_epoch, MemberState.UNRELEASED_PARTITIONS, new_assigned, {})
    return member.with_epoch(target_epoch, MemberState.STABLE, new_assigned, {})
