"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

A port of the ``consumerGroup*`` handlers of Kafka's ``GroupMetadataManager``. A heartbeat:

1. creates or updates the member; if its subscription changed, or the subscribed topics' metadata
   did, the group epoch is bumped;
2. if the group epoch is ahead of the target assignment epoch, the group's server assignor computes
   a new target assignment (:mod:`tidelog.coordinator.group.target_assignment`);
3. reconciles the member towards its target (:mod:`tidelog.coordinator.group.reconciliation`): revoke
   first, then take partitions only once their previous owners have released them.

A member leaves with epoch -1 (a static member with -2, keeping its partitions until its session
runs out); a member that stops heartbeating for ``group.consumer.session.timeout.ms``, or does not
revoke within its rebalance timeout, is fenced. Fencing removes the member and bumps the group
epoch; the next heartbeat of any member recomputes the target assignment.

Invariants:

- Handlers never change a group: they emit records, and the shard replays them in order once the
  request succeeded (:meth:`ConsumerGroupManager._commit`) — the very records a load replays. A
  request that fails emits nothing and schedules nothing.
- Every member in a group has a CONSUMER_SESSION timer; a member in UNREVOKED_PARTITIONS also has a
  CONSUMER_REBALANCE timer for the epoch it must leave.
- A consumer group and a classic group never share an id: a heartbeat that would create a consumer
  group over an Empty classic group deletes that group first (Kafka's ``maybeDeleteEmptyClassicGroup``);
  any other classic group makes it GROUP_ID_NOT_FOUND.

Deliberate differences from Kafka:

- A known member heartbeating with epoch 0 after it was fenced (it has dropped all its partitions,
  as the protocol requires) rejoins at once under the same member id; Kafka answers
  FENCED_MEMBER_EPOCH until its session expires, unless epoch 0 is the member's previous epoch (a
  lost first response), which Kafka and tidelog both accept.
- A member of a group that no longer exists (its session expired, then the empty group was deleted)
  hears UNKNOWN_MEMBER_ID, which makes clients rejoin; Kafka answers GROUP_ID_NOT_FOUND, which
  clients treat as fatal. An id that belongs to a classic group is GROUP_ID_NOT_FOUND in both.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from uuid import UUID

from tidelog.coordinator.group.assignors import ASSIGNORS, assignor_name
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.consumer_group import ConsumerGroup, TopicMetadata
from tidelog.coordinator.group.consumer_group_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    assignment_to_pairs,
    is_subset,
)
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.reconciliation import PartitionEpoch, reconcile
from tidelog.coordinator.group.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    RecordKey,
    RecordValue,
)
from tidelog.coordinator.group.shard_state import ShardState
from tidelog.coordinator.group.target_assignment import (
    build_target_assignment,
    target_assignment_member_value,
)
from tidelog.coordinator.group.timers import MemberRebalanceTimer, TimerKind
from tidelog.coordinator.group.topics_image import TopicsImage
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

__all__ = ["ConsumerGroupManager", "compute_subscription_metadata", "heartbeat_error_response"]

_S = MemberState
_CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
"""From ConsumerGroupHeartbeat v1 the client generates its member id (KIP-1082)."""

_OwnedPartitions = list[tuple[UUID, list[int]]] | None


def heartbeat_error_response(error: ErrorCode, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=error, error_message=message)


def compute_subscription_metadata(names: Counter[str], topics: TopicsImage) -> dict[str, TopicMetadata]:
    """The subscribed topics that exist, with their ids and partition counts."""
    metadata = {}
    for name in sorted(names):
        topic = topics.by_name.get(name)
        if topic is not None and names[name] > 0:
            metadata[name] = TopicMetadata(topic.topic_id, name, topic.num_partitions)
    return metadata


def _subscription_metadata_value(
    metadata: Mapping[str, TopicMetadata],
) -> ConsumerGroupPartitionMetadataValue:
    topic = ConsumerGroupPartitionMetadataValue.TopicMetadata
    return ConsumerGroupPartitionMetadataValue(
        topics=[
            topic(topic_id=m.topic_id, topic_name=m.name, num_partitions=m.num_partitions)
            for m in metadata.values()
        ]
    )


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def _kafka_uuid_string(value: UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


@dataclass(frozen=True, slots=True)
class _Heartbeat:
    """Who heartbeats: what the steps of one ConsumerGroupHeartbeat share once the member is identified."""

    request: ConsumerGroupHeartbeatRequest
    group: ConsumerGroup
    member_id: str
    member: ConsumerGroupMember
    """The member as the heartbeat finds it: stored, new, reset for a rejoin, or a static member's new
    incarnation."""
    stored: ConsumerGroupMember | None
    """The member as the group holds it under ``member_id`` (``None`` for a new member)."""
    replaced: ConsumerGroupMember | None
    """The static member this one replaces (same instance id, earlier member id)."""
    rejoined: bool
    """A known member back with epoch 0 after it was fenced."""
    owned: _OwnedPartitions
    """The partitions the member says it owns (``None``: not sent)."""

    @property
    def own_member_ids(self) -> set[str]:
        """This member's id, and the replaced incarnation's."""
        return {self.member_id} | ({self.replaced.member_id} if self.replaced is not None else set())


def _declared_member(
    member: ConsumerGroupMember, request: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str
) -> ConsumerGroupMember:
    """The member with what the heartbeat declares (a field the request leaves out keeps its value)."""
    return dataclasses.replace(
        member,
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms
        if request.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        server_assignor_name=request.server_assignor
        if request.server_assignor is not None
        else member.server_assignor_name,
        subscribed_topic_names=frozenset(request.subscribed_topic_names)
        if request.subscribed_topic_names is not None
        else member.subscribed_topic_names,
        subscribed_topic_regex=(request.subscribed_topic_regex or None)
        if request.subscribed_topic_regex is not None
        else member.subscribed_topic_regex,
        client_id=client_id,
        client_host=client_host,
    )


class ConsumerGroupManager:
    def __init__(self, state: ShardState, *, new_uuid: Callable[[], UUID]) -> None:
        self.s = state
        self.topics = TopicsImage.EMPTY
        """The cluster's topics, as the runtime last set them."""
        self._new_uuid = new_uuid
        self._pending: list[tuple[RecordKey, RecordValue | None]] = []
        self._timer_ops: list[Callable[[], None]] = []
        self.assignor_names = tuple(assignor_name(a) for a in state.config.group_consumer_assignors)
        if not self.assignor_names:
            raise ValueError("group.consumer.assignors must name at least one assignor")

    @property
    def default_assignor(self) -> str:
        return self.assignor_names[0]

    # -- emitting ------------------------------------------------------------------------------------

    def _emit(self, key: RecordKey, value: RecordValue | None) -> None:
        self._pending.append((key, value))

    def _schedule(
        self, kind: TimerKind, group_id: str, member_id: str, deadline_ms: int, epoch: int | None = None
    ) -> None:
        key = self.s.timer_key(kind, group_id, member_id)
        payload = None if epoch is None else MemberRebalanceTimer(epoch)
        self._timer_ops.append(lambda: self.s.schedule(key, deadline_ms, payload))

    def _cancel(self, kind: TimerKind, group_id: str, member_id: str) -> None:
        key = self.s.timer_key(kind, group_id, member_id)
        self._timer_ops.append(lambda: self.s.cancel(key))

    def _begin(self) -> None:
        self._pending, self._timer_ops = [], []

    def _commit(self) -> None:
        """The request succeeded: write and replay its records in order, then apply its timers."""
        pending, timer_ops = self._pending, self._timer_ops
        self._pending, self._timer_ops = [], []
        for key, value in pending:
            self.s.write(key, value, replay=True)
        for op in timer_ops:
            op()

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------------------

    def heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        api_version: int,
        *,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> ConsumerGroupHeartbeatResponse:
        self._begin()
        try:
            self._validate(request, api_version)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._leave(request)
            else:
                response = self._heartbeat(request, client_id, client_host, now_ms)
        except CoordinatorError as exc:
            self._begin()
            message = str(exc)
            return heartbeat_error_response(
                exc.error_code, None if message == exc.error_code.name else message
            )
        self._commit()
        return response

    def _validate(self, request: ConsumerGroupHeartbeatRequest, api_version: int) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""

        def invalid(message: str) -> CoordinatorError:
            return CoordinatorError(ErrorCode.INVALID_REQUEST, message)

        epoch = request.member_epoch
        if (
            api_version >= _CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION
            or epoch > 0
            or epoch == LEAVE_GROUP_MEMBER_EPOCH
        ) and not request.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if not request.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if _blank(request.instance_id):
            raise invalid("InstanceId can't be empty.")
        if _blank(request.rack_id):
            raise invalid("RackId can't be empty.")
        if epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignor_names:
            raise CoordinatorError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.assignor_names)}.",
            )
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as exc:
                raise invalid(
                    f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not valid: {exc}"
                ) from None

    def _heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str, now_ms: int
    ) -> ConsumerGroupHeartbeatResponse:
        """Kafka's ``consumerGroupHeartbeat`` for a joining or active member, step by step (the module
        docstring's numbers); every step emits its records in this order, as Kafka does."""
        hb = self._identify_member(request)
        updated = _declared_member(hb.member, request, client_id, client_host)
        group_epoch, subscription_metadata = self._update_group_epoch(hb, updated)  # 1.
        target_epoch, target = self._target_assignment(hb, updated, group_epoch, subscription_metadata)  # 2.
        reconciled = self._reconcile_member(hb, updated, target_epoch, target, now_ms)  # 3.
        self._schedule(
            TimerKind.CONSUMER_SESSION,
            hb.group.group_id,
            hb.member_id,
            now_ms + self.s.config.consumer_session_timeout_ms(hb.group.group_id),
        )
        return self._heartbeat_response(hb, reconciled)

    def _identify_member(self, request: ConsumerGroupHeartbeatRequest) -> _Heartbeat:
        """The group (created for a joining member if need be), the member id (generated for a new member
        of an old client) and who the member is: new, known, rejoining after fencing, or a static
        member's new incarnation."""
        member_epoch = request.member_epoch
        owned: _OwnedPartitions = (
            None
            if request.topic_partitions is None
            else [(tp.topic_id, list(tp.partitions)) for tp in request.topic_partitions]
        )
        joining = member_epoch == 0
        group = self._get_or_maybe_create_group(request.group_id, joining)
        member_id = request.member_id
        if (
            group.members
            and len(group.members) >= self.s.config.group_consumer_max_size
            and (not member_id or member_id not in group.members)
        ):
            raise CoordinatorError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.s.config.group_consumer_max_size} members.",
            )
        if not member_id:
            member_id = _kafka_uuid_string(self._new_uuid())
        replaced: ConsumerGroupMember | None = None
        rejoined = False
        if request.instance_id is None:
            member, rejoined = self._dynamic_member(group, member_id, member_epoch, owned, joining)
        else:
            member, replaced, rejoined = self._static_member(
                group, member_id, member_epoch, request.instance_id, owned, joining
            )
        return _Heartbeat(
            request=request,
            group=group,
            member_id=member_id,
            member=member,
            stored=group.members.get(member_id),
            replaced=replaced,
            rejoined=rejoined,
            owned=owned,
        )

    def _update_group_epoch(
        self, hb: _Heartbeat, updated: ConsumerGroupMember
    ) -> tuple[int, dict[str, TopicMetadata]]:
        """Step 1: the member's declared metadata and the subscribed topics' metadata (recomputed every
        heartbeat: Kafka's refresh interval is 0 here); a change of either bumps the group epoch, as does
        a group's first member. Returns the group epoch and the subscription metadata."""
        group, member = hb.group, hb.member
        bump = group.group_epoch == 0
        if hb.stored is None or updated.metadata_value() != member.metadata_value():
            self._emit(
                ConsumerGroupMemberMetadataKey(group_id=group.group_id, member_id=hb.member_id),
                updated.metadata_value(),
            )
            if (
                updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex
            ):
                bump = True
        names = group.compute_subscribed_topic_names(hb.own_member_ids, updated, self.topics)
        subscription_metadata = compute_subscription_metadata(names, self.topics)
        if subscription_metadata != group.subscription_metadata:
            bump = True
            self._emit(
                ConsumerGroupPartitionMetadataKey(group_id=group.group_id),
                _subscription_metadata_value(subscription_metadata),
            )
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            self._emit(
                ConsumerGroupMetadataKey(group_id=group.group_id),
                ConsumerGroupMetadataValue(epoch=group_epoch),
            )
        return group_epoch, subscription_metadata

    def _target_assignment(
        self,
        hb: _Heartbeat,
        updated: ConsumerGroupMember,
        group_epoch: int,
        subscription_metadata: dict[str, TopicMetadata],
    ) -> tuple[int, Assignment]:
        """Step 2: a new target assignment when the group epoch moved ahead of it. Returns the target
        assignment epoch and the member's target."""
        group = hb.group
        if group_epoch <= group.assignment_epoch:
            return group.assignment_epoch, group.target_assignment_of(hb.member_id, updated.instance_id)
        assignor = ASSIGNORS[group.preferred_server_assignor(hb.stored, updated) or self.default_assignor]
        result = build_target_assignment(
            group,
            group_epoch,
            assignor,
            subscription_metadata,
            self.topics,
            updated_member=updated,
            removed_member_id=None if hb.replaced is None else hb.replaced.member_id,
        )
        for key, value in result.records:
            self._emit(key, value)
        return group_epoch, result.assignment[hb.member_id]

    def _reconcile_member(
        self,
        hb: _Heartbeat,
        updated: ConsumerGroupMember,
        target_epoch: int,
        target: Assignment,
        now_ms: int,
    ) -> ConsumerGroupMember:
        """Step 3: reconcile the member with its target; a changed current assignment is written, and a
        member left revoking partitions gets a rebalance timer (any other loses it)."""
        group, member_id = hb.group, hb.member_id
        partition_epoch: PartitionEpoch = group.current_partition_epoch
        if hb.rejoined or hb.replaced is not None:
            # What the member (or the incarnation it replaces) held is free for it.
            mine = hb.own_member_ids

            def partition_epoch(topic_id: UUID, partition: int) -> int:
                owner = group.partition_owner(topic_id, partition)
                return (
                    -1
                    if owner is None or owner in mine
                    else group.current_partition_epoch(topic_id, partition)
                )

        reconciled = updated
        if not updated.is_reconciled_to(target_epoch) or hb.rejoined:
            reconciled = reconcile(updated, target_epoch, target, partition_epoch, hb.owned)
        if (
            hb.stored is None
            or hb.replaced is not None
            or reconciled.current_assignment_value() != hb.stored.current_assignment_value()
        ):
            self._emit(
                ConsumerGroupCurrentMemberAssignmentKey(group_id=group.group_id, member_id=member_id),
                reconciled.current_assignment_value(),
            )
            if reconciled.state is _S.UNREVOKED_PARTITIONS:
                self._schedule(
                    TimerKind.CONSUMER_REBALANCE,
                    group.group_id,
                    member_id,
                    now_ms + max(reconciled.rebalance_timeout_ms, 0),
                    reconciled.member_epoch,
                )
            else:
                self._cancel(TimerKind.CONSUMER_REBALANCE, group.group_id, member_id)
        return reconciled

    def _heartbeat_response(
        self, hb: _Heartbeat, reconciled: ConsumerGroupMember
    ) -> ConsumerGroupHeartbeatResponse:
        """The member's epoch, and its assignment when it changed or the request was a full one."""
        request = hb.request
        response = ConsumerGroupHeartbeatResponse(
            member_id=hb.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.s.config.consumer_heartbeat_interval_ms(hb.group.group_id),
        )
        full_request = request.member_epoch == 0 or (
            request.rebalance_timeout_ms != -1
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None)
            and hb.owned is not None
        )
        if full_request or reconciled.assigned_partitions != hb.member.assigned_partitions:
            tps = ConsumerGroupHeartbeatResponse.TopicPartitions
            response.assignment = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    tps(topic_id=t, partitions=ps)
                    for t, ps in assignment_to_pairs(reconciled.assigned_partitions)
                ]
            )
        return response

    def _get_or_maybe_create_group(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.s.consumer_groups.get(group_id)
        if group is not None:
            return group
        classic = self.s.groups.get(group_id)
        if classic is None:
            if not create:
                raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID, f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id)
        if create and classic.is_in_state(ClassicGroupState.EMPTY) and not classic.pending_join_members:
            # An Empty classic group (or one that only holds offsets) makes way; its offsets stay.
            self._emit(GroupMetadataKey(group=group_id), None)
            return ConsumerGroup(group_id)
        raise CoordinatorError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    def _dynamic_member(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, owned: _OwnedPartitions, joining: bool
    ) -> tuple[ConsumerGroupMember, bool]:
        member = group.get_or_create_member(member_id, joining)
        try:
            _check_member_epoch(member, member_epoch, owned)
        except CoordinatorError:
            if not (joining and member_id in group.members):
                raise
            return _rejoining(member), True
        return member, False

    def _static_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        instance_id: str,
        owned: _OwnedPartitions,
        joining: bool,
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None, bool]:
        """(member, the static member it replaces, whether it rejoins after fencing)."""
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return group.get_or_create_member(member_id, True), None, False
            if existing.member_id == member_id:
                try:
                    _check_member_epoch(existing, member_epoch, owned)
                except CoordinatorError:
                    return _rejoining(existing), None, True
                return existing, None, False
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise CoordinatorError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because "
                    f"the instance id is owned by {existing.member_id} member.",
                )
            # The static member comes back under a new member id: it takes its predecessor's place.
            new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            self._remove_member_records(group.group_id, existing.member_id)
            self._emit(
                ConsumerGroupMemberMetadataKey(group_id=group.group_id, member_id=member_id),
                new.metadata_value(),
            )
            self._emit(
                ConsumerGroupTargetAssignmentMemberKey(group_id=group.group_id, member_id=member_id),
                target_assignment_member_value(group.target_assignment_of(existing.member_id)),
            )
            self._cancel(TimerKind.CONSUMER_SESSION, group.group_id, existing.member_id)
            self._cancel(TimerKind.CONSUMER_REBALANCE, group.group_id, existing.member_id)
            return new, existing, False
        if existing is None:
            raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise CoordinatorError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by member {existing.member_id}.",
            )
        _check_member_epoch(existing, member_epoch, owned)
        return existing, None, False

    # -- leaving and fencing -------------------------------------------------------------------------

    def _leave(self, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        group_id, member_id, member_epoch = request.group_id, request.member_id, request.member_epoch
        group = self.s.consumer_groups.get(group_id)
        if group is None:
            error = ErrorCode.GROUP_ID_NOT_FOUND if group_id in self.s.groups else ErrorCode.UNKNOWN_MEMBER_ID
            raise CoordinatorError(error, f"Group {group_id} is not a consumer group with this member.")
        response = ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=member_epoch)
        if request.instance_id is None:
            self._fence(group, group.get_or_create_member(member_id, create=False))
            return response
        member = group.static_member(request.instance_id)
        if member is None:
            raise CoordinatorError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {request.instance_id} is unknown."
            )
        if member.member_id != member_id:
            raise CoordinatorError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {request.instance_id} was fenced by member "
                f"{member.member_id}.",
            )
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # It will be back: it keeps its partitions until then (or until its session runs out).
            leaving = dataclasses.replace(
                member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={}
            )
            self._emit(
                ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id),
                leaving.current_assignment_value(),
            )
            self._cancel(TimerKind.CONSUMER_REBALANCE, group_id, member_id)
            return ConsumerGroupHeartbeatResponse(
                member_id=member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
            )
        self._fence(group, member)
        return response

    def _remove_member_records(self, group_id: str, member_id: str) -> None:
        """Kafka's ``removeMember``: current assignment, target assignment, then metadata tombstones."""
        self._emit(ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None)
        self._emit(ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None)
        self._emit(ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None)

    def _fence(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Take the member out (its partitions are free at once) and bump the group epoch."""
        self._remove_member_records(group.group_id, member.member_id)
        names = group.compute_subscribed_topic_names({member.member_id}, None, self.topics)
        subscription_metadata = compute_subscription_metadata(names, self.topics)
        if subscription_metadata != group.subscription_metadata:
            self._emit(
                ConsumerGroupPartitionMetadataKey(group_id=group.group_id),
                _subscription_metadata_value(subscription_metadata),
            )
        self._emit(
            ConsumerGroupMetadataKey(group_id=group.group_id),
            ConsumerGroupMetadataValue(epoch=group.group_epoch + 1),
        )
        self._cancel(TimerKind.CONSUMER_SESSION, group.group_id, member.member_id)
        self._cancel(TimerKind.CONSUMER_REBALANCE, group.group_id, member.member_id)

    # -- timers --------------------------------------------------------------------------------------

    def on_session_expired(self, group_id: str, member_id: str) -> None:
        """The member did not heartbeat within the session timeout: fence it."""
        group = self.s.consumer_groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        self._begin()
        self._fence(group, member)
        self._commit()

    def on_rebalance_timeout(self, group_id: str, member_id: str, timer: MemberRebalanceTimer) -> None:
        """The member did not revoke in time: fence it, unless it has moved on from that epoch."""
        group = self.s.consumer_groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None or member.member_epoch != timer.member_epoch:
            return
        self._begin()
        self._fence(group, member)
        self._commit()

    def on_loaded(self, now_ms: int) -> None:
        """After a partition is loaded: expect every member to heartbeat, and revoking ones to revoke."""
        for group in self.s.consumer_groups.values():
            for member in group.members.values():
                self.s.schedule(
                    self.s.timer_key(TimerKind.CONSUMER_SESSION, group.group_id, member.member_id),
                    now_ms + self.s.config.consumer_session_timeout_ms(group.group_id),
                )
                if member.state is _S.UNREVOKED_PARTITIONS:
                    self.s.schedule(
                        self.s.timer_key(TimerKind.CONSUMER_REBALANCE, group.group_id, member.member_id),
                        now_ms + max(member.rebalance_timeout_ms, 0),
                        MemberRebalanceTimer(member.member_epoch),
                    )

    # -- admin ---------------------------------------------------------------------------------------

    def delete_group(self, group: ConsumerGroup) -> None:
        """Tombstones for an Empty group (Kafka's ``createGroupTombstoneRecords``), written at once."""
        self._begin()
        for member_id in group.members:
            self._emit(
                ConsumerGroupCurrentMemberAssignmentKey(group_id=group.group_id, member_id=member_id), None
            )
        for member_id in group.members:
            self._emit(
                ConsumerGroupTargetAssignmentMemberKey(group_id=group.group_id, member_id=member_id), None
            )
        self._emit(ConsumerGroupTargetAssignmentMetadataKey(group_id=group.group_id), None)
        for member_id in group.members:
            self._emit(ConsumerGroupMemberMetadataKey(group_id=group.group_id, member_id=member_id), None)
        self._emit(ConsumerGroupPartitionMetadataKey(group_id=group.group_id), None)
        self._emit(ConsumerGroupMetadataKey(group_id=group.group_id), None)
        self._commit()

    def describe(self, group_id: str) -> ConsumerGroupDescribeResponse.DescribedGroup:
        group = self.s.consumer_groups.get(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in self.s.groups
                else f"Group {group_id} not found."
            )
            return ConsumerGroupDescribeResponse.DescribedGroup(
                group_id=group_id, error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message
            )
        return group.describe(self.topics, self.default_assignor)


def _check_member_epoch(member: ConsumerGroupMember, received: int, owned: _OwnedPartitions) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``: a member heartbeats with its epoch, or with
    its previous one (the response that bumped it was lost) while owning no more than it is assigned."""
    if received > member.member_epoch:
        raise CoordinatorError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not is_subset(owned, member.assigned_partitions)
    ):
        raise CoordinatorError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )


def _rejoining(member: ConsumerGroupMember) -> ConsumerGroupMember:
    """A member back with epoch 0: it holds nothing, and reconciles from scratch."""
    return dataclasses.replace(
        member,
        member_epoch=0,
        previous_member_epoch=0,
        state=_S.STABLE,
        assigned_partitions={},
        partitions_pending_revocation={},
    )
