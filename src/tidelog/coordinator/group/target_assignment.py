"""Computing a consumer group's next target assignment (Kafka's ``TargetAssignmentBuilder``).

When the group epoch moves ahead of the target assignment epoch, the group's assignor runs over the
members (with the heartbeating member's update applied) and the subscription metadata; the result
is persisted as a delta: a ``ConsumerGroupTargetAssignmentMember`` record for each member whose
target changed, then the ``ConsumerGroupTargetAssignmentMetadata`` record with the new epoch.

Invariants: pure (the group is read, never changed); a member's target only contains partitions of
topics it subscribes to that exist in the subscription metadata; records name every member whose
target differs from the stored one (a member without a stored target always gets a record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from uuid import UUID

from tidelog.coordinator.group.assignors import MemberSubscription, PartitionAssignor
from tidelog.coordinator.group.consumer_group import ConsumerGroup, TopicMetadata, member_topic_names
from tidelog.coordinator.group.consumer_group_member import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupMember,
    assignment_to_pairs,
)
from tidelog.coordinator.group.records import (
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    RecordKey,
    RecordValue,
)
from tidelog.coordinator.group.topics_image import TopicsImage

__all__ = ["TargetAssignmentResult", "build_target_assignment", "target_assignment_member_value"]


@dataclass(slots=True)
class TargetAssignmentResult:
    records: list[tuple[RecordKey, RecordValue]] = field(default_factory=list)
    assignment: dict[str, Assignment] = field(default_factory=dict)
    """The new target of every member."""


def target_assignment_member_value(assignment: Assignment) -> ConsumerGroupTargetAssignmentMemberValue:
    tp = ConsumerGroupTargetAssignmentMemberValue.TopicPartition
    return ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=[tp(topic_id=t, partitions=ps) for t, ps in assignment_to_pairs(assignment)]
    )


def _subscription(
    member: ConsumerGroupMember,
    current: Assignment,
    metadata: Mapping[str, TopicMetadata],
    topics: TopicsImage,
) -> MemberSubscription:
    topic_ids = frozenset(
        metadata[name].topic_id for name in member_topic_names(member, topics) if name in metadata
    )
    return MemberSubscription(
        member_id=member.member_id,
        subscribed_topic_ids=topic_ids,
        current=current,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
    )


def build_target_assignment(
    group: ConsumerGroup,
    group_epoch: int,
    assignor: PartitionAssignor,
    subscription_metadata: Mapping[str, TopicMetadata],
    topics: TopicsImage,
    *,
    updated_member: ConsumerGroupMember | None = None,
    removed_member_id: str | None = None,
) -> TargetAssignmentResult:
    """Run ``assignor`` for ``group_epoch`` over the group's members, with ``updated_member`` added or
    replacing its old self and ``removed_member_id`` (a replaced static member) left out."""
    specs: dict[str, MemberSubscription] = {}
    for member_id, member in group.members.items():
        current = group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)
        specs[member_id] = _subscription(member, current, subscription_metadata, topics)
    if updated_member is not None:
        current = group.target_assignment.get(updated_member.member_id, EMPTY_ASSIGNMENT)
        previous_id = group.static_member_id(updated_member.instance_id)
        if previous_id is not None and previous_id != updated_member.member_id:
            # A static member replacing its departed predecessor inherits its target.
            current = group.target_assignment.get(previous_id, EMPTY_ASSIGNMENT)
        specs[updated_member.member_id] = _subscription(
            updated_member, current, subscription_metadata, topics
        )
    if removed_member_id is not None:
        specs.pop(removed_member_id, None)

    partitions: dict[UUID, int] = {m.topic_id: m.num_partitions for m in subscription_metadata.values()}
    computed = assignor.assign(specs, partitions)

    result = TargetAssignmentResult()
    for member_id in sorted(specs):
        new = computed.get(member_id, {})
        result.assignment[member_id] = new
        old = group.target_assignment.get(member_id)
        if old is None or dict(old) != new:
            result.records.append(
                (
                    ConsumerGroupTargetAssignmentMemberKey(group_id=group.group_id, member_id=member_id),
                    target_assignment_member_value(new),
                )
            )
    result.records.append(
        (
            ConsumerGroupTargetAssignmentMetadataKey(group_id=group.group_id),
            ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=group_epoch),
        )
    )
    return result
