"""``__consumer_offsets`` record keys and values, byte for byte as Kafka writes them.

Every record of a coordinator partition is a key and a value (``None`` for a tombstone). Both start
with an int16: the key's is the *record type* (Kafka's ``CoordinatorRecordType``: the schema of the
key, and which value schema goes with it), the value's is that value schema's *version*. The rest is
the schema body in Kafka's message encoding. The schemas below are Kafka's
``OffsetCommitKey``/``OffsetCommitValue`` and ``GroupMetadataKey``/``GroupMetadataValue``
(group-coordinator ``common/message``), written out here so tidelog needs no JSON at run time:

- record type 0 and 1: ``OffsetCommitKey`` (group string, topic string, partition int32); Kafka reads
  type 0 (written by very old brokers) and type 1 alike and writes 1.
- record type 2: ``GroupMetadataKey`` (group string).
- ``OffsetCommitValue`` versions 0-4 (4 is flexible): offset int64, leader_epoch int32 (v3+),
  metadata string, commit_timestamp int64, expire_timestamp int64 (v1 only). Kafka writes v1 when an
  explicit retention gave the commit an expire timestamp (OffsetCommit v2-v4 ``retention_time_ms``),
  v3 otherwise.
- ``GroupMetadataValue`` versions 0-4 (4 is flexible): protocol_type string, generation int32,
  protocol string?, leader string?, current_state_timestamp int64 (v2+), members: member_id,
  group_instance_id string? (v3+), client_id, client_host, rebalance_timeout int32 (v1+),
  session_timeout int32, subscription bytes, assignment bytes. Kafka writes v3.

- record types 3-8: KIP-848 consumer groups, schemas in
  :mod:`tidelog.coordinator.group.consumer_group_records` (keys and values at version 0).

Invariants: ``decode_key(encode_key(k)) == k`` and ``decode_value(k, encode_value(v, n)) == v`` for
every field present in version ``n``; decoding never accepts a record type or value version Kafka
does not define; record types Kafka defines beyond 8 (share and streams groups ...) raise
:class:`UnsupportedRecordTypeError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from dataclasses import field as _field
from enum import IntEnum
from typing import ClassVar, TypeAlias

from tidelog.coordinator.common.records import CoordinatorRecordError
from tidelog.coordinator.group.consumer_group_records import (
    CONSUMER_GROUP_RECORD_SCHEMAS,
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
)
from tidelog.protocol import codec
from tidelog.protocol.primitives import RemoteProtocolError
from tidelog.protocol.schema import OPEN, FieldSpec, Message, Struct

__all__ = [
    "GROUP_METADATA_KEY_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_TYPE",
    "CoordinatorRecordType",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordKey",
    "RecordValue",
    "UnsupportedRecordTypeError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "offset_commit_value_version",
]

_INT16 = struct.Struct(">h")


class CoordinatorRecordType(IntEnum):
    """The int16 that opens every ``__consumer_offsets`` key (Kafka's ``CoordinatorRecordType``)."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_PARTITION_METADATA = 9
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14


OFFSET_COMMIT_KEY_TYPE = CoordinatorRecordType.OFFSET_COMMIT
"""The key type Kafka writes for committed offsets (it reads type 0 the same way)."""
GROUP_METADATA_KEY_TYPE = CoordinatorRecordType.GROUP_METADATA
_KNOWN_RECORD_TYPES = frozenset(int(t) for t in CoordinatorRecordType)
GROUP_METADATA_VALUE_VERSION = 3
"""The ``GroupMetadataValue`` version Kafka (metadata version 2.3 and later) writes."""


class UnsupportedRecordTypeError(CoordinatorRecordError):
    """A record type Kafka defines but tidelog does not implement yet (KIP-848, share groups ...)."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"__consumer_offsets record type {record_type} is not supported")
        self.record_type = record_type


# -- schemas (Kafka's group-coordinator message JSON, as FieldSpec tables for tidelog's codec) ----------


@dataclass(slots=True, kw_only=True)
class OffsetCommitKey(Message):
    """Key of a committed offset (record types 0 and 1); the schema has only version 0."""

    NAME: ClassVar[str] = "OffsetCommitKey"
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = None
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("group", "group", "string", (0, 0)),
        FieldSpec("topic", "topic", "string", (0, 0)),
        FieldSpec("partition", "partition", "int32", (0, 0)),
    )

    group: str = ""
    topic: str = ""
    partition: int = 0


@dataclass(slots=True, kw_only=True)
class OffsetCommitValue(Message):
    """Value of a committed offset; versions 0-4, flexible from 4."""

    NAME: ClassVar[str] = "OffsetCommitValue"
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = 4
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("offset", "offset", "int64", (0, OPEN)),
        FieldSpec("leader_epoch", "leaderEpoch", "int32", (3, OPEN), ignorable=True),
        FieldSpec("metadata", "metadata", "string", (0, OPEN)),
        FieldSpec("commit_timestamp", "commitTimestamp", "int64", (0, OPEN)),
        FieldSpec("expire_timestamp", "expireTimestamp", "int64", (1, 1), ignorable=True),
    )

    offset: int = 0
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class GroupMetadataKey(Message):
    """Key of a group's metadata (record type 2); the schema has only version 0."""

    NAME: ClassVar[str] = "GroupMetadataKey"
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = None
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("group", "group", "string", (0, 0)),)

    group: str = ""


@dataclass(slots=True, kw_only=True)
class GroupMetadataValue(Message):
    """Value of a classic group's metadata: its generation and members; versions 0-4, flexible from 4."""

    NAME: ClassVar[str] = "GroupMetadataValue"
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = 4

    @dataclass(slots=True, kw_only=True)
    class MemberMetadata(Struct):
        """One member: ``subscription`` is its metadata for the group's protocol."""

        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("member_id", "memberId", "string", (0, OPEN)),
            FieldSpec(
                "group_instance_id",
                "groupInstanceId",
                "string",
                (3, OPEN),
                nullable_versions=(3, OPEN),
                ignorable=True,
            ),
            FieldSpec("client_id", "clientId", "string", (0, OPEN)),
            FieldSpec("client_host", "clientHost", "string", (0, OPEN)),
            FieldSpec("rebalance_timeout", "rebalanceTimeout", "int32", (1, OPEN), ignorable=True),
            FieldSpec("session_timeout", "sessionTimeout", "int32", (0, OPEN)),
            FieldSpec("subscription", "subscription", "bytes", (0, OPEN)),
            FieldSpec("assignment", "assignment", "bytes", (0, OPEN)),
        )

        member_id: str = ""
        group_instance_id: str | None = None
        client_id: str = ""
        client_host: str = ""
        rebalance_timeout: int = -1
        """-1 when absent (version 0): the reader then uses ``session_timeout``, as Kafka does."""
        session_timeout: int = 0
        subscription: bytes = b""
        assignment: bytes = b""
        unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("protocol_type", "protocolType", "string", (0, OPEN)),
        FieldSpec("generation", "generation", "int32", (0, OPEN)),
        FieldSpec("protocol", "protocol", "string", (0, OPEN), nullable_versions=(0, OPEN)),
        FieldSpec("leader", "leader", "string", (0, OPEN), nullable_versions=(0, OPEN)),
        FieldSpec("current_state_timestamp", "currentStateTimestamp", "int64", (2, OPEN), ignorable=True),
        FieldSpec("members", "members", "[]MemberMetadata", (0, OPEN)),
    )

    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: list[GroupMetadataValue.MemberMetadata] = _field(default_factory=list)
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


RecordKey: TypeAlias = OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey
RecordValue: TypeAlias = OffsetCommitValue | GroupMetadataValue | ConsumerGroupRecordValue

_VALUE_CLASS_BY_KEY_CLASS: dict[type[RecordKey], type[RecordValue]] = {
    OffsetCommitKey: OffsetCommitValue,
    GroupMetadataKey: GroupMetadataValue,
    **dict(CONSUMER_GROUP_RECORD_SCHEMAS.values()),
}


# -- encoding ------------------------------------------------------------------------------------------


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka writes: 1 when the commit carries an explicit expire timestamp, else 3."""
    return 1 if value.expire_timestamp != -1 else 3


def encode_key(key: RecordKey) -> bytes:
    """Record type + key body (schema version 0), as Kafka's ``CoordinatorRecordSerde`` writes it."""
    record_type: int
    if isinstance(key, OffsetCommitKey):
        record_type = OFFSET_COMMIT_KEY_TYPE
    elif isinstance(key, GroupMetadataKey):
        record_type = GROUP_METADATA_KEY_TYPE
    else:
        record_type = key.RECORD_TYPE
    return _INT16.pack(record_type) + codec.encode(key, 0)


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """Value version + value body; ``version`` defaults to the one Kafka writes for this value."""
    if version is None:
        if isinstance(value, OffsetCommitValue):
            version = offset_commit_value_version(value)
        elif isinstance(value, GroupMetadataValue):
            version = GROUP_METADATA_VALUE_VERSION
        else:
            version = 0
    return _INT16.pack(version) + codec.encode(value, version)


# -- decoding ------------------------------------------------------------------------------------------


def _read_int16(buf: bytes | memoryview, what: str) -> int:
    if len(buf) < 2:
        raise CoordinatorRecordError(f"truncated __consumer_offsets {what}: {len(buf)} bytes")
    return int(_INT16.unpack_from(buf, 0)[0])


def decode_key(buf: bytes | memoryview) -> RecordKey:
    """Parse a key; raises :class:`UnsupportedRecordTypeError` for types Kafka defines that tidelog
    does not read and :class:`CoordinatorRecordError` for anything else that is not a Kafka key."""
    record_type = _read_int16(buf, "key")
    body = memoryview(buf)[2:]
    cls: type[RecordKey]
    if record_type in (CoordinatorRecordType.LEGACY_OFFSET_COMMIT, CoordinatorRecordType.OFFSET_COMMIT):
        cls = OffsetCommitKey
    elif record_type == CoordinatorRecordType.GROUP_METADATA:
        cls = GroupMetadataKey
    elif record_type in CONSUMER_GROUP_RECORD_SCHEMAS:
        cls = CONSUMER_GROUP_RECORD_SCHEMAS[record_type][0]
    elif record_type in _KNOWN_RECORD_TYPES:
        raise UnsupportedRecordTypeError(record_type)
    else:
        raise CoordinatorRecordError(f"unknown __consumer_offsets record type {record_type}")
    try:
        return codec.decode(cls, 0, body)
    except RemoteProtocolError as exc:
        raise CoordinatorRecordError(f"malformed {cls.NAME}: {exc}") from None


def decode_value(key: RecordKey, buf: bytes | memoryview | None) -> RecordValue | None:
    """Parse the value that goes with ``key``; ``None`` stays ``None`` (a tombstone)."""
    if buf is None:
        return None
    version = _read_int16(buf, "value")
    cls = _VALUE_CLASS_BY_KEY_CLASS[type(key)]
    if not cls.supports(version):
        raise CoordinatorRecordError(f"{cls.NAME} has no version {version}")
    try:
        return codec.decode(cls, version, memoryview(buf)[2:])
    except RemoteProtocolError as exc:
        raise CoordinatorRecordError(f"malformed {cls.NAME} v{version}: {exc}") from None
