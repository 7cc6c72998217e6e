"""A KIP-848 consumer group's durable state (Kafka's ``ConsumerGroup``): bookkeeping, no protocol.

The group holds what its records say: the group epoch (bumped whenever membership or subscriptions
change), the subscription metadata the target assignment was computed from, the target assignment
and its epoch, and the members with their current assignments. The request handlers
(:mod:`tidelog.coordinator.group.consumer_protocol`) never change it: they emit records, and only
:mod:`tidelog.coordinator.group.consumer_group_replay` applies records to it.

Invariants:

- ``static_members`` maps each present ``instance_id`` to its member id, and nothing else.
- Every partition assigned to or pending revocation from a member has exactly one owner in
  ``partition_owners`` (the member and its epoch); a partition is never owned twice (Kafka's
  ``currentPartitionEpoch``): this is what keeps a partition from being handed to its next owner
  before its previous owner has revoked it.
- The group's state is derived, never stored: Empty without members, Assigning while the group
  epoch is ahead of the target assignment epoch, Reconciling while a member is not reconciled to
  the target assignment epoch, Stable otherwise; Dead once removed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Set
from dataclasses import dataclass
from enum import Enum
from uuid import UUID

from tidelog.coordinator.group.consumer_group_member import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupMember,
)
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.group_type import GroupType
from tidelog.coordinator.group.offsets import OffsetAndMetadata
from tidelog.coordinator.group.topics_image import TopicsImage
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ConsumerGroupDescribeResponse, ListGroupsResponse

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ConsumerGroup",
    "ConsumerGroupState",
    "TopicMetadata",
    "member_topic_names",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
"""What ListGroups reports as a consumer group's protocol type (Kafka's ``ConsumerProtocol.PROTOCOL_TYPE``)."""

_OFFSET_COMMIT_MIN_VERSION = 9
"""KIP-848 members commit with OffsetCommit v9+ (member epoch instead of generation)."""


class ConsumerGroupState(Enum):
    """``value`` is Kafka's wire name (ConsumerGroupDescribe, ListGroups)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value

    @property
    def lower_case_name(self) -> str:
        return self.value.lower()


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the target assignment saw it (``ConsumerGroupPartitionMetadataValue``)."""

    topic_id: UUID
    name: str
    num_partitions: int


def _regex_matches(regex: str, topics: TopicsImage) -> set[str]:
    """Topics a subscription regex selects (whole-name match, internal topics excluded, as Kafka)."""
    try:
        pattern = re.compile(regex)
    except re.error:
        return set()
    return {name for name in topics.by_name if not name.startswith("__") and pattern.fullmatch(name)}


def member_topic_names(member: ConsumerGroupMember, topics: TopicsImage) -> frozenset[str]:
    """The topic names a member subscribes to: its names, plus what its regex matches now."""
    if not member.subscribed_topic_regex:
        return member.subscribed_topic_names
    return member.subscribed_topic_names | _regex_matches(member.subscribed_topic_regex, topics)


class ConsumerGroup:
    group_type = GroupType.CONSUMER
    protocol_type = CONSUMER_PROTOCOL_TYPE

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        """The target assignment epoch (-1 after its tombstone, as Kafka)."""
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.partition_owners: dict[tuple[UUID, int], tuple[str, int]] = {}
        """(topic id, partition) -> (member id, member epoch) for assigned and revoking partitions."""
        self.subscribed_topic_names: Counter[str] = Counter()
        """Explicitly subscribed topic names, counted over members."""
        self.server_assignors: Counter[str] = Counter()
        self.dead = False

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, {self.state.value}, epoch={self.group_epoch}, "
            f"assignment_epoch={self.assignment_epoch}, members={list(self.members)})"
        )

    # -- state ---------------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def is_in_states(self, states_filter: Set[str]) -> bool:
        return self.state.lower_case_name in states_filter

    # -- membership ----------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def get_or_create_member(self, member_id: str, create: bool) -> ConsumerGroupMember:
        """The member, or a new one (epoch 0, nothing assigned) that is not in the group until its
        records are replayed; UNKNOWN_MEMBER_ID when it does not exist and ``create`` is False."""
        member = self.members.get(member_id)
        if member is not None:
            return member
        if not create:
            raise CoordinatorError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not a member of group {self.group_id}"
            )
        return ConsumerGroupMember(member_id=member_id)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members[member_id]

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def target_assignment_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """Kafka's ``targetAssignment(memberId, instanceId)``: a static member that replaced another
        inherits the replaced member's target until the next assignment."""
        assignment = self.target_assignment.get(member_id)
        if assignment is not None:
            return assignment
        previous = self.static_member_id(instance_id)
        if previous is not None:
            return self.target_assignment.get(previous, EMPTY_ASSIGNMENT)
        return EMPTY_ASSIGNMENT

    def current_partition_epoch(self, topic_id: UUID, partition: int) -> int:
        """The epoch of the partition's current owner, or -1 when nobody owns it."""
        owner = self.partition_owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def partition_owner(self, topic_id: UUID, partition: int) -> str | None:
        owner = self.partition_owners.get((topic_id, partition))
        return None if owner is None else owner[0]

    # -- replay (the only mutators) ------------------------------------------------------------------

    def update_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member (replaying its metadata or current-assignment record)."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._forget(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self.subscribed_topic_names.update(member.subscribed_topic_names)
        if member.server_assignor_name is not None:
            self.server_assignors[member.server_assignor_name] += 1
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    owner = self.partition_owners.get((topic_id, partition))
                    if owner is not None:
                        raise RuntimeError(
                            f"group {self.group_id}: cannot give {topic_id}-{partition} to {member.member_id} "
                            f"at epoch {member.member_epoch}: {owner[0]} still owns it at epoch {owner[1]}"
                        )
                    self.partition_owners[(topic_id, partition)] = (member.member_id, member.member_epoch)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._forget(member)
        return member

    def _forget(self, member: ConsumerGroupMember) -> None:
        """Undo everything ``update_member`` recorded for ``member``."""
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]
        self.subscribed_topic_names.subtract(member.subscribed_topic_names)
        if member.server_assignor_name is not None:
            self.server_assignors[member.server_assignor_name] -= 1
        self.subscribed_topic_names += Counter()
        self.server_assignors += Counter()
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    owner = self.partition_owners.pop((topic_id, partition), None)
                    if owner is None or owner[0] != member.member_id:
                        raise RuntimeError(
                            f"group {self.group_id}: {topic_id}-{partition} should be owned by "
                            f"{member.member_id}, not {owner}"
                        )

    # -- subscriptions -------------------------------------------------------------------------------

    def compute_subscribed_topic_names(
        self, exclude: Set[str], new: ConsumerGroupMember | None, topics: TopicsImage
    ) -> Counter[str]:
        """Topic names subscribed by the members but those in ``exclude``, plus ``new``, with regexes
        resolved against ``topics`` (Kafka's ``computeSubscribedTopicNames``)."""
        names: Counter[str] = Counter()
        for member in self.members.values():
            if member.member_id not in exclude:
                names.update(member_topic_names(member, topics))
        if new is not None:
            names.update(member_topic_names(new, topics))
        return names

    def preferred_server_assignor(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> str | None:
        """The server assignor most members ask for (ties: the smallest name), with ``old`` replaced
        by ``new``; ``None`` when no member names one."""
        counts = Counter(self.server_assignors)
        if old is not None and old.member_id in self.members and old.server_assignor_name is not None:
            counts[old.server_assignor_name] -= 1
        if new is not None and new.server_assignor_name is not None:
            counts[new.server_assignor_name] += 1
        candidates = [(-n, name) for name, n in counts.items() if n > 0]
        return min(candidates)[1] if candidates else None

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Offsets of a topic the group subscribes to never expire and cannot be deleted."""
        return self.subscribed_topic_names[topic] > 0 or topic in self.subscription_metadata

    # -- offsets and admin (the interface ClassicGroup offers too) -----------------------------------

    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int) -> None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: epoch -1 commits are for empty groups only;
        a member commits with OffsetCommit v9+ and its current member epoch."""
        if member_epoch < 0 and not self.members:
            return
        member = self.get_or_create_member(member_id, create=False)
        if api_version < _OFFSET_COMMIT_MIN_VERSION:
            raise CoordinatorError(
                ErrorCode.UNSUPPORTED_VERSION, "consumer-protocol members must commit with OffsetCommit v9+"
            )
        if member_epoch != member.member_epoch:
            raise CoordinatorError(
                ErrorCode.STALE_MEMBER_EPOCH,
                f"member epoch {member_epoch} of {member_id} is not its current epoch {member.member_epoch}",
            )

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``: a fetch naming a member must carry its epoch."""
        if member_id is None and member_epoch < 0:
            return
        member = self.members.get(member_id or "")
        if member is None:
            raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID)
        if member_epoch != member.member_epoch:
            raise CoordinatorError(ErrorCode.STALE_MEMBER_EPOCH)

    def validate_offset_delete(self) -> None:
        """Offsets of a consumer group can be deleted whatever its state (subscribed topics excepted)."""

    def validate_delete_group(self) -> None:
        if self.members:
            raise CoordinatorError(ErrorCode.NON_EMPTY_GROUP)

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        """Offsets of topics the group no longer subscribes to expire from their commit time."""
        return lambda offset: offset.commit_timestamp_ms

    def as_listed_group(self) -> ListGroupsResponse.ListedGroup:
        return ListGroupsResponse.ListedGroup(
            group_id=self.group_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            group_state=self.state.value,
            group_type=self.group_type.value,
        )

    def describe(
        self, topics: TopicsImage, default_assignor: str
    ) -> ConsumerGroupDescribeResponse.DescribedGroup:
        return ConsumerGroupDescribeResponse.DescribedGroup(
            group_id=self.group_id,
            group_state=self.state.value,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignor_name=self.preferred_server_assignor(None, None) or default_assignor,
            members=[
                member.describe(self.target_assignment.get(member.member_id, EMPTY_ASSIGNMENT), topics)
                for member in self.members.values()
            ],
        )
