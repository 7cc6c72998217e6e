"""``__transaction_state`` record keys and values, byte for byte as Kafka writes them.

Every record of a ``__transaction_state`` partition is one transactional id's latest metadata. The
schemas are Kafka's ``TransactionLogKey`` / ``TransactionLogValue``, generated from its JSON specs
(:mod:`tidelog.coordinator.common._generated.records`); this module frames them
(:mod:`tidelog.coordinator.common.records`):

- key: int16 record type 0 (``CoordinatorRecordType.TRANSACTION_LOG``; older Kafka calls the same
  int16 "key version 0"), then ``TransactionLogKey`` v0: ``transactional_id`` string.
- value: int16 value version, then ``TransactionLogValue`` at that version, or no value at all
  (a tombstone: the transactional id expired). Versions:

  - v0 (what Kafka writes before ``transaction.version`` 1, and what tidelog writes): producer_id
    int64, producer_epoch int16, transaction_timeout_ms int32, transaction_status int8 (the
    :class:`~tidelog.coordinator.txn.state.TransactionState` id), transaction_partitions
    ``[topic string, partition_ids [int32]]`` (null when the state is Empty),
    transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64 (-1 when no
    transaction has started).
  - v1 (flexible: compact strings/arrays, tagged fields): the same fields, plus tagged
    previous_producer_id (tag 0, default -1), next_producer_id (tag 1, default -1) and
    client_transaction_version (tag 2, int16, default 0), written only when not the default.

Invariants: ``decode_value(encode_value(v, n)) == v`` for every field present in version ``n``;
a key whose record type is not 0 decodes to ``None`` (Kafka skips such records when loading, "a left
over from an aborted upgrade"); a value version Kafka does not define, or a status id outside 0-7,
raises :class:`TxnRecordError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from tidelog.coordinator.common._generated.records import TransactionLogKey, TransactionLogValue
from tidelog.coordinator.common.records import (
    CoordinatorRecord,
    CoordinatorRecordError,
    decode_body,
    encode_framed,
    read_prefix,
)
from tidelog.coordinator.txn.state import TransactionState
from tidelog.protocol import TopicPartition

__all__ = [
    "TRANSACTION_LOG_KEY_TYPE",
    "TRANSACTION_LOG_VALUE_VERSION",
    "TransactionLogKey",
    "TransactionLogValue",
    "TxnRecordError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partitions_of",
    "partitions_schema",
    "txn_record",
]

TRANSACTION_LOG_KEY_TYPE: Final = 0
"""The int16 that opens every ``__transaction_state`` key (the ``TransactionLogKey`` schema's version)."""
TRANSACTION_LOG_VALUE_VERSION: Final = 0
"""The ``TransactionLogValue`` version tidelog writes: Kafka's, without ``transaction.version`` 1+."""


class TxnRecordError(CoordinatorRecordError):
    """A ``__transaction_state`` record that does not parse: the partition's log is not Kafka's format."""


# -- encoding ------------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    """Record type 0 + ``TransactionLogKey`` v0."""
    key = TransactionLogKey(transactional_id=transactional_id)
    return encode_framed(TRANSACTION_LOG_KEY_TYPE, key, TRANSACTION_LOG_KEY_TYPE)


def encode_value(value: TransactionLogValue, version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
    """Value version + ``TransactionLogValue`` at that version."""
    if not TransactionLogValue.supports(version):
        raise ValueError(f"TransactionLogValue has no version {version}")
    return encode_framed(version, value, version)


def txn_record(transactional_id: str, value: TransactionLogValue | None) -> CoordinatorRecord:
    """The record to append for ``transactional_id``: its metadata, or a tombstone for ``None``. A value
    with tagged fields (tidelog's kept-epoch tag, :mod:`~tidelog.coordinator.txn.kept_epoch`) is written at
    version 1, the first that has them; every other one at :data:`TRANSACTION_LOG_VALUE_VERSION`."""
    if value is None:
        return CoordinatorRecord(encode_key(transactional_id), None)
    version = 1 if value.unknown_tagged_fields else TRANSACTION_LOG_VALUE_VERSION
    return CoordinatorRecord(encode_key(transactional_id), encode_value(value, version))


def partitions_schema(partitions: Iterable[TopicPartition]) -> list[TransactionLogValue.PartitionsSchema]:
    """Kafka's grouping of a transaction's partitions by topic (topics and partitions sorted here, so
    the bytes are deterministic; Kafka's order is a hash set's)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [TransactionLogValue.PartitionsSchema(topic=t, partition_ids=p) for t, p in by_topic.items()]


def partitions_of(value: TransactionLogValue) -> frozenset[TopicPartition]:
    """The partitions a value lists (none when the list is null)."""
    return frozenset(
        TopicPartition(s.topic, p) for s in value.transaction_partitions or () for p in s.partition_ids
    )


# -- decoding ------------------------------------------------------------------------------------------


def decode_key(buf: bytes | memoryview) -> str | None:
    """The transactional id of a key, or ``None`` for a record type other than 0 (skipped, as Kafka does)."""
    record_type = read_prefix(buf, "__transaction_state key", TxnRecordError)
    if record_type != TRANSACTION_LOG_KEY_TYPE:
        return None
    key = decode_body(TransactionLogKey, TRANSACTION_LOG_KEY_TYPE, buf, TxnRecordError, "TransactionLogKey")
    return key.transactional_id


def decode_value(buf: bytes | memoryview | None) -> TransactionLogValue | None:
    """Parse a value; ``None`` stays ``None`` (a tombstone)."""
    if buf is None:
        return None
    version = read_prefix(buf, "__transaction_state value", TxnRecordError)
    if not TransactionLogValue.supports(version):
        raise TxnRecordError(f"TransactionLogValue has no version {version}")
    value = decode_body(TransactionLogValue, version, buf, TxnRecordError, f"TransactionLogValue v{version}")
    if value.transaction_status not in TransactionState._value2member_map_:
        raise TxnRecordError(f"unknown transaction status id {value.transaction_status}")
    return value
