"""Share groups (KIP-932) in ``__consumer_offsets``: the records Kafka 4 writes for them, built from what
changed, and their replay.

A share group's durable part is a :class:`ShareGroupImage`: its epoch and, per member, what it declared
(rack, client, subscription), its epochs and its assigned partitions (by topic id). The share runtime
keeps the live :class:`~tidelog.coordinator.share.share_group.ShareGroup`; after each change it hands the
group coordinator's shard the group's new image, and :func:`share_group_records` turns the difference
from the shard's image into records, in Kafka's order (``GroupMetadataManager.shareGroupHeartbeat``):

- a member joining or changing what it declared: ShareGroupMemberMetadata (10), then ShareGroupMetadata
  (11, the group epoch) if the epoch rose, then ShareGroupTargetAssignmentMember (13) for each member
  whose target changed and ShareGroupTargetAssignmentMetadata (12, the assignment epoch: tidelog's
  target is computed at every epoch, so it is the group epoch), then ShareGroupCurrentMemberAssignment
  (14) for each member whose epochs or partitions changed. Share groups give every member every
  partition of its subscribed topics, so a member's target and current assignment are the same.
- a member leaving or fenced: tombstones for its current assignment (14), target assignment (13) and
  metadata (10), then the new group epoch (11, 12).
- the group deleted: each member's three tombstones, then the target assignment metadata (12), the
  ShareGroupStatePartitionMetadata (15) and the group metadata (11) tombstones.

:func:`replay_share_group_record` applies one record to the shard's images (loading, or live through the
shard's ``write``), so replaying a shard's own records into an empty shard gives back the same images.
Records 9 (ShareGroupPartitionMetadata, Kafka 4.0) and 15 (ShareGroupStatePartitionMetadata, 4.1) are
read and ignored: tidelog keeps which share-partitions have state in ``__share_group_state``.

Invariants: pure; records name topics by id (a member's image keeps the ids); an image with no members
is an Empty group, which stays until deleted (a group metadata tombstone).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeAlias
from uuid import UUID

from tidelog.coordinator.common._generated.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupPartitionMetadataKey,
    ShareGroupPartitionMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

__all__ = [
    "SHARE_GROUP_RECORD_SCHEMAS",
    "ShareGroupImage",
    "ShareGroupRecordKey",
    "ShareGroupRecordValue",
    "ShareMemberImage",
    "replay_share_group_record",
    "share_group_records",
]

ShareGroupRecordKey: TypeAlias = (
    ShareGroupPartitionMetadataKey
    | ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)
ShareGroupRecordValue: TypeAlias = (
    ShareGroupPartitionMetadataValue
    | ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)

SHARE_GROUP_RECORD_SCHEMAS: dict[int, tuple[type[ShareGroupRecordKey], type[ShareGroupRecordValue]]] = {
    9: (ShareGroupPartitionMetadataKey, ShareGroupPartitionMetadataValue),
    10: (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue),
    11: (ShareGroupMetadataKey, ShareGroupMetadataValue),
    12: (ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue),
    13: (ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue),
    14: (ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue),
    15: (ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue),
}
"""KIP-932 record type -> (key class, value class)."""

Assignment: TypeAlias = dict[UUID, tuple[int, ...]]
"""Topic id -> partitions, sorted."""

_STABLE = 0
"""``MemberState.STABLE``: share group members never wait on a revocation."""


@dataclass(slots=True)
class ShareMemberImage:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_epoch: int = 0
    assignment: Assignment = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)
    has_metadata: bool = False
    """Whether a ShareGroupMemberMetadata record (not only assignment records) was seen for it."""


@dataclass(slots=True)
class ShareGroupImage:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMemberImage] = field(default_factory=dict)


Record: TypeAlias = tuple[ShareGroupRecordKey, ShareGroupRecordValue | None]


def _topic_partitions(assignment: Assignment) -> list[tuple[UUID, list[int]]]:
    return [
        (topic_id, list(parts)) for topic_id, parts in sorted(assignment.items(), key=lambda i: str(i[0]))
    ]


def _member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [
        (ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
        (ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
        (ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None),
    ]


def share_group_records(before: ShareGroupImage | None, after: ShareGroupImage | None) -> list[Record]:
    """The records that take ``before`` (None: no such group) to ``after`` (None: the group is deleted)."""
    if after is None:
        if before is None:
            return []
        group_id = before.group_id
        deleted: list[Record] = []
        for member_id in before.members:
            deleted += _member_tombstones(group_id, member_id)
        return [
            *deleted,
            (ShareGroupTargetAssignmentMetadataKey(group_id=group_id), None),
            (ShareGroupStatePartitionMetadataKey(group_id=group_id), None),
            (ShareGroupMetadataKey(group_id=group_id), None),
        ]
    group_id = after.group_id
    old = before or ShareGroupImage(group_id, group_epoch=-1, assignment_epoch=-1)
    records: list[Record] = []
    for member_id in old.members:
        if member_id not in after.members:
            records += _member_tombstones(group_id, member_id)
    for member in after.members.values():
        was = old.members.get(member.member_id)
        declared = (member.rack_id, member.client_id, member.client_host, member.subscribed)
        if (
            was is None
            or not was.has_metadata
            or declared
            != (
                was.rack_id,
                was.client_id,
                was.client_host,
                was.subscribed,
            )
        ):
            records.append(
                (
                    ShareGroupMemberMetadataKey(group_id=group_id, member_id=member.member_id),
                    ShareGroupMemberMetadataValue(
                        rack_id=member.rack_id,
                        client_id=member.client_id,
                        client_host=member.client_host,
                        subscribed_topic_names=list(member.subscribed),
                    ),
                )
            )
    if after.group_epoch != old.group_epoch:
        records.append(
            (ShareGroupMetadataKey(group_id=group_id), ShareGroupMetadataValue(epoch=after.group_epoch))
        )
    targets = [
        m
        for m in after.members.values()
        if (was := old.members.get(m.member_id)) is None or was.target != m.target
    ]
    for member in targets:
        records.append(
            (
                ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member.member_id),
                ShareGroupTargetAssignmentMemberValue(
                    topic_partitions=[
                        ShareGroupTargetAssignmentMemberValue.TopicPartition(topic_id=t, partitions=p)
                        for t, p in _topic_partitions(member.target)
                    ]
                ),
            )
        )
    if after.assignment_epoch != old.assignment_epoch:
        records.append(
            (
                ShareGroupTargetAssignmentMetadataKey(group_id=group_id),
                ShareGroupTargetAssignmentMetadataValue(assignment_epoch=after.assignment_epoch),
            )
        )
    for member in after.members.values():
        was = old.members.get(member.member_id)
        if was is None or (was.member_epoch, was.previous_epoch, was.assignment) != (
            member.member_epoch,
            member.previous_epoch,
            member.assignment,
        ):
            records.append(
                (
                    ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id),
                    ShareGroupCurrentMemberAssignmentValue(
                        member_epoch=member.member_epoch,
                        previous_member_epoch=member.previous_epoch,
                        state=_STABLE,
                        assigned_partitions=[
                            ShareGroupCurrentMemberAssignmentValue.TopicPartitions(topic_id=t, partitions=p)
                            for t, p in _topic_partitions(member.assignment)
                        ],
                    ),
                )
            )
    return records


def _assignment(pairs: Iterable[tuple[UUID, Iterable[int]]]) -> Assignment:
    return {topic_id: tuple(sorted(parts)) for topic_id, parts in pairs}


def replay_share_group_record(
    groups: dict[str, ShareGroupImage], key: ShareGroupRecordKey, value: ShareGroupRecordValue | None
) -> None:
    """Apply one share-group record to ``groups`` (the shard's images, by group id)."""
    if isinstance(key, ShareGroupPartitionMetadataKey | ShareGroupStatePartitionMetadataKey):
        return  # which share-partitions have state: kept in __share_group_state
    group = groups.get(key.group_id)
    if group is None:
        if value is None:
            return
        group = groups[key.group_id] = ShareGroupImage(key.group_id)
    if isinstance(key, ShareGroupMetadataKey):
        if value is None:
            del groups[key.group_id]
        else:
            assert isinstance(value, ShareGroupMetadataValue)
            group.group_epoch = value.epoch
        return
    if isinstance(key, ShareGroupTargetAssignmentMetadataKey):
        if value is not None:
            assert isinstance(value, ShareGroupTargetAssignmentMetadataValue)
            group.assignment_epoch = value.assignment_epoch
        return
    member = group.members.get(key.member_id)
    if value is None:
        if member is not None and isinstance(key, ShareGroupMemberMetadataKey):
            del group.members[key.member_id]
        elif member is not None and isinstance(key, ShareGroupTargetAssignmentMemberKey):
            member.target = {}
        elif member is not None:
            member.member_epoch = member.previous_epoch = 0
            member.assignment = {}
        return
    if member is None:
        member = group.members[key.member_id] = ShareMemberImage(key.member_id)
    if isinstance(value, ShareGroupMemberMetadataValue):
        member.rack_id = value.rack_id
        member.client_id = value.client_id
        member.client_host = value.client_host
        member.subscribed = tuple(value.subscribed_topic_names)
        member.has_metadata = True
    elif isinstance(value, ShareGroupTargetAssignmentMemberValue):
        member.target = _assignment((tp.topic_id, tp.partitions) for tp in value.topic_partitions)
    else:
        assert isinstance(value, ShareGroupCurrentMemberAssignmentValue)
        member.member_epoch = value.member_epoch
        member.previous_epoch = value.previous_member_epoch
        member.assignment = _assignment((tp.topic_id, tp.partitions) for tp in value.assigned_partitions)
