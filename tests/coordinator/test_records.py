"""``__consumer_offsets`` keys and values: golden bytes built field by field, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator.common.records import CoordinatorRecordError
from tidelog.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnsupportedRecordTypeError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def string(s: str | None) -> bytes:
    """Kafka's classic (non-compact) string: int16 length, -1 for null, then UTF-8."""
    return i16(-1) if s is None else i16(len(s.encode())) + s.encode()


def blob(b: bytes) -> bytes:
    """Kafka's classic bytes: int32 length, then the bytes."""
    return i32(len(b)) + b


# -- golden bytes ----------------------------------------------------------------------------------


def test_offset_commit_key_golden() -> None:
    key = OffsetCommitKey(group="g1", topic="orders", partition=7)
    golden = bytes.fromhex(
        "0001"  # record type 1: OffsetCommitKey (what Kafka writes; type 0 is read the same way)
        "0002"
        "6731"  # group: int16 length 2, "g1"
        "0006"
        "6f7264657273"  # topic: int16 length 6, "orders"
        "00000007"  # partition: int32 7
    )
    assert encode_key(key) == golden
    assert golden == i16(1) + string("g1") + string("orders") + i32(7)
    assert decode_key(golden) == key


def test_offset_commit_value_v3_golden() -> None:
    value = OffsetCommitValue(offset=100, leader_epoch=5, metadata="m", commit_timestamp=1_700_000_000_000)
    golden = bytes.fromhex(
        "0003"  # value version 3 (no explicit expire timestamp)
        "0000000000000064"  # offset: int64 100
        "00000005"  # leader_epoch: int32 5 (v3+)
        "0001"
        "6d"  # metadata: "m"
        "0000018bcfe56800"  # commit_timestamp: int64 1_700_000_000_000
    )
    assert encode_value(value) == golden
    assert decode_value(OffsetCommitKey(), golden) == value


def test_offset_commit_value_v1_golden_when_expire_timestamp_set() -> None:
    value = OffsetCommitValue(
        offset=100, metadata="", commit_timestamp=1_700_000_000_000, expire_timestamp=1_700_000_300_000
    )
    golden = bytes.fromhex(
        "0001"  # value version 1: the only version with expire_timestamp (and none with leader_epoch)
        "0000000000000064"  # offset
        "0000"  # metadata: empty string
        "0000018bcfe56800"  # commit_timestamp
        "0000018bcfe9fbe0"  # expire_timestamp: commit + 300 s
    )
    assert encode_value(value) == golden
    assert decode_value(OffsetCommitKey(), golden) == value


def test_group_metadata_key_golden() -> None:
    golden = bytes.fromhex("000200026731")  # record type 2, group "g1"
    assert encode_key(GroupMetadataKey(group="g1")) == golden
    assert decode_key(golden) == GroupMetadataKey(group="g1")


def test_group_metadata_value_v3_golden() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="c-1",
        current_state_timestamp=1_700_000_000_000,
        members=[
            GroupMetadataValue.MemberMetadata(
                member_id="c-1",
                group_instance_id=None,
                client_id="c",
                client_host="/127.0.0.1",
                rebalance_timeout=300_000,
                session_timeout=45_000,
                subscription=b"\x00\x01",
                assignment=b"\x00\x02\x03",
            ),
            GroupMetadataValue.MemberMetadata(
                member_id="s-1",
                group_instance_id="s",
                client_id="c",
                client_host="/127.0.0.2",
                rebalance_timeout=300_000,
                session_timeout=45_000,
                subscription=b"",
                assignment=b"",
            ),
        ],
    )
    golden = (
        i16(3)  # value version 3 (what Kafka 2.3+ writes)
        + string("consumer")  # protocol_type
        + i32(3)  # generation
        + string("range")  # protocol (nullable)
        + string("c-1")  # leader (nullable)
        + i64(1_700_000_000_000)  # current_state_timestamp (v2+)
        + i32(2)  # members: int32 count
        + string("c-1")  # member_id
        + string(None)  # group_instance_id (v3+, nullable): null = ff ff
        + string("c")  # client_id
        + string("/127.0.0.1")  # client_host
        + i32(300_000)  # rebalance_timeout (v1+)
        + i32(45_000)  # session_timeout
        + blob(b"\x00\x01")  # subscription
        + blob(b"\x00\x02\x03")  # assignment
        + string("s-1")
        + string("s")
        + string("c")
        + string("/127.0.0.2")
        + i32(300_000)
        + i32(45_000)
        + blob(b"")
        + blob(b"")
    )
    assert golden[:2].hex() == "0003"
    assert golden[12:14].hex() == "0000"  # generation's high bytes: fields sit where Kafka puts them
    assert encode_value(value) == golden
    assert decode_value(GroupMetadataKey(group="g"), golden) == value


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None, members=[])
    assert encode_value(value) == i16(3) + string("") + i32(0) + string(None) + string(None) + i64(-1) + i32(
        0
    )


# -- versions Kafka wrote in the past --------------------------------------------------------------


def test_legacy_offset_commit_key_type_0_reads_as_offset_commit_key() -> None:
    raw = i16(0) + string("g") + string("t") + i32(1)
    assert decode_key(raw) == OffsetCommitKey(group="g", topic="t", partition=1)


def test_offset_commit_value_v0_and_v2_have_no_epoch_nor_expiry() -> None:
    body = i64(9) + string("meta") + i64(1234)
    for version in (0, 2):
        decoded = decode_value(OffsetCommitKey(), i16(version) + body)
        assert decoded == OffsetCommitValue(offset=9, leader_epoch=-1, metadata="meta", commit_timestamp=1234)


def test_offset_commit_value_v4_is_flexible() -> None:
    value = OffsetCommitValue(offset=9, leader_epoch=2, metadata="meta", commit_timestamp=1234)
    raw = encode_value(value, 4)
    # compact string: uvarint length + 1; then the empty tagged-field section
    assert raw == i16(4) + i64(9) + i32(2) + bytes([5]) + b"meta" + i64(1234) + b"\x00"
    assert decode_value(OffsetCommitKey(), raw) == value


def test_group_metadata_value_v0_member_has_no_rebalance_timeout() -> None:
    raw = (
        i16(0)
        + string("consumer")
        + i32(1)
        + string("range")
        + string("m")
        + i32(1)
        + string("m")
        + string("client")
        + string("/h")
        + i32(10_000)  # session_timeout only: v0 has no rebalance_timeout
        + blob(b"s")
        + blob(b"a")
    )
    decoded = decode_value(GroupMetadataKey(group="g"), raw)
    assert isinstance(decoded, GroupMetadataValue)
    assert decoded.current_state_timestamp == -1
    (member,) = decoded.members
    assert (member.rebalance_timeout, member.session_timeout, member.group_instance_id) == (-1, 10_000, None)


# -- rejections ------------------------------------------------------------------------------------


def test_tombstone_value_stays_none() -> None:
    assert decode_value(GroupMetadataKey(group="g"), None) is None


@pytest.mark.parametrize("record_type", [9, 11, 12, 15])
def test_share_group_record_types_are_read(record_type: int) -> None:
    """KIP-932's record types decode since share groups are persisted (they were rejected before)."""
    key = decode_key(i16(record_type) + string("g"))
    assert (record_type, record_type) == type(key).VALID_VERSIONS
    assert key.group_id == "g"  # type: ignore[union-attr]


def test_unsupported_record_type_error_names_the_type() -> None:
    assert UnsupportedRecordTypeError(16).record_type == 16


@pytest.mark.parametrize("raw", [b"", b"\x00", i16(999) + string("g"), i16(-1), i16(1) + string("g")])
def test_malformed_keys_raise(raw: bytes) -> None:
    with pytest.raises(CoordinatorRecordError):
        decode_key(raw)


@pytest.mark.parametrize("raw", [b"\x00", i16(5) + i64(1), i16(3) + i64(1)])
def test_malformed_values_raise(raw: bytes) -> None:
    with pytest.raises(CoordinatorRecordError):
        decode_value(OffsetCommitKey(), raw)


# -- round trips -----------------------------------------------------------------------------------

names = st.text(max_size=30)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
offset_keys = st.builds(OffsetCommitKey, group=names, topic=names, partition=int32s)
members = st.builds(
    GroupMetadataValue.MemberMetadata,
    member_id=names,
    group_instance_id=st.none() | names,
    client_id=names,
    client_host=names,
    rebalance_timeout=int32s,
    session_timeout=int32s,
    subscription=st.binary(max_size=50),
    assignment=st.binary(max_size=50),
)
group_values = st.builds(
    GroupMetadataValue,
    protocol_type=names,
    generation=int32s,
    protocol=st.none() | names,
    leader=st.none() | names,
    current_state_timestamp=int64s,
    members=st.lists(members, max_size=4),
)


@given(offset_keys)
def test_offset_commit_key_round_trip(key: OffsetCommitKey) -> None:
    assert decode_key(encode_key(key)) == key


@given(names)
def test_group_metadata_key_round_trip(group: str) -> None:
    assert decode_key(encode_key(GroupMetadataKey(group=group))) == GroupMetadataKey(group=group)


@given(int64s, int32s, names, int64s, st.one_of(st.just(-1), int64s), st.sampled_from([None, 3, 4]))
def test_offset_commit_value_round_trip(
    offset: int, epoch: int, metadata: str, commit: int, expire: int, version: int | None
) -> None:
    value = OffsetCommitValue(
        offset=offset, leader_epoch=epoch, metadata=metadata, commit_timestamp=commit, expire_timestamp=expire
    )
    decoded = decode_value(OffsetCommitKey(), encode_value(value, version))
    assert isinstance(decoded, OffsetCommitValue)
    written = 1 if (version is None and expire != -1) else (version or 3)
    assert (decoded.offset, decoded.metadata, decoded.commit_timestamp) == (offset, metadata, commit)
    assert decoded.leader_epoch == (-1 if written == 1 else epoch)
    assert decoded.expire_timestamp == (expire if written == 1 else -1)


@given(group_values, st.sampled_from([3, 4]))
def test_group_metadata_value_round_trip(value: GroupMetadataValue, version: int) -> None:
    assert decode_value(GroupMetadataKey(group="g"), encode_value(value, version)) == value
