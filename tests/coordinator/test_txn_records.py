"""``__transaction_state`` keys and values: golden bytes built field by field, round trips, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.records import (
    TransactionLogValue,
    TxnRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partitions_of,
    partitions_schema,
    txn_record,
)
from tidelog.coordinator.txn.state import TransactionState
from tidelog.protocol import TopicPartition


def i8(n: int) -> bytes:
    return n.to_bytes(1, "big", signed=True)


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def string(s: str) -> bytes:
    """Kafka's classic string: int16 length, then UTF-8."""
    return i16(len(s.encode())) + s.encode()


def compact_string(s: str) -> bytes:
    """Kafka's compact string: unsigned varint length + 1 (all lengths here fit one byte), then UTF-8."""
    return bytes([len(s.encode()) + 1]) + s.encode()


# -- golden bytes ----------------------------------------------------------------------------------


def test_key_golden() -> None:
    golden = bytes.fromhex(
        "0000"  # record type 0: TRANSACTION_LOG (older Kafka: key version 0)
        "0008"
        "6f72646572732d31"  # transactional_id: int16 length 8, "orders-1"
    )
    assert golden == i16(0) + string("orders-1")
    assert encode_key("orders-1") == golden
    assert decode_key(golden) == "orders-1"


def test_ongoing_value_v0_golden() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        producer_epoch=3,
        transaction_timeout_ms=60_000,
        transaction_status=TransactionState.ONGOING,
        transaction_partitions=partitions_schema(
            [TopicPartition("out", 1), TopicPartition("in", 0), TopicPartition("out", 0)]
        ),
        transaction_last_update_timestamp_ms=1_700_000_000_500,
        transaction_start_timestamp_ms=1_700_000_000_000,
    )
    golden = (
        i16(0)  # value version 0
        + i64(1000)  # producer_id
        + i16(3)  # producer_epoch
        + i32(60_000)  # transaction_timeout_ms
        + i8(1)  # transaction_status: Ongoing
        + i32(2)  # transaction_partitions: 2 topics (sorted by name here)
        + string("in")
        + i32(1)
        + i32(0)  # "in": [0]
        + string("out")
        + i32(2)
        + i32(0)
        + i32(1)  # "out": [0, 1]
        + i64(1_700_000_000_500)  # transaction_last_update_timestamp_ms
        + i64(1_700_000_000_000)  # transaction_start_timestamp_ms
    )
    assert golden.hex() == (
        "0000"
        "00000000000003e8"
        "0003"
        "0000ea60"
        "01"
        "00000002"
        "0002696e"
        "0000000100000000"
        "00036f7574"
        "000000020000000000000001"
        "0000018bcfe569f4"
        "0000018bcfe56800"
    )
    assert encode_value(value) == golden
    assert decode_value(golden) == value
    assert partitions_of(value) == {
        TopicPartition("in", 0),
        TopicPartition("out", 0),
        TopicPartition("out", 1),
    }


def test_empty_value_v0_has_null_partitions() -> None:
    txn = TransactionMetadata(
        transactional_id="t",
        producer_id=7,
        producer_epoch=0,
        txn_timeout_ms=10_000,
        state=TransactionState.EMPTY,
        topic_partitions=frozenset(),
        txn_start_timestamp=-1,
        txn_last_update_timestamp=5,
    )
    golden = (
        i16(0)
        + i64(7)
        + i16(0)
        + i32(10_000)
        + i8(0)  # Empty
        + i32(-1)  # transaction_partitions: null (Kafka writes null in Empty)
        + i64(5)
        + i64(-1)  # no transaction started
    )
    assert encode_value(txn.to_log_value()) == golden
    assert TransactionMetadata.from_log_value("t", decode_value(golden) or TransactionLogValue()) == txn


def test_complete_value_v0_has_empty_not_null_partitions() -> None:
    txn = TransactionMetadata(
        transactional_id="t",
        producer_id=7,
        producer_epoch=2,
        txn_timeout_ms=10_000,
        state=TransactionState.COMPLETE_COMMIT,
        topic_partitions=frozenset(),
        txn_start_timestamp=100,
        txn_last_update_timestamp=150,
    )
    golden = i16(0) + i64(7) + i16(2) + i32(10_000) + i8(4) + i32(0) + i64(150) + i64(100)
    assert encode_value(txn.to_log_value()) == golden


def test_value_v1_golden_with_tagged_fields() -> None:
    value = TransactionLogValue(
        producer_id=1000,
        previous_producer_id=999,
        producer_epoch=0,
        transaction_timeout_ms=60_000,
        transaction_status=TransactionState.PREPARE_COMMIT,
        transaction_partitions=partitions_schema([TopicPartition("t", 2)]),
        transaction_last_update_timestamp_ms=20,
        transaction_start_timestamp_ms=10,
        client_transaction_version=2,
    )
    golden = (
        i16(1)  # value version 1 (flexible)
        + i64(1000)
        + i16(0)
        + i32(60_000)
        + i8(2)  # PrepareCommit
        + bytes([2])  # compact array: 1 topic
        + compact_string("t")
        + bytes([2])  # compact array of 1 partition
        + i32(2)
        + bytes([0])  # the struct's tagged fields: none
        + i64(20)
        + i64(10)
        + bytes([2])  # 2 tagged fields (next_producer_id is the default -1: not written)
        + bytes([0, 8])
        + i64(999)  # tag 0 previous_producer_id, 8 bytes
        + bytes([2, 2])
        + i16(2)  # tag 2 client_transaction_version, 2 bytes
    )
    assert encode_value(value, 1) == golden
    assert decode_value(golden) == value


def test_tombstone_record() -> None:
    record = txn_record("gone", None)
    assert record.key == i16(0) + string("gone")
    assert record.value is None
    assert decode_value(None) is None


# -- bad input -------------------------------------------------------------------------------------


def test_unknown_key_type_is_skipped() -> None:
    assert decode_key(i16(1) + string("x")) is None


@pytest.mark.parametrize(
    "buf",
    [b"", b"\x00", i16(0) + i16(5) + b"ab"],
    ids=["empty", "half-type", "truncated-id"],
)
def test_malformed_key(buf: bytes) -> None:
    with pytest.raises(TxnRecordError):
        decode_key(buf)


def test_unknown_value_version() -> None:
    with pytest.raises(TxnRecordError, match="no version 2"):
        decode_value(i16(2) + b"\x00" * 40)


def test_unknown_status_id() -> None:
    bad = i16(0) + i64(1) + i16(0) + i32(1) + i8(8) + i32(-1) + i64(0) + i64(-1)
    with pytest.raises(TxnRecordError, match="status id 8"):
        decode_value(bad)


def test_truncated_value() -> None:
    good = encode_value(TransactionLogValue(producer_id=1, transaction_status=0))
    with pytest.raises(TxnRecordError):
        decode_value(good[:-3])


def test_cannot_write_unknown_version() -> None:
    with pytest.raises(ValueError, match="no version 2"):
        encode_value(TransactionLogValue(), 2)


# -- round trips -----------------------------------------------------------------------------------

_topics = st.text(alphabet="abcxyz._-", min_size=1, max_size=8)
_partitions = st.frozensets(st.builds(TopicPartition, _topics, st.integers(0, 2**31 - 1)), max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 32767),
    timeout=st.integers(1, 2**31 - 1),
    state=st.sampled_from([s for s in TransactionState if s is not TransactionState.EMPTY]),
    partitions=_partitions,
    last_update=st.integers(0, 2**62),
    start=st.integers(-1, 2**62),
    version=st.sampled_from([0, 1]),
)
def test_value_round_trip(
    producer_id: int,
    producer_epoch: int,
    timeout: int,
    state: TransactionState,
    partitions: frozenset[TopicPartition],
    last_update: int,
    start: int,
    version: int,
) -> None:
    value = TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout,
        transaction_status=state,
        transaction_partitions=partitions_schema(partitions),
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
    )
    decoded = decode_value(encode_value(value, version))
    assert decoded == value
    assert partitions_of(decoded) == partitions


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_key_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == transactional_id
