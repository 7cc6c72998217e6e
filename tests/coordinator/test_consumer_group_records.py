"""KIP-848 consumer-group records (types 3-8): golden bytes built field by field, and round trips."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator.common.records import CoordinatorRecordError
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
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


def i8(n: int) -> bytes:
    return n.to_bytes(1, "big", signed=True)


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def string(s: str) -> bytes:
    """Classic string (keys are never flexible): int16 length, then UTF-8."""
    return i16(len(s.encode())) + s.encode()


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def cstring(s: str | None) -> bytes:
    """Compact string: unsigned varint length + 1 (0 for null), then UTF-8."""
    return b"\x00" if s is None else uvarint(len(s.encode()) + 1) + s.encode()


def carray(items: list[bytes]) -> bytes:
    """Compact array: unsigned varint count + 1, then the items."""
    return uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


# -- golden bytes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "golden"),
    [
        (ConsumerGroupMetadataKey(group_id="g1"), i16(3) + string("g1")),
        (ConsumerGroupPartitionMetadataKey(group_id="g1"), i16(4) + string("g1")),
        (ConsumerGroupMemberMetadataKey(group_id="g1", member_id="m"), i16(5) + string("g1") + string("m")),
        (ConsumerGroupTargetAssignmentMetadataKey(group_id="g1"), i16(6) + string("g1")),
        (
            ConsumerGroupTargetAssignmentMemberKey(group_id="g1", member_id="m"),
            i16(7) + string("g1") + string("m"),
        ),
        (
            ConsumerGroupCurrentMemberAssignmentKey(group_id="g1", member_id="m"),
            i16(8) + string("g1") + string("m"),
        ),
    ],
)
def test_keys_golden(key: ConsumerGroupRecordKey, golden: bytes) -> None:
    assert encode_key(key) == golden
    assert decode_key(golden) == key


def test_group_metadata_value_golden() -> None:
    golden = i16(0) + i32(7) + NO_TAGS  # value version 0, epoch 7, no tagged fields
    value = ConsumerGroupMetadataValue(epoch=7)
    assert encode_value(value) == golden
    assert decode_value(ConsumerGroupMetadataKey(group_id="g"), golden) == value


def test_partition_metadata_value_golden() -> None:
    value = ConsumerGroupPartitionMetadataValue(
        topics=[
            ConsumerGroupPartitionMetadataValue.TopicMetadata(
                topic_id=TOPIC, topic_name="t", num_partitions=6
            )
        ]
    )
    golden = (
        i16(0)  # version
        + i32(0)  # epoch (Kafka leaves it 0)
        + carray([TOPIC.bytes + cstring("t") + i32(6) + carray([]) + NO_TAGS])  # one topic, no racks
        + NO_TAGS
    )
    assert encode_value(value) == golden
    assert decode_value(ConsumerGroupPartitionMetadataKey(group_id="g"), golden) == value


def test_member_metadata_value_golden() -> None:
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id="r1",
        client_id="cl",
        client_host="/1.2.3.4",
        subscribed_topic_names=["a", "b"],
        subscribed_topic_regex=None,
        rebalance_timeout_ms=30000,
        server_assignor="uniform",
    )
    golden = (
        i16(0)
        + cstring(None)  # instance id
        + cstring("r1")
        + cstring("cl")
        + cstring("/1.2.3.4")
        + carray([cstring("a"), cstring("b")])
        + cstring(None)  # regex
        + i32(30000)
        + cstring("uniform")
        + NO_TAGS
    )
    assert encode_value(value) == golden
    assert decode_value(ConsumerGroupMemberMetadataKey(group_id="g", member_id="m"), golden) == value


def test_target_assignment_values_golden() -> None:
    epoch = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=3)
    assert encode_value(epoch) == i16(0) + i32(3) + NO_TAGS
    member = ConsumerGroupTargetAssignmentMemberValue(
        topic_partitions=[
            ConsumerGroupTargetAssignmentMemberValue.TopicPartition(topic_id=TOPIC, partitions=[0, 2])
        ]
    )
    golden = i16(0) + carray([TOPIC.bytes + carray([i32(0), i32(2)]) + NO_TAGS]) + NO_TAGS
    assert encode_value(member) == golden
    assert decode_value(ConsumerGroupTargetAssignmentMemberKey(group_id="g", member_id="m"), golden) == member


def test_current_member_assignment_value_golden() -> None:
    tps = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=5,
        previous_member_epoch=4,
        state=1,  # UNREVOKED_PARTITIONS
        assigned_partitions=[tps(topic_id=TOPIC, partitions=[1])],
        partitions_pending_revocation=[tps(topic_id=TOPIC, partitions=[3])],
    )
    golden = (
        i16(0)
        + i32(5)
        + i32(4)
        + i8(1)
        + carray([TOPIC.bytes + carray([i32(1)]) + NO_TAGS])
        + carray([TOPIC.bytes + carray([i32(3)]) + NO_TAGS])
        + NO_TAGS
    )
    assert encode_value(value) == golden
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey(group_id="g", member_id="m"), golden) == value


def test_tagged_fields_of_newer_kafka_survive_a_round_trip() -> None:
    # Kafka 4.1 adds MetadataHash (tag 0, int64) to ConsumerGroupMetadataValue.
    raw = i16(0) + i32(7) + uvarint(1) + uvarint(0) + uvarint(8) + (42).to_bytes(8, "big")
    value = decode_value(ConsumerGroupMetadataKey(group_id="g"), raw)
    assert isinstance(value, ConsumerGroupMetadataValue)
    assert value.epoch == 7
    assert encode_value(value) == raw


def test_tombstones_and_bad_versions() -> None:
    key = ConsumerGroupMemberMetadataKey(group_id="g", member_id="m")
    assert decode_value(key, None) is None
    with pytest.raises(CoordinatorRecordError):
        decode_value(key, i16(1) + b"\x00")
    with pytest.raises(CoordinatorRecordError):
        decode_key(i16(5) + string("g"))  # member id missing


# -- round trips -----------------------------------------------------------------------------------

names = st.text(max_size=8)
uuids = st.uuids()
partition_lists = st.lists(st.integers(0, 2**31 - 1), max_size=5)


@given(st.sampled_from([3, 4, 6]), names)
def test_group_key_round_trip(record_type: int, group: str) -> None:
    key: ConsumerGroupRecordKey
    if record_type == 3:
        key = ConsumerGroupMetadataKey(group_id=group)
    elif record_type == 4:
        key = ConsumerGroupPartitionMetadataKey(group_id=group)
    else:
        key = ConsumerGroupTargetAssignmentMetadataKey(group_id=group)
    assert decode_key(encode_key(key)) == key


@given(st.sampled_from([5, 7, 8]), names, names)
def test_member_key_round_trip(record_type: int, group: str, member: str) -> None:
    key: ConsumerGroupRecordKey
    if record_type == 5:
        key = ConsumerGroupMemberMetadataKey(group_id=group, member_id=member)
    elif record_type == 7:
        key = ConsumerGroupTargetAssignmentMemberKey(group_id=group, member_id=member)
    else:
        key = ConsumerGroupCurrentMemberAssignmentKey(group_id=group, member_id=member)
    assert decode_key(encode_key(key)) == key


@given(
    st.builds(
        ConsumerGroupMemberMetadataValue,
        instance_id=st.none() | names,
        rack_id=st.none() | names,
        client_id=names,
        client_host=names,
        subscribed_topic_names=st.lists(names, max_size=3),
        subscribed_topic_regex=st.none() | names,
        rebalance_timeout_ms=st.integers(-1, 2**31 - 1),
        server_assignor=st.none() | names,
    )
)
def test_member_metadata_value_round_trip(value: ConsumerGroupMemberMetadataValue) -> None:
    key = ConsumerGroupMemberMetadataKey(group_id="g", member_id="m")
    assert decode_value(key, encode_value(value)) == value


@given(
    st.integers(-2, 2**31 - 1),
    st.integers(-2, 2**31 - 1),
    st.sampled_from([0, 1, 2, 127]),
    st.lists(st.tuples(uuids, partition_lists), max_size=3),
    st.lists(st.tuples(uuids, partition_lists), max_size=3),
)
def test_current_member_assignment_value_round_trip(
    epoch: int,
    previous: int,
    state: int,
    assigned: list[tuple[uuid.UUID, list[int]]],
    revoking: list[tuple[uuid.UUID, list[int]]],
) -> None:
    tps = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        assigned_partitions=[tps(topic_id=t, partitions=ps) for t, ps in assigned],
        partitions_pending_revocation=[tps(topic_id=t, partitions=ps) for t, ps in revoking],
    )
    key = ConsumerGroupCurrentMemberAssignmentKey(group_id="g", member_id="m")
    assert decode_value(key, encode_value(value)) == value
