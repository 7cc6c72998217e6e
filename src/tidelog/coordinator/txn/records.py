"""``__transaction_state`` record keys and values, byte for byte as Kafka writes them.

Every record of a ``__transaction_state`` partition is one transactional id's latest metadata:

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

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as _field
from typing import ClassVar, Final

from tidelog.coordinator.common.records import CoordinatorRecord, CoordinatorRecordError
from tidelog.coordinator.txn.state import TransactionState
from tidelog.protocol import TopicPartition, codec
from tidelog.protocol.primitives import RemoteProtocolError
from tidelog.protocol.schema import OPEN, FieldSpec, Message, Struct

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

_INT16 = struct.Struct(">h")

TRANSACTION_LOG_KEY_TYPE: Final = 0
"""The int16 that opens every ``__transaction_state`` key."""
TRANSACTION_LOG_VALUE_VERSION: Final = 0
"""The ``TransactionLogValue`` version tidelog writes: Kafka's, without ``transaction.version`` 1+."""


class TxnRecordError(CoordinatorRecordError):
    """A ``__transaction_state`` record that does not parse: the partition's log is not Kafka's format."""


@dataclass(slots=True, kw_only=True)
class TransactionLogKey(Message):
    """Key of a transactional id's metadata; the schema has only version 0."""

    NAME: ClassVar[str] = "TransactionLogKey"
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = None
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("transactional_id", "TransactionalId", "string", (0, 0)),
    )

    transactional_id: str = ""


@dataclass(slots=True, kw_only=True)
class TransactionLogValue(Message):
    """A transactional id's metadata; versions 0-1, flexible from 1."""

    NAME: ClassVar[str] = "TransactionLogValue"
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 1)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = 1

    @dataclass(slots=True, kw_only=True)
    class PartitionsSchema(Struct):
        """One topic of the transaction and its partitions."""

        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("topic", "Topic", "string", (0, OPEN)),
            FieldSpec("partition_ids", "PartitionIds", "[]int32", (0, OPEN)),
        )

        topic: str = ""
        partition_ids: list[int] = _field(default_factory=list)
        unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("producer_id", "ProducerId", "int64", (0, OPEN)),
        FieldSpec(
            "previous_producer_id", "PreviousProducerId", "int64", (1, OPEN), tag=0, tagged_versions=(1, OPEN)
        ),
        FieldSpec("next_producer_id", "NextProducerId", "int64", (1, OPEN), tag=1, tagged_versions=(1, OPEN)),
        FieldSpec("producer_epoch", "ProducerEpoch", "int16", (0, OPEN)),
        FieldSpec("transaction_timeout_ms", "TransactionTimeoutMs", "int32", (0, OPEN)),
        FieldSpec("transaction_status", "TransactionStatus", "int8", (0, OPEN)),
        FieldSpec(
            "transaction_partitions",
            "TransactionPartitions",
            "[]PartitionsSchema",
            (0, OPEN),
            nullable_versions=(0, OPEN),
        ),
        FieldSpec(
            "transaction_last_update_timestamp_ms", "TransactionLastUpdateTimestampMs", "int64", (0, OPEN)
        ),
        FieldSpec("transaction_start_timestamp_ms", "TransactionStartTimestampMs", "int64", (0, OPEN)),
        FieldSpec(
            "client_transaction_version",
            "ClientTransactionVersion",
            "int16",
            (1, OPEN),
            tag=2,
            tagged_versions=(1, OPEN),
        ),
    )

    producer_id: int = 0
    previous_producer_id: int = -1
    """v1 only: the producer id of the last committed transaction (KIP-890); -1 when unknown."""
    next_producer_id: int = -1
    """v1 only: the producer id handed out but not yet in use (KIP-890); -1 when none."""
    producer_epoch: int = 0
    transaction_timeout_ms: int = 0
    transaction_status: int = 0
    transaction_partitions: list[TransactionLogValue.PartitionsSchema] | None = None
    transaction_last_update_timestamp_ms: int = 0
    transaction_start_timestamp_ms: int = 0
    client_transaction_version: int = 0
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


# -- encoding ------------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    """Record type 0 + ``TransactionLogKey`` v0."""
    return _INT16.pack(TRANSACTION_LOG_KEY_TYPE) + codec.encode(
        TransactionLogKey(transactional_id=transactional_id), 0
    )


def encode_value(value: TransactionLogValue, version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
    """Value version + ``TransactionLogValue`` at that version."""
    if not TransactionLogValue.supports(version):
        raise ValueError(f"TransactionLogValue has no version {version}")
    return _INT16.pack(version) + codec.encode(value, version)


def txn_record(transactional_id: str, value: TransactionLogValue | None) -> CoordinatorRecord:
    """The record to append for ``transactional_id``: its metadata, or a tombstone for ``None``."""
    return CoordinatorRecord(encode_key(transactional_id), None if value is None else encode_value(value))


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


def _read_int16(buf: bytes | memoryview, what: str) -> int:
    if len(buf) < 2:
        raise TxnRecordError(f"truncated __transaction_state {what}: {len(buf)} bytes")
    return int(_INT16.unpack_from(buf, 0)[0])


def decode_key(buf: bytes | memoryview) -> str | None:
    """The transactional id of a key, or ``None`` for a record type other than 0 (skipped, as Kafka does)."""
    record_type = _read_int16(buf, "key")
    if record_type != TRANSACTION_LOG_KEY_TYPE:
        return None
    try:
        return codec.decode(TransactionLogKey, 0, memoryview(buf)[2:]).transactional_id
    except RemoteProtocolError as exc:
        raise TxnRecordError(f"malformed TransactionLogKey: {exc}") from None


def decode_value(buf: bytes | memoryview | None) -> TransactionLogValue | None:
    """Parse a value; ``None`` stays ``None`` (a tombstone)."""
    if buf is None:
        return None
    version = _read_int16(buf, "value")
    if not TransactionLogValue.supports(version):
        raise TxnRecordError(f"TransactionLogValue has no version {version}")
    try:
        value = codec.decode(TransactionLogValue, version, memoryview(buf)[2:])
    except RemoteProtocolError as exc:
        raise TxnRecordError(f"malformed TransactionLogValue v{version}: {exc}") from None
    if value.transaction_status not in TransactionState._value2member_map_:
        raise TxnRecordError(f"unknown transaction status id {value.transaction_status}")
    return value
