"""Share groups in ``__consumer_offsets``: the exact records a join, an assignment change, a leave and a delete
write, and the group a coordinator gets back by replaying them (through the shard, as a reload does)."""

from __future__ import annotations

import itertools
from uuid import UUID

from tidelog.coordinator.common._generated.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)
from tidelog.coordinator.group import GroupCoordinatorConfig, GroupCoordinatorShard
from tidelog.coordinator.group.records import decode_key, decode_value, encode_key, encode_value
from tidelog.coordinator.group.share_group_records import ShareGroupImage
from tidelog.coordinator.share.share_group import ShareGroup
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import JoinGroupRequest

T1 = UUID(int=1)
NAMES = {"t1": T1}
G = "g"


def _shard() -> GroupCoordinatorShard:
    ids = itertools.count(1)
    shard = GroupCoordinatorShard(
        0,
        GroupCoordinatorConfig(offsets_topic_num_partitions=1),
        new_uuid=lambda: UUID(int=9),
        next_handle_id=lambda: next(ids),
    )
    shard.complete_loading(0)
    return shard


def _beat(group: ShareGroup, member_id: str, epoch: int, partitions: int = 2, now_ms: int = 0) -> None:
    result = group.heartbeat(
        member_id=member_id,
        member_epoch=epoch,
        subscribed=["t1"] if epoch == 0 else None,
        rack_id=None,
        client_id="c",
        client_host="/h",
        now_ms=now_ms,
        partitions_of={"t1": partitions},
        new_member_id=lambda: "unused",
        max_size=10,
    )
    assert result.error == ErrorCode.NONE


def _write(shard: GroupCoordinatorShard, group: ShareGroup | None) -> list[tuple[object, object]]:
    """Persist ``group`` through the shard; the records appended, decoded."""
    result = shard.write_share_group(G, None if group is None else group.image(NAMES.get))
    out: list[tuple[object, object]] = []
    for record in result.records.get(0, []):
        key = decode_key(record.key)
        out.append((key, decode_value(key, record.value)))
    return out


def _reload(
    shard: GroupCoordinatorShard, written: list[list[tuple[object, object]]]
) -> GroupCoordinatorShard:
    """A fresh shard fed every record written so far (encoded again, as a load reads them)."""
    fresh = GroupCoordinatorShard(
        0, shard.state.config, new_uuid=lambda: UUID(int=9), next_handle_id=lambda: 1
    )
    for batch in written:
        for key, value in batch:
            fresh.replay(encode_key(key), None if value is None else encode_value(value))  # type: ignore[arg-type]
    fresh.complete_loading(0)
    return fresh


def _current(member: str, epoch: int, previous: int, parts: list[int]) -> tuple[object, object]:
    return (
        ShareGroupCurrentMemberAssignmentKey(group_id=G, member_id=member),
        ShareGroupCurrentMemberAssignmentValue(
            member_epoch=epoch,
            previous_member_epoch=previous,
            state=0,
            assigned_partitions=[
                ShareGroupCurrentMemberAssignmentValue.TopicPartitions(topic_id=T1, partitions=parts)
            ],
        ),
    )


def _target(member: str, parts: list[int]) -> tuple[object, object]:
    return (
        ShareGroupTargetAssignmentMemberKey(group_id=G, member_id=member),
        ShareGroupTargetAssignmentMemberValue(
            topic_partitions=[
                ShareGroupTargetAssignmentMemberValue.TopicPartition(topic_id=T1, partitions=parts)
            ]
        ),
    )


def _tombstones(member: str) -> list[tuple[object, object]]:
    return [
        (ShareGroupCurrentMemberAssignmentKey(group_id=G, member_id=member), None),
        (ShareGroupTargetAssignmentMemberKey(group_id=G, member_id=member), None),
        (ShareGroupMemberMetadataKey(group_id=G, member_id=member), None),
    ]


def test_join_assignment_change_leave_and_delete_write_kafkas_records() -> None:
    shard = _shard()
    group = ShareGroup(G)
    written = []

    _beat(group, "m1", 0)  # joins: epoch 1 (member), 2 (its subscription), 3 (the topic's partitions)
    join = _write(shard, group)
    written.append(join)
    assert join == [
        (
            ShareGroupMemberMetadataKey(group_id=G, member_id="m1"),
            ShareGroupMemberMetadataValue(
                rack_id=None, client_id="c", client_host="/h", subscribed_topic_names=["t1"]
            ),
        ),
        (ShareGroupMetadataKey(group_id=G), ShareGroupMetadataValue(epoch=3)),
        _target("m1", [0, 1]),
        (
            ShareGroupTargetAssignmentMetadataKey(group_id=G),
            ShareGroupTargetAssignmentMetadataValue(assignment_epoch=3),
        ),
        _current("m1", 3, 0, [0, 1]),
    ]
    _beat(group, "m1", 3)
    assert _write(shard, group) == []  # a heartbeat that changes nothing writes nothing

    _beat(group, "m1", 3, partitions=3)  # the topic grew: epoch 4, a third partition
    change = _write(shard, group)
    written.append(change)
    assert change == [
        (ShareGroupMetadataKey(group_id=G), ShareGroupMetadataValue(epoch=4)),
        _target("m1", [0, 1, 2]),
        (
            ShareGroupTargetAssignmentMetadataKey(group_id=G),
            ShareGroupTargetAssignmentMetadataValue(assignment_epoch=4),
        ),
        _current("m1", 4, 3, [0, 1, 2]),
    ]

    _beat(group, "m2", 0, partitions=3)  # m2 joins at epoch 6 (member, subscription); then m1 leaves: 7
    written.append(_write(shard, group))
    _beat(group, "m1", -1, partitions=3)
    leave = _write(shard, group)
    written.append(leave)
    assert leave == [
        *_tombstones("m1"),
        (ShareGroupMetadataKey(group_id=G), ShareGroupMetadataValue(epoch=7)),
        (
            ShareGroupTargetAssignmentMetadataKey(group_id=G),
            ShareGroupTargetAssignmentMetadataValue(assignment_epoch=7),
        ),
    ]

    # a reload gets the group back: epoch, members with their epochs, assignments, subscriptions
    reloaded = _reload(shard, written)
    image = reloaded.state.share_groups[G]
    assert image == shard.state.share_groups[G]
    restored = ShareGroup.restore(image, {T1: "t1"}.get, now_ms=1_000)
    assert restored.group_epoch == 7
    (m2,) = restored.members.values()
    assert (m2.member_id, m2.member_epoch, m2.previous_epoch, m2.subscribed) == ("m2", 6, 0, ("t1",))
    assert (m2.assignment, m2.client_id, m2.client_host, m2.last_heartbeat_ms) == (
        {"t1": (0, 1, 2)},
        "c",
        "/h",
        1_000,
    )
    # m2 carries on with its epoch (taking the new one, 7) and writes only its new current assignment
    _beat(restored, "m2", 6, partitions=3, now_ms=1_000)
    assert restored.group_epoch == 7
    assert _write(reloaded, restored) == [_current("m2", 7, 6, [0, 1, 2])]
    # its session runs from the reload: fenced once it has passed
    assert restored.expire(1_000 + 45_001, 45_000) == ["m2"]
    # a share group's id is not a classic group's
    joined = reloaded.join_group(
        JoinGroupRequest(group_id=G, member_id="", protocol_type="consumer", session_timeout_ms=10_000),
        5,
        client_id="c",
        client_host="/h",
        now_ms=1_000,
    )
    assert joined.response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[union-attr]

    delete = _write(shard, None)
    written.append(delete)
    assert delete == [
        *_tombstones("m2"),
        (ShareGroupTargetAssignmentMetadataKey(group_id=G), None),
        (ShareGroupStatePartitionMetadataKey(group_id=G), None),
        (ShareGroupMetadataKey(group_id=G), None),
    ]
    assert G not in shard.state.share_groups
    assert G not in _reload(shard, written).state.share_groups  # stays deleted after a reload


def test_compaction_keeps_the_latest_record_of_each_key() -> None:
    """What a compacted partition holds (the last record of each key, tombstones dropped) replays to the same
    group as the whole log."""
    shard = _shard()
    group = ShareGroup(G)
    written = []
    _beat(group, "m1", 0)
    written.append(_write(shard, group))
    _beat(group, "m2", 0)
    written.append(_write(shard, group))
    _beat(group, "m1", -1)
    written.append(_write(shard, group))
    latest: dict[object, tuple[object, object]] = {}
    for key, value in itertools.chain.from_iterable(written):
        latest.pop(repr(key), None)
        latest[repr(key)] = (key, value)
    compacted = [[(k, v) for k, v in latest.values() if v is not None]]
    assert _reload(shard, compacted).state.share_groups == _reload(shard, written).state.share_groups
    assert _reload(shard, written).state.share_groups[G] == ShareGroupImage(
        G, 6, 6, {"m2": shard.state.share_groups[G].members["m2"]}
    )
