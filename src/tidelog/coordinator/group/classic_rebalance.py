"""The classic rebalance: join and sync phases, session and rebalance timeouts, assignment hand-out.

A port of Kafka's ``prepareRebalance`` / ``completeClassicGroupJoin`` / ``propagateAssignment`` and the
heartbeat, join and sync expirations of ``GroupMetadataManager``. The request handlers
(:mod:`tidelog.coordinator.group.classic_protocol`) and the shard's timers drive it.

Invariants:

- Every path that takes a member out of a group answers the member's parked JoinGroup / SyncGroup
  (UNKNOWN_MEMBER_ID), so no :class:`~tidelog.coordinator.common.result.DeferredResponse` is ever forgotten.
- A GroupMetadata record is written when a rebalance ends with no members (the group is Empty); the
  handlers write the others (assignment stored, static member replaced, group created).
- Heartbeat deadlines are ``now + session timeout``; the JOIN timer runs the initial rebalance delay
  (``group.initial.rebalance.delay.ms``, extended while new members keep arriving, up to the rebalance
  timeout) and then the rebalance timeout; the SYNC timer gives members the rebalance timeout to
  send SyncGroup after the join phase.
"""

from __future__ import annotations

from tidelog.coordinator.common.result import DeferredResponse
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_member import ClassicGroupMember
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.records import GroupMetadataKey, GroupMetadataValue
from tidelog.coordinator.group.responses import join_group_response, sync_group_response
from tidelog.coordinator.group.shard_state import ShardState
from tidelog.coordinator.group.timers import JoinTimer, SyncTimer, TimerKind
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import JoinGroupResponse

__all__ = ["Rebalancer", "group_metadata_value", "group_metadata_value_empty"]

_S = ClassicGroupState


def group_metadata_value(group: ClassicGroup, assignment: dict[str, bytes]) -> GroupMetadataValue:
    """Kafka's ``newGroupMetadataRecord`` value: the group's generation with ``assignment`` per member."""
    members = []
    for member in group.members.values():
        if group.protocol_name is None:
            raise RuntimeError(f"group {group.group_id} has members but no protocol")
        members.append(
            GroupMetadataValue.MemberMetadata(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout=member.rebalance_timeout_ms,
                session_timeout=member.session_timeout_ms,
                subscription=member.metadata(group.protocol_name),
                assignment=assignment[member.member_id],
            )
        )
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=-1
        if group.current_state_timestamp is None
        else group.current_state_timestamp,
        members=members,
    )


def group_metadata_value_empty(group: ClassicGroup) -> GroupMetadataValue:
    """Kafka's ``newEmptyGroupMetadataRecord`` value: the group's type and generation, no members."""
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=-1
        if group.current_state_timestamp is None
        else group.current_state_timestamp,
        members=[],
    )


class Rebalancer:
    def __init__(self, state: ShardState) -> None:
        self.s = state

    # -- shared helpers ------------------------------------------------------------------------------

    def reschedule_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        key = self.s.timer_key(TimerKind.HEARTBEAT, group.group_id, member.member_id)
        self.s.schedule(key, now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms))

    def cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.s.cancel(self.s.timer_key(TimerKind.HEARTBEAT, group.group_id, member_id))

    def write_group(self, group: ClassicGroup, assignment: dict[str, bytes]) -> None:
        self.s.write(
            GroupMetadataKey(group=group.group_id), group_metadata_value(group, assignment), replay=False
        )

    def answer_join(self, handle: DeferredResponse | None, error: ErrorCode, member_id: str = "") -> None:
        if handle is not None:
            self.s.complete(handle, join_group_response(handle.api_version, error=error, member_id=member_id))

    def answer_sync(self, handle: DeferredResponse | None, error: ErrorCode) -> None:
        self.s.complete(handle, sync_group_response(error=error))

    def remove_member(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """Take a member out, answering its parked requests (UNKNOWN_MEMBER_ID: the client rejoins)."""
        self.answer_join(group.take_join_handle(member), ErrorCode.UNKNOWN_MEMBER_ID)
        self.answer_sync(group.take_sync_handle(member), ErrorCode.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        self.cancel_heartbeat(group, member.member_id)

    def join_response_for(
        self, group: ClassicGroup, member: ClassicGroupMember, api_version: int
    ) -> JoinGroupResponse:
        """The JoinGroup answer of the current generation (the leader also gets the member list)."""
        return join_group_response(
            api_version,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id,
            members=group.current_members_for_join() if group.is_leader(member.member_id) else (),
        )

    # -- rebalance machinery -------------------------------------------------------------------------

    def maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, now_ms)
        else:
            self.maybe_complete_join_phase(group, now_ms)

    def maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        """Complete the join phase if everyone rejoined, except during the initial (delayed) rebalance."""
        if (
            group.is_in_state(_S.PREPARING_REBALANCE)
            and group.has_all_members_joined()
            and group.previous_state is not _S.EMPTY
        ):
            self.complete_join(group, now_ms)

    def prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_in_state(_S.COMPLETING_REBALANCE):
            # Members waiting for the leader's assignment must rejoin instead.
            self._reset_and_propagate_assignment_with_error(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        group.clear_pending_sync_members()
        self.s.cancel(self.s.timer_key(TimerKind.SYNC, group.group_id))
        is_initial_rebalance = group.is_in_state(_S.EMPTY)
        if is_initial_rebalance:
            # A new group: give more members the chance to join before the first generation.
            delay_ms = self.s.config.group_initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self.s.schedule(
                self.s.timer_key(TimerKind.JOIN, group.group_id),
                now_ms + delay_ms,
                JoinTimer(initial=True, delay_ms=delay_ms, remaining_ms=remaining_ms),
            )
        group.transition_to(_S.PREPARING_REBALANCE, now_ms)
        if not is_initial_rebalance:
            self._maybe_complete_join_else_schedule(group, now_ms)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, now_ms: int) -> None:
        if group.has_all_members_joined():
            self.complete_join(group, now_ms)
        else:
            self.s.schedule(
                self.s.timer_key(TimerKind.JOIN, group.group_id),
                now_ms + group.rebalance_timeout_ms(),
                JoinTimer(initial=False),
            )

    def _try_complete_initial_rebalance_else_schedule(
        self, group: ClassicGroup, delay_ms: int, remaining_ms: int, now_ms: int
    ) -> None:
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay_ms = min(self.s.config.group_initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self.s.schedule(
                self.s.timer_key(TimerKind.JOIN, group.group_id),
                now_ms + new_delay_ms,
                JoinTimer(initial=True, delay_ms=new_delay_ms, remaining_ms=new_remaining_ms),
            )
        else:
            self.complete_join(group, now_ms)

    def complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation,
        answer every parked JoinGroup (the leader gets the member list) and wait for SyncGroups."""
        self.s.cancel(self.s.timer_key(TimerKind.JOIN, group.group_id))
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                self.remove_member(group, member)
        if group.is_in_state(_S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members that have not come back): wait another round, until
            # session expiry removes the silent ones.
            self.s.schedule(
                self.s.timer_key(TimerKind.JOIN, group.group_id),
                now_ms + group.rebalance_timeout_ms(),
                JoinTimer(initial=False),
            )
            return
        group.init_next_generation(now_ms)
        if group.is_in_state(_S.EMPTY):
            self.write_group(group, {})
            return
        for member in group.members.values():
            handle = group.take_join_handle(member)
            if handle is not None:
                self.s.complete(handle, self.join_response_for(group, member, handle.api_version))
            self.reschedule_heartbeat(group, member, now_ms)
            member.is_new = False
            group.add_pending_sync_member(member.member_id)
        self.s.schedule(
            self.s.timer_key(TimerKind.SYNC, group.group_id),
            now_ms + group.rebalance_timeout_ms(),
            SyncTimer(group.generation_id),
        )

    def _reset_and_propagate_assignment_with_error(
        self, group: ClassicGroup, error: ErrorCode, now_ms: int
    ) -> None:
        if not group.is_in_state(_S.COMPLETING_REBALANCE):
            raise RuntimeError(f"group {group.group_id} must be CompletingRebalance, not {group.state.value}")
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def set_and_propagate_assignment(
        self, group: ClassicGroup, assignment: dict[str, bytes], now_ms: int
    ) -> None:
        if not group.is_in_state(_S.COMPLETING_REBALANCE):
            raise RuntimeError(f"group {group.group_id} must be CompletingRebalance, not {group.state.value}")
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        ok = error == ErrorCode.NONE
        for member in group.members.values():
            handle = group.take_sync_handle(member)
            if handle is not None:
                self.s.complete(
                    handle,
                    sync_group_response(
                        error=error,
                        protocol_type=group.protocol_type if ok else None,
                        protocol_name=group.protocol_name if ok else None,
                        assignment=member.assignment,
                    ),
                )
                # The session may have lapsed while the member waited: expect heartbeats from now on.
                self.reschedule_heartbeat(group, member, now_ms)

    def remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.remove_pending_sync_member(member_id)
        if (
            group.state in (_S.DEAD, _S.EMPTY, _S.PREPARING_REBALANCE)
            or group.has_received_sync_from_all_members()
        ):
            self.s.cancel(self.s.timer_key(TimerKind.SYNC, group.group_id))

    # -- timers --------------------------------------------------------------------------------------

    def on_heartbeat_expired(self, group_id: str, member_id: str, now_ms: int) -> None:
        group = self.s.groups.get(group_id)
        if group is None or group.is_in_state(_S.DEAD):
            return
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.is_in_state(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
                self.complete_join(group, now_ms)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        self.remove_member(group, member)
        if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.is_in_state(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self.complete_join(group, now_ms)

    def on_join_timer(self, group_id: str, timer: JoinTimer, now_ms: int) -> None:
        group = self.s.groups.get(group_id)
        if group is None:
            return
        if timer.initial:
            self._try_complete_initial_rebalance_else_schedule(
                group, timer.delay_ms, timer.remaining_ms, now_ms
            )
        else:
            self.complete_join(group, now_ms)

    def on_sync_timer(self, group_id: str, timer: SyncTimer, now_ms: int) -> None:
        """Members of the generation that never sent SyncGroup are removed and the group rebalances."""
        group = self.s.groups.get(group_id)
        if group is None or timer.generation_id != group.generation_id:
            return
        if (
            group.state not in (_S.COMPLETING_REBALANCE, _S.STABLE)
            or group.has_received_sync_from_all_members()
        ):
            return
        for member_id in sorted(group.pending_sync_members):
            member = group.members.get(member_id)
            if member is not None:
                self.remove_member(group, member)
            else:
                group.remove(member_id)
        self.prepare_rebalance(group, now_ms)

    # -- loading -------------------------------------------------------------------------------------

    def on_loaded(self, now_ms: int) -> None:
        """After a partition is loaded: expect heartbeats from every member; rebalance oversized groups."""
        for group in list(self.s.groups.values()):
            for member in group.members.values():
                self.reschedule_heartbeat(group, member, now_ms)
            if group.size > self.s.config.group_max_size:
                # group.max.size may have been lowered: rebalance so members can commit, then shrink.
                self.prepare_rebalance(group, now_ms)

    def on_unloaded(self) -> None:
        """The partition moves away: every parked request gets NOT_COORDINATOR."""
        for group in self.s.groups.values():
            for member in group.members.values():
                self.answer_join(group.take_join_handle(member), ErrorCode.NOT_COORDINATOR, member.member_id)
                self.answer_sync(group.take_sync_handle(member), ErrorCode.NOT_COORDINATOR)
