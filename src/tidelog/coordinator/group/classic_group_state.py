"""States of a classic group (Kafka's ``ClassicGroupState``) and the transitions allowed between them.

Invariants: :data:`VALID_PREVIOUS_STATES` is the whole transition table (a transition to ``s`` is legal
exactly when the current state is in ``VALID_PREVIOUS_STATES[s]``); :func:`assert_valid_transition`
is the only check, and :class:`~tidelog.coordinator.group.ClassicGroup` calls it on every transition.
State names on the wire (DescribeGroups, ListGroups) are Kafka's: ``Empty``, ``PreparingRebalance``,
``CompletingRebalance``, ``Stable``, ``Dead``; ListGroups filters compare them case-insensitively.

The states, what a group does in each, and what moves it on:

``EMPTY``
    No members, but the group lingers until its offsets expire; also the state of groups that only
    use Kafka to store offsets (a "simple" group). JoinGroup from a new member is served; SyncGroup,
    Heartbeat, LeaveGroup and member-checked OffsetCommit get UNKNOWN_MEMBER_ID; OffsetFetch is served.
    Moves to PREPARING_REBALANCE when a member joins, to DEAD when deleted or expired.

``PREPARING_REBALANCE``
    A rebalance started: JoinGroup requests are parked until every known member has rejoined (or the
    rebalance timeout runs out); Heartbeat and SyncGroup get REBALANCE_IN_PROGRESS; LeaveGroup removes
    the member; offset commits from the previous generation are accepted. Moves to
    COMPLETING_REBALANCE when the join phase completes with members, to EMPTY when it completes
    without any, to DEAD when the group is deleted.

``COMPLETING_REBALANCE``
    The join phase is over and the group waits for the leader's assignment: SyncGroup from followers is
    parked, Heartbeat and OffsetCommit get REBALANCE_IN_PROGRESS. Moves to STABLE when the leader's
    SyncGroup brings the assignment; back to PREPARING_REBALANCE when a member joins with new
    metadata, leaves, or fails.

``STABLE``
    Members heartbeat normally, SyncGroup returns the current assignment, JoinGroup from a follower
    with unchanged metadata returns the current generation, offset commits of the current generation
    are accepted. Moves to PREPARING_REBALANCE when a member fails, leaves, the leader rejoins, or a
    follower rejoins with new metadata.

``DEAD``
    The group is being removed (deleted, or its partition unloaded): everything but OffsetFetch gets
    COORDINATOR_NOT_AVAILABLE or UNKNOWN_MEMBER_ID. Final.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

__all__ = [
    "VALID_PREVIOUS_STATES",
    "ClassicGroupState",
    "IllegalStateTransitionError",
    "assert_valid_transition",
]


class ClassicGroupState(Enum):
    """A classic group's state; ``value`` is Kafka's wire name (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value

    @property
    def lower_case_name(self) -> str:
        """The name ListGroups' state filter is compared with (Kafka lower-cases both sides)."""
        return self.value.lower()


_S = ClassicGroupState

VALID_PREVIOUS_STATES: Final[dict[ClassicGroupState, frozenset[ClassicGroupState]]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
}
"""For each target state, the states a group may move to it from (Kafka's ``validPreviousStates``)."""


class IllegalStateTransitionError(RuntimeError):
    """A transition the table forbids: always a coordinator bug, never a client's fault."""


def assert_valid_transition(group_id: str, current: ClassicGroupState, target: ClassicGroupState) -> None:
    """Raise :class:`IllegalStateTransitionError` unless ``current -> target`` is in the table."""
    if current not in VALID_PREVIOUS_STATES[target]:
        allowed = sorted(s.value for s in VALID_PREVIOUS_STATES[target])
        raise IllegalStateTransitionError(
            f"group {group_id!r} should be in one of {allowed} before moving to {target.value}, "
            f"but it is in {current.value}"
        )
