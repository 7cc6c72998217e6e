"""Applying consumer-group records (types 3-8) to a shard's groups: the only way they change.

Kafka's ``GroupMetadataManager.replay`` overloads for consumer groups, as one function. It runs for
records the shard emits (live, right after the handler that emitted them) and for every record of
the partition while it loads, so the two paths cannot drift apart.

Invariants:

- A value creates what it describes when missing (a compacted log may lose the group's own record
  before its members' records); a tombstone for something missing is ignored (compaction keeps
  tombstones after the values they shadowed are gone).
- A consumer group replaces a "simple" classic group of the same id (one that only holds committed
  offsets, created by replaying them); any other classic group of that id means the log is not one
  Kafka (or tidelog) writes, and is refused with :class:`CoordinatorRecordError`.
- A group's own tombstone (type 3) only comes after all its members are gone.
"""

from __future__ import annotations

import dataclasses

from tidelog.coordinator.common.records import CoordinatorRecordError
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.consumer_group import ConsumerGroup, TopicMetadata
from tidelog.coordinator.group.consumer_group_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupMember,
    assignment_from_pairs,
)
from tidelog.coordinator.group.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

__all__ = ["is_simple_classic_group", "replay_consumer_group_record"]


def is_simple_classic_group(group: ClassicGroup) -> bool:
    """A classic group that only holds offsets: no protocol type, no members, nobody joining."""
    return (
        group.protocol_type is None
        and not group.members
        and not group.pending_join_members
        and group.is_in_state(ClassicGroupState.EMPTY)
    )


def _group(
    classic_groups: dict[str, ClassicGroup],
    consumer_groups: dict[str, ConsumerGroup],
    group_id: str,
) -> ConsumerGroup:
    group = consumer_groups.get(group_id)
    if group is not None:
        return group
    classic = classic_groups.get(group_id)
    if classic is not None:
        if not is_simple_classic_group(classic):
            raise CoordinatorRecordError(f"consumer group record for {group_id}, which is a classic group")
        del classic_groups[group_id]
    group = consumer_groups[group_id] = ConsumerGroup(group_id)
    return group


def replay_consumer_group_record(
    classic_groups: dict[str, ClassicGroup],
    consumer_groups: dict[str, ConsumerGroup],
    key: ConsumerGroupRecordKey,
    value: ConsumerGroupRecordValue | None,
) -> None:
    existing = consumer_groups.get(key.group_id)
    if value is None and existing is None:
        return
    group = existing if value is None else _group(classic_groups, consumer_groups, key.group_id)
    assert group is not None

    if isinstance(key, ConsumerGroupMetadataKey):
        if value is None:
            if group.members:
                raise CoordinatorRecordError(
                    f"tombstone for consumer group {key.group_id}, which still has members {list(group.members)}"
                )
            del consumer_groups[key.group_id]
            group.dead = True
        else:
            assert isinstance(value, ConsumerGroupMetadataValue)
            group.group_epoch = value.epoch

    elif isinstance(key, ConsumerGroupPartitionMetadataKey):
        if value is None:
            group.subscription_metadata = {}
        else:
            assert isinstance(value, ConsumerGroupPartitionMetadataValue)
            group.subscription_metadata = {
                t.topic_name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions) for t in value.topics
            }

    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        if value is None:
            group.remove_member(key.member_id)
        else:
            assert isinstance(value, ConsumerGroupMemberMetadataValue)
            member = group.members.get(key.member_id) or ConsumerGroupMember(member_id=key.member_id)
            group.update_member(member.with_metadata(value))

    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        if value is None:
            group.assignment_epoch = -1
        else:
            assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
            group.assignment_epoch = value.assignment_epoch

    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        if value is None:
            group.target_assignment.pop(key.member_id, None)
        else:
            assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
            group.target_assignment[key.member_id] = assignment_from_pairs(
                (tp.topic_id, tp.partitions) for tp in value.topic_partitions
            )

    else:
        assert isinstance(key, ConsumerGroupCurrentMemberAssignmentKey)
        current = group.members.get(key.member_id)
        if value is None:
            if current is not None:
                group.update_member(
                    dataclasses.replace(
                        current,
                        member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned_partitions={},
                        partitions_pending_revocation={},
                    )
                )
        else:
            assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
            base = current or ConsumerGroupMember(member_id=key.member_id)
            group.update_member(base.with_current_assignment(value))
