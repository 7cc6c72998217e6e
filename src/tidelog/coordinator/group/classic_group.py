"""A classic group's membership and generation (Kafka's ``ClassicGroup``): bookkeeping, no protocol.

This class knows who is in the group, who has rejoined, who has synced, which protocol the members
agree on and what state the group is in. It neither answers requests nor keeps timers; the classic
protocol handlers (:mod:`tidelog.coordinator.group.classic_protocol`) drive it.

Invariants:

- ``members`` keeps insertion order; when the leader leaves, the first remaining member leads.
- ``static_members`` maps each present ``group_instance_id`` to its member id, and nothing else.
- ``num_members_awaiting_join`` equals the number of members whose ``awaiting_join`` is set.
- ``supported_protocols[name]`` counts the members supporting ``name``; a protocol is a candidate
  only if all members support it, and a non-empty group always has a candidate.
- ``pending_join_members`` are member ids handed out with MEMBER_ID_REQUIRED that have not joined
  yet; ``pending_sync_members`` are members of the current generation that have not sent SyncGroup.
- Every state change goes through :meth:`transition_to`, which enforces the transition table and
  stamps ``current_state_timestamp`` with the caller's ``now_ms``.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Set

from tidelog.coordinator.common.result import DeferredResponse
from tidelog.coordinator.group.classic_group_member import ClassicGroupMember, Protocols
from tidelog.coordinator.group.classic_group_state import (
    VALID_PREVIOUS_STATES,
    ClassicGroupState,
    assert_valid_transition,
)
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.group_type import GroupType
from tidelog.coordinator.group.offsets import OffsetAndMetadata
from tidelog.protocol import codec
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import ConsumerProtocolSubscription, JoinGroupResponse, ListGroupsResponse

__all__ = ["CONSUMER_PROTOCOL_TYPE", "ClassicGroup"]

CONSUMER_PROTOCOL_TYPE = "consumer"
"""The protocol type of Kafka consumers (``ConsumerProtocol.PROTOCOL_TYPE``): their metadata is a
``ConsumerProtocolSubscription``, which lets the coordinator know the subscribed topics."""

_S = ClassicGroupState


def _subscribed_topics(metadata: bytes) -> frozenset[str]:
    """Topics of a consumer's subscription, read with the version-0 prefix every version shares."""
    if len(metadata) < 2 or struct.unpack_from(">h", metadata)[0] < 0:
        raise KafkaProtocolError("bad consumer protocol version", ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    subscription = codec.decode(ConsumerProtocolSubscription, 0, memoryview(metadata)[2:])
    return frozenset(subscription.topics)


class ClassicGroup:
    group_type = GroupType.CLASSIC

    def __init__(
        self,
        group_id: str,
        state: ClassicGroupState = _S.EMPTY,
        *,
        current_state_timestamp: int | None = None,
        generation_id: int = 0,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = _S.DEAD
        self.current_state_timestamp = current_state_timestamp
        """When the group entered its state; ``None`` for groups created without one (simple groups,
        records written before GroupMetadataValue v2)."""
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.pending_join_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.subscribed_topics: frozenset[str] | None = None
        """Union of the members' subscriptions when the protocol type is ``consumer`` and every
        member's metadata parses; ``None`` when unknown."""
        self.new_member_added = False
        """A member joined during the initial rebalance: the initial delay is extended once more."""

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
            f"protocol_type={self.protocol_type!r}, protocol={self.protocol_name!r}, leader={self.leader_id!r}, "
            f"members={list(self.members)})"
        )

    # -- state ---------------------------------------------------------------------------------------

    def is_in_state(self, state: ClassicGroupState) -> bool:
        return self.state is state

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        assert_valid_transition(self.group_id, self.state, target)
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[_S.PREPARING_REBALANCE]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def uses_consumer_group_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_in_states(self, states_filter: Set[str]) -> bool:
        """ListGroups' state filter (lower-cased names)."""
        return self.state.lower_case_name in states_filter

    # -- membership ----------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def add(self, member: ClassicGroupMember, handle: DeferredResponse | None = None) -> None:
        """Add a member (``handle``: its parked JoinGroup, if any). The caller checked the protocols."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise RuntimeError("the group's and the member's protocol types must be the same")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise RuntimeError("none of the member's protocols can be supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.awaiting_join = handle
        if handle is not None:
            self.num_members_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self.supported_protocols.subtract(removed.protocol_names())
            self.supported_protocols += Counter()  # drop zero counts
            if removed.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return removed

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        handle: DeferredResponse | None,
    ) -> DeferredResponse | None:
        """Refresh a member's protocols and timeouts and park (or unpark) its JoinGroup.

        Returns the member's previously parked JoinGroup if ``handle`` supersedes it (the caller must
        answer it: nobody else will)."""
        self.supported_protocols.subtract(member.protocol_names())
        member.supported_protocols = protocols
        self.supported_protocols.update(member.protocol_names())
        self.supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        superseded = member.awaiting_join if handle is not None else None
        if handle is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif handle is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = handle
        return superseded

    def take_join_handle(self, member: ClassicGroupMember) -> DeferredResponse | None:
        """Unpark the member's JoinGroup: returns its handle (for the caller to answer) or ``None``."""
        handle = member.awaiting_join
        if handle is not None:
            member.awaiting_join = None
            self.num_members_awaiting_join -= 1
        return handle

    def take_sync_handle(self, member: ClassicGroupMember) -> DeferredResponse | None:
        handle = member.awaiting_sync
        member.awaiting_sync = None
        return handle

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> tuple[ClassicGroupMember, ClassicGroupMember]:
        """Give a static member a new member id, keeping everything else (its assignment included).

        Returns ``(new, old)``; the caller must fence the old member's parked requests
        (``old.awaiting_join`` / ``old.awaiting_sync``) with FENCED_INSTANCE_ID."""
        old = self.members.pop(old_member_id, None)
        if old is None:
            raise RuntimeError(f"cannot replace unknown member {old_member_id}")
        if old.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        new = ClassicGroupMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            supported_protocols=old.supported_protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        self.pending_sync_members.discard(old_member_id)
        return new, old

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if self.has_member(member_id):
            raise RuntimeError(f"{member_id} is already a member of {self.group_id}")
        self.pending_join_members.add(member_id)

    def add_pending_sync_member(self, member_id: str) -> None:
        if not self.has_member(member_id):
            raise RuntimeError(f"{member_id} is not a member of {self.group_id}")
        self.pending_sync_members.add(member_id)

    def remove_pending_sync_member(self, member_id: str) -> None:
        self.pending_sync_members.discard(member_id)

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def clear_pending_sync_members(self) -> None:
        self.pending_sync_members.clear()

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_join_members

    def rebalance_timeout_ms(self) -> int:
        """The group's rebalance timeout: the largest of its members'."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader has not rejoined, make the first member that did the leader.

        Returns False when the group has no leader or nobody rejoined, True otherwise."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- validation ----------------------------------------------------------------------------------

    def is_static_member_fenced(self, group_instance_id: str, member_id: str) -> bool:
        existing = self.static_member_id(group_instance_id)
        return existing is not None and existing != member_id

    def validate_member(self, member_id: str, group_instance_id: str | None) -> None:
        """The member exists and, if static, its instance id maps to it (else FENCED_INSTANCE_ID)."""
        if group_instance_id is not None:
            existing = self.static_member_id(group_instance_id)
            if existing is None:
                raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                raise CoordinatorError(ErrorCode.FENCED_INSTANCE_ID)
        if not self.has_member(member_id):
            raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID)

    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        *,
        is_transactional: bool = False,
    ) -> None:
        if self.is_in_state(_S.DEAD):
            raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.is_in_state(_S.EMPTY):
            # Admin clients and consumers without group management commit with generation -1: accepted
            # while the group has no members.
            return
        if generation_id >= 0 or member_id or group_instance_id is not None:
            self.validate_member(member_id, group_instance_id)
            if generation_id != self.generation_id:
                raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)
        elif not is_transactional and not self.is_in_state(_S.EMPTY):
            # No member id and no generation (OffsetCommit v0): only for groups without members.
            raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID)
        if not is_transactional and self.is_in_state(_S.COMPLETING_REBALANCE):
            # A member of the new generation that has not got its assignment yet: let it rejoin cleanly.
            raise CoordinatorError(ErrorCode.REBALANCE_IN_PROGRESS)

    def validate_offset_delete(self) -> None:
        if self.is_in_state(_S.DEAD):
            raise CoordinatorError(ErrorCode.GROUP_ID_NOT_FOUND)
        if self.state is not _S.EMPTY and not self.uses_consumer_group_protocol():
            raise CoordinatorError(ErrorCode.NON_EMPTY_GROUP)

    def validate_delete_group(self) -> None:
        if self.is_in_state(_S.DEAD):
            raise CoordinatorError(ErrorCode.GROUP_ID_NOT_FOUND)
        if self.state is not _S.EMPTY:
            raise CoordinatorError(ErrorCode.NON_EMPTY_GROUP)

    # -- protocols -----------------------------------------------------------------------------------

    def supports_protocols(self, member_protocol_type: str, member_protocols: Set[str]) -> bool:
        """Whether a member with these protocols may be in the group: in an Empty group anything
        non-empty goes; otherwise the type must match and one protocol must be supported by all."""
        if self.is_in_state(_S.EMPTY):
            return bool(member_protocol_type) and bool(member_protocols)
        n = len(self.members)
        return self.protocol_type == member_protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in member_protocols
        )

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its preferred candidate; most votes wins (ties: first voted for)."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(member.vote(candidates) for member in self.members.values())
        return votes.most_common(1)[0][0]

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics |= _subscribed_topics(member.metadata(self.protocol_name))
        except KafkaProtocolError:
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_group_protocol()

    # -- generations ---------------------------------------------------------------------------------

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(_S.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(_S.EMPTY, now_ms)
        self.clear_pending_sync_members()

    def current_members_for_join(self) -> list[JoinGroupResponse.JoinGroupResponseMember]:
        """The member list the leader gets in its JoinGroup response."""
        if self.state in (_S.DEAD, _S.PREPARING_REBALANCE):
            raise RuntimeError(f"no member metadata for group {self.group_id} in state {self.state.value}")
        return [
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata(self.protocol_name),
            )
            for m in self.members.values()
        ]

    def group_assignment(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    def as_listed_group(self) -> ListGroupsResponse.ListedGroup:
        return ListGroupsResponse.ListedGroup(
            group_id=self.group_id,
            protocol_type=self.protocol_type or "",
            group_state=self.state.value,
            group_type=self.group_type.value,
        )

    # -- offset expiry -------------------------------------------------------------------------------

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        """Kafka's ``offsetExpirationCondition``: what an offset's retention counts from, or ``None``
        when the group's offsets must not expire now.

        - a group with a protocol type, Empty: since it became empty (or, for old records without a
          state timestamp, since the commit);
        - a consumer group that is Stable and knows its subscriptions: since the commit (for topics it
          no longer subscribes to; the caller skips subscribed topics);
        - a simple group (no protocol type): since the commit."""
        if self.protocol_type is not None:
            if self.is_in_state(_S.EMPTY):
                emptied = self.current_state_timestamp
                if emptied is not None:
                    return lambda _offset: emptied
                return lambda offset: offset.commit_timestamp_ms
            if (
                self.uses_consumer_group_protocol()
                and self.subscribed_topics is not None
                and self.is_in_state(_S.STABLE)
            ):
                return lambda offset: offset.commit_timestamp_ms
            return None
        return lambda offset: offset.commit_timestamp_ms
