"""The classic group membership requests: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

A port of the ``classicGroup*`` request handlers of Kafka's ``GroupMetadataManager``. Requests come in
decoded at any version, with the version beside them; the rebalance they start or finish is
:mod:`tidelog.coordinator.group.classic_rebalance`; answers go out through the shard's
:class:`~tidelog.coordinator.group.shard_state.ShardState` (responses to parked requests, records, timers).

Invariants:

- A JoinGroup or SyncGroup that cannot be answered yet is parked on its member (``awaiting_join`` /
  ``awaiting_sync``) under a :class:`~tidelog.coordinator.common.result.DeferredResponse` and returned as
  such; if it is answered within the same call, the response itself is returned instead.
- A parked request superseded by a newer one from the same member is answered REBALANCE_IN_PROGRESS
  (Kafka drops it silently; a runtime would then hold it forever); a static member replaced by a new
  incarnation has its parked requests answered FENCED_INSTANCE_ID.
- GroupMetadata records are written when the leader's SyncGroup brings the assignment, when a static
  member is replaced in a Stable group, and when a JoinGroup creates a group (Kafka's empty-group
  record) — the same moments, and the same bytes, as Kafka.
"""

from __future__ import annotations

from tidelog.coordinator.common.result import DeferredResponse
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_member import ClassicGroupMember, protocols_from_request
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.classic_rebalance import Rebalancer, group_metadata_value_empty
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.records import GroupMetadataKey
from tidelog.coordinator.group.responses import join_group_response, leave_group_response, sync_group_response
from tidelog.coordinator.group.shard_state import ShardState
from tidelog.coordinator.group.timers import TimerKind
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ApiKey,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

__all__ = ["UNKNOWN_MEMBER_ID", "ClassicGroupManager"]

UNKNOWN_MEMBER_ID = ""
"""The member id of a member that has none yet (Kafka's ``JoinGroupRequest.UNKNOWN_MEMBER_ID``)."""

_S = ClassicGroupState


def _requires_known_member_id(api_version: int) -> bool:
    """From JoinGroup v4 a new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394)."""
    return api_version >= 4


def _supports_skipping_assignment(api_version: int) -> bool:
    """From JoinGroup v9 a rejoining static leader is told to skip the assignment (KIP-814)."""
    return api_version >= 9


class ClassicGroupManager:
    def __init__(self, state: ShardState) -> None:
        self.s = state
        self.r = Rebalancer(state)

    # -- JoinGroup -----------------------------------------------------------------------------------

    def join_group(
        self,
        request: JoinGroupRequest,
        api_version: int,
        *,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> JoinGroupResponse | DeferredResponse:
        """Answer at once, or park the request and return its handle.

        Like Kafka's ``JoinGroupRequest``, a v0 request's ``rebalance_timeout_ms`` is set to its
        session timeout (v0 has no rebalance timeout)."""
        handle = self.s.new_handle(ApiKey.JOIN_GROUP, api_version, request.group_id, request.member_id)
        self._join(request, api_version, handle, client_id, client_host, now_ms)
        for i, (completed, response) in enumerate(self.s.out.completions):
            if completed == handle:
                del self.s.out.completions[i]
                assert isinstance(response, JoinGroupResponse)
                return response
        return handle

    def _join(
        self,
        request: JoinGroupRequest,
        api_version: int,
        handle: DeferredResponse,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> None:
        if api_version == 0:
            # JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout.
            request.rebalance_timeout_ms = request.session_timeout_ms
        member_id = request.member_id
        config = self.s.config
        if not request.group_id:
            self.r.answer_join(handle, ErrorCode.INVALID_GROUP_ID, member_id)
            return
        if (
            not config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            self.r.answer_join(handle, ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
            return
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        group = self.s.groups.get(request.group_id)
        is_new_group = group is None
        if group is None:
            if not is_unknown_member:
                self.r.answer_join(handle, ErrorCode.UNKNOWN_MEMBER_ID, member_id)
                return
            group = self.s.groups[request.group_id] = ClassicGroup(
                request.group_id, current_state_timestamp=now_ms
            )
        records_before = len(self.s.out.records.get(self.s.partition, ()))
        if not self._accept_joining_member(group, member_id):
            if group.has_member(member_id):
                self.r.remove_member(group, group.member(member_id))
            else:
                group.remove(member_id)
            self.r.answer_join(handle, ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID)
        elif is_unknown_member:
            self._join_new_member(request, api_version, group, handle, client_id, client_host, now_ms)
        else:
            self._join_existing_member(request, api_version, group, handle, client_id, client_host, now_ms)
        if is_new_group and len(self.s.out.records.get(self.s.partition, ())) == records_before:
            # Kafka writes the new group (no members yet) so that it exists in the log from now on.
            self.s.write(
                GroupMetadataKey(group=group.group_id), group_metadata_value_empty(group), replay=False
            )

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.s.config.group_max_size
        if group.state in (_S.EMPTY, _S.DEAD):
            return True
        if group.is_in_state(_S.PREPARING_REBALANCE):
            # Counting members awaiting join (not the group size, which may exceed a lowered maximum)
            # kicks out the last members to rejoin.
            return (group.has_member(member_id) and group.member(member_id).is_awaiting_join) or (
                group.num_members_awaiting_join < max_size
            )
        return group.has_member(member_id) or group.size < max_size

    def _join_new_member(
        self,
        request: JoinGroupRequest,
        api_version: int,
        group: ClassicGroup,
        handle: DeferredResponse,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> None:
        protocols = protocols_from_request(request.protocols)
        if group.is_in_state(_S.DEAD):
            self.r.answer_join(handle, ErrorCode.COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID)
        elif not group.supports_protocols(request.protocol_type, {name for name, _ in protocols}):
            self.r.answer_join(handle, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID)
        elif request.group_instance_id is not None:
            new_member_id = self.s.new_member_id(request.group_instance_id)
            existing = group.static_member_id(request.group_instance_id)
            if existing is not None:
                self._update_static_member_then_rebalance_or_complete_join(
                    request, api_version, group, existing, new_member_id, handle, now_ms
                )
            else:
                self._add_member_then_rebalance_or_complete_join(
                    request, group, new_member_id, handle, client_id, client_host, now_ms
                )
        elif _requires_known_member_id(api_version):
            new_member_id = self.s.new_member_id(client_id)
            group.add_pending_member(new_member_id)
            self.s.schedule(
                self.s.timer_key(TimerKind.HEARTBEAT, group.group_id, new_member_id),
                now_ms + request.session_timeout_ms,
            )
            self.r.answer_join(handle, ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
        else:
            new_member_id = self.s.new_member_id(client_id)
            self._add_member_then_rebalance_or_complete_join(
                request, group, new_member_id, handle, client_id, client_host, now_ms
            )

    def _join_existing_member(
        self,
        request: JoinGroupRequest,
        api_version: int,
        group: ClassicGroup,
        handle: DeferredResponse,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> None:
        member_id = request.member_id
        protocols = protocols_from_request(request.protocols)
        if group.is_in_state(_S.DEAD):
            self.r.answer_join(handle, ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
            return
        if not group.supports_protocols(request.protocol_type, {name for name, _ in protocols}):
            self.r.answer_join(handle, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
            return
        if group.is_pending_member(member_id):
            if request.group_instance_id is not None:
                # Pending members are dynamic by construction: a client bug (Kafka: IllegalStateException).
                self.r.answer_join(handle, ErrorCode.UNKNOWN_SERVER_ERROR, member_id)
                return
            self._add_member_then_rebalance_or_complete_join(
                request, group, member_id, handle, client_id, client_host, now_ms
            )
            return
        try:
            group.validate_member(member_id, request.group_instance_id)
        except CoordinatorError as exc:
            self.r.answer_join(handle, exc.error_code, member_id)
            return
        member = group.member(member_id)
        if group.is_in_state(_S.PREPARING_REBALANCE):
            self._update_member_then_rebalance_or_complete_join(request, group, member, handle, now_ms)
        elif group.is_in_state(_S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # Same metadata (it probably missed the JoinGroup response): answer this generation again.
                self.s.complete(handle, self.r.join_response_for(group, member, api_version))
            else:
                self._update_member_then_rebalance_or_complete_join(request, group, member, handle, now_ms)
        elif group.is_in_state(_S.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining forces a rebalance (e.g. topic metadata changed); so does new metadata.
                self._update_member_then_rebalance_or_complete_join(request, group, member, handle, now_ms)
            else:
                response = self.r.join_response_for(group, member, api_version)
                response.members = []
                self.s.complete(handle, response)
        else:
            # Empty: the member is stale; let it reset its generation and rejoin.
            self.r.answer_join(handle, ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    def _add_member_then_rebalance_or_complete_join(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        member_id: str,
        handle: DeferredResponse,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            supported_protocols=protocols_from_request(request.protocols),
            is_new=True,
        )
        if group.is_in_state(_S.PREPARING_REBALANCE) and group.previous_state is _S.EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay once more
        group.add(member, handle)
        # A new member cannot heartbeat while its JoinGroup is parked; drop it if it never gets answered.
        self.r.reschedule_heartbeat(group, member, now_ms, self.s.config.group_new_member_join_timeout_ms)
        self.r.maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_member_then_rebalance_or_complete_join(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        member: ClassicGroupMember,
        handle: DeferredResponse,
        now_ms: int,
    ) -> None:
        superseded = group.update_member(
            member,
            protocols_from_request(request.protocols),
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            handle,
        )
        self.r.answer_join(superseded, ErrorCode.REBALANCE_IN_PROGRESS, member.member_id)
        self.r.maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_static_member_then_rebalance_or_complete_join(
        self,
        request: JoinGroupRequest,
        api_version: int,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        handle: DeferredResponse,
        now_ms: int,
    ) -> None:
        assert request.group_instance_id is not None
        current_leader = group.leader_id
        new_member, old_member = group.replace_static_member(
            request.group_instance_id, old_member_id, new_member_id
        )
        # Fence whoever still waits under the old member id.
        if old_member.awaiting_join is not None:
            self.s.complete(
                old_member.awaiting_join,
                join_group_response(
                    old_member.awaiting_join.api_version,
                    error=ErrorCode.FENCED_INSTANCE_ID,
                    member_id=old_member_id,
                ),
            )
        self.r.answer_sync(old_member.awaiting_sync, ErrorCode.FENCED_INSTANCE_ID)
        self.r.cancel_heartbeat(group, old_member_id)
        self.r.reschedule_heartbeat(group, new_member, now_ms)
        group.update_member(
            new_member,
            protocols_from_request(request.protocols),
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            handle,
        )
        if group.is_in_state(_S.STABLE):
            if group.protocol_name == group.select_protocol():
                # The selected protocol stays: persist the new member id and hand back the old assignment,
                # no rebalance (KIP-345).
                self.r.write_group(group, group.group_assignment())
                group.take_join_handle(new_member)
                is_leader = group.is_leader(new_member_id)
                if _supports_skipping_assignment(api_version):
                    response = join_group_response(
                        api_version,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id,
                        skip_assignment=is_leader,
                        members=group.current_members_for_join() if is_leader else (),
                    )
                else:
                    # Older clients are told the previous leader id, so a restarted leader does not
                    # compute an assignment nobody asked for.
                    response = join_group_response(
                        api_version,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader,
                    )
                self.s.complete(handle, response)
            else:
                self.r.maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.is_in_state(_S.COMPLETING_REBALANCE):
            # The leader may already have been sent the old member id: rebalance so the ids match.
            self.r.prepare_rebalance(group, now_ms)
        elif group.is_in_state(_S.PREPARING_REBALANCE):
            self.r.maybe_complete_join_phase(group, now_ms)
        else:
            raise RuntimeError(
                f"group {group.group_id} cannot be {group.state.value} with a known static member"
            )

    # -- SyncGroup -----------------------------------------------------------------------------------

    def sync_group(
        self, request: SyncGroupRequest, api_version: int, *, now_ms: int
    ) -> SyncGroupResponse | DeferredResponse:
        if not request.group_id:
            return sync_group_response(error=ErrorCode.INVALID_GROUP_ID)
        group = self.s.groups.get(request.group_id)
        if group is None:
            return sync_group_response(error=ErrorCode.UNKNOWN_MEMBER_ID)
        try:
            self._validate_sync_group(group, request)
        except CoordinatorError as exc:
            return sync_group_response(error=exc.error_code)
        member_id = request.member_id
        if group.is_in_state(_S.EMPTY):
            return sync_group_response(error=ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in_state(_S.PREPARING_REBALANCE):
            return sync_group_response(error=ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.member(member_id)
        if group.is_in_state(_S.STABLE):
            self.r.remove_pending_sync_member(group, member_id)
            return sync_group_response(
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            )
        # CompletingRebalance: park until the leader's assignment is stored.
        handle = self.s.new_handle(ApiKey.SYNC_GROUP, api_version, request.group_id, member_id)
        self.r.answer_sync(member.awaiting_sync, ErrorCode.REBALANCE_IN_PROGRESS)
        member.awaiting_sync = handle
        self.r.remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            assignment = {m.member_id: m.assignment for m in request.assignments}
            full = {mid: assignment.get(mid, b"") for mid in group.members}
            # Kafka writes the record while CompletingRebalance (its state timestamp included) and moves
            # to Stable once it is appended; the runtime sends nothing before the append, so we move now.
            self.r.write_group(group, full)
            self.r.set_and_propagate_assignment(group, full, now_ms)
            group.transition_to(_S.STABLE, now_ms)
        for i, (completed, response) in enumerate(self.s.out.completions):
            if completed == handle:
                del self.s.out.completions[i]
                assert isinstance(response, SyncGroupResponse)
                return response
        return handle

    def _validate_sync_group(self, group: ClassicGroup, request: SyncGroupRequest) -> None:
        if group.is_in_state(_S.DEAD):
            raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        group.validate_member(request.member_id, request.group_instance_id)
        if request.generation_id != group.generation_id:
            raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)
        if _inconsistent(request.protocol_type, group.protocol_type) or _inconsistent(
            request.protocol_name, group.protocol_name
        ):
            raise CoordinatorError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

    # -- Heartbeat -----------------------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> HeartbeatResponse:
        if not request.group_id:
            return HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        group = self.s.groups.get(request.group_id)
        if group is None:
            return HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        try:
            if group.is_in_state(_S.DEAD):
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            group.validate_member(request.member_id, request.group_instance_id)
            if request.generation_id != group.generation_id:
                raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)
        except CoordinatorError as exc:
            return HeartbeatResponse(error_code=exc.error_code)
        if group.is_in_state(_S.EMPTY):
            return HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        self.r.reschedule_heartbeat(group, group.member(request.member_id), now_ms)
        if group.is_in_state(_S.PREPARING_REBALANCE):
            return HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        # CompletingRebalance (members may heartbeat right after their JoinGroup response) or Stable.
        return HeartbeatResponse()

    # -- LeaveGroup ----------------------------------------------------------------------------------

    def leave_group(self, request: LeaveGroupRequest, api_version: int, *, now_ms: int) -> LeaveGroupResponse:
        if api_version >= 3:
            identities = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            identities = [(request.member_id, None)]
        if not request.group_id:
            return leave_group_response(api_version, [], ErrorCode.INVALID_GROUP_ID)
        group = self.s.groups.get(request.group_id)
        if group is None:
            return leave_group_response(
                api_version,
                [
                    LeaveGroupResponse.MemberResponse(
                        member_id=mid, group_instance_id=iid, error_code=ErrorCode.UNKNOWN_MEMBER_ID
                    )
                    for mid, iid in identities
                ],
            )
        if group.is_in_state(_S.DEAD):
            return leave_group_response(api_version, [], ErrorCode.COORDINATOR_NOT_AVAILABLE)
        responses: list[LeaveGroupResponse.MemberResponse] = []
        for member_id, instance_id in identities:
            error = ErrorCode.NONE
            if member_id == UNKNOWN_MEMBER_ID:
                # Admin tools remove static members by instance id alone.
                static_id = group.static_member_id(instance_id) if instance_id is not None else None
                if static_id is not None:
                    self.r.remove_member(group, group.member(static_id))
                else:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self.r.cancel_heartbeat(group, member_id)
            else:
                try:
                    group.validate_member(member_id, instance_id)
                    self.r.remove_member(group, group.member(member_id))
                except CoordinatorError as exc:
                    error = exc.error_code
            responses.append(
                LeaveGroupResponse.MemberResponse(
                    member_id=member_id, group_instance_id=instance_id, error_code=error
                )
            )
        if any(r.error_code == ErrorCode.NONE for r in responses):
            if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
                self.r.maybe_prepare_rebalance_or_complete_join(group, now_ms)
            elif group.is_in_state(_S.PREPARING_REBALANCE):
                self.r.maybe_complete_join_phase(group, now_ms)
        return leave_group_response(api_version, responses)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
