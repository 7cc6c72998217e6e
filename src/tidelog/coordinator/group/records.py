"""``__consumer_offsets`` record keys and values, byte for byte as Kafka writes them.

Every record of a coordinator partition is a key and a value (``None`` for a tombstone), each opened by
an int16 (:mod:`tidelog.coordinator.common.records`): the key's is the *record type*, the value's the
value schema's *version*. The schemas are Kafka's, generated from its JSON specs
(:mod:`tidelog.coordinator.common._generated.records`); this module picks the record types tidelog
implements, the versions it writes, and frames them:

- record type 0 and 1: ``OffsetCommitKey`` (group, topic, partition); Kafka reads type 0 (written by
  very old brokers) and type 1 alike and writes 1. ``OffsetCommitValue`` versions 0-4 (4 is flexible):
  offset, leader_epoch (v3+), metadata, commit_timestamp, expire_timestamp (v1 only). Kafka writes v1
  when an explicit retention gave the commit an expire timestamp (OffsetCommit v2-v4
  ``retention_time_ms``), v3 otherwise.
- record type 2: ``GroupMetadataKey`` (group) / ``GroupMetadataValue`` versions 0-4 (4 is flexible):
  protocol_type, generation, protocol?, leader?, current_state_timestamp (v2+), members: member_id,
  group_instance_id? (v3+), client_id, client_host, rebalance_timeout (v1+), session_timeout,
  subscription, assignment. Kafka writes v3.
- record types 3-8, KIP-848 consumer groups: keys of the group (and member), values at version 0,
  flexible. A tombstone deletes what its key names.

  - 3 ``ConsumerGroupMetadataKey`` / ``ConsumerGroupMetadataValue``: the group epoch.
  - 4 ``ConsumerGroupPartitionMetadataKey`` / ``...Value``: the subscribed topics that exist (id, name,
    partition count) when the group epoch was last bumped. It keeps the leading int32 ``epoch`` of
    Kafka's first KIP-848 schema (always 0), which tidelog's data directories hold.
  - 5 ``ConsumerGroupMemberMetadataKey`` (group, member) / ``...Value``: what a member declared
    (instance id, rack, client, subscription, rebalance timeout, server assignor).
  - 6 ``ConsumerGroupTargetAssignmentMetadataKey`` / ``...Value``: the target assignment epoch.
  - 7 ``ConsumerGroupTargetAssignmentMemberKey`` (group, member) / ``...Value``: one member's
    partitions in the target assignment.
  - 8 ``ConsumerGroupCurrentMemberAssignmentKey`` (group, member) / ``...Value``: the member's epochs,
    reconciliation state, owned partitions and partitions it still has to revoke.

  Tagged fields Kafka versions newer than the specs add (``MetadataHash`` ...) are kept in
  ``unknown_tagged_fields`` and written back unchanged.
- record types 9-15, KIP-932 share groups: keys of the group (and member), values at version 0,
  flexible; which of them tidelog writes, and how it replays them, is
  :mod:`tidelog.coordinator.group.share_group_records`.

Invariants: a key is written at its highest record type and encoded at that version (a key schema's
versions are its record types); ``decode_key(encode_key(k)) == k`` and
``decode_value(k, encode_value(v, n)) == v`` for every field present in version ``n``; decoding never
accepts a record type or value version Kafka does not define; record types Kafka defines that tidelog
does not read (none today, newer ones later) raise :class:`UnsupportedRecordTypeError`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeAlias

from tidelog.coordinator.common._generated.records import (
    CONSUMER_OFFSETS_RECORDS,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from tidelog.coordinator.common.records import CoordinatorRecordError, decode_body, encode_framed, read_prefix
from tidelog.coordinator.group.share_group_records import (
    SHARE_GROUP_RECORD_SCHEMAS,
    ShareGroupRecordKey,
    ShareGroupRecordValue,
)

__all__ = [
    "CONSUMER_GROUP_RECORD_SCHEMAS",
    "GROUP_METADATA_KEY_TYPE",
    "GROUP_METADATA_VALUE_VERSION",
    "OFFSET_COMMIT_KEY_TYPE",
    "RECORD_SCHEMAS",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRecordKey",
    "ConsumerGroupRecordValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
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

_TOPIC = "__consumer_offsets"


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
    SHARE_GROUP_STATE_PARTITION_METADATA = 15


OFFSET_COMMIT_KEY_TYPE = CoordinatorRecordType.OFFSET_COMMIT
"""The key type Kafka writes for committed offsets (it reads type 0 the same way)."""
GROUP_METADATA_KEY_TYPE = CoordinatorRecordType.GROUP_METADATA
GROUP_METADATA_VALUE_VERSION = 3
"""The ``GroupMetadataValue`` version Kafka (metadata version 2.3 and later) writes."""


class UnsupportedRecordTypeError(CoordinatorRecordError):
    """A record type Kafka defines but tidelog does not implement yet (share groups ...)."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"__consumer_offsets record type {record_type} is not supported")
        self.record_type = record_type


ConsumerGroupRecordKey: TypeAlias = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerGroupRecordValue: TypeAlias = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)
RecordKey: TypeAlias = OffsetCommitKey | GroupMetadataKey | ConsumerGroupRecordKey | ShareGroupRecordKey
RecordValue: TypeAlias = (
    OffsetCommitValue | GroupMetadataValue | ConsumerGroupRecordValue | ShareGroupRecordValue
)

CONSUMER_GROUP_RECORD_SCHEMAS: dict[
    int, tuple[type[ConsumerGroupRecordKey], type[ConsumerGroupRecordValue]]
] = {
    3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
}
"""KIP-848 record type -> (key class, value class)."""
RECORD_SCHEMAS: dict[int, tuple[type[RecordKey], type[RecordValue]]] = {
    CoordinatorRecordType.LEGACY_OFFSET_COMMIT: (OffsetCommitKey, OffsetCommitValue),
    CoordinatorRecordType.OFFSET_COMMIT: (OffsetCommitKey, OffsetCommitValue),
    CoordinatorRecordType.GROUP_METADATA: (GroupMetadataKey, GroupMetadataValue),
    **CONSUMER_GROUP_RECORD_SCHEMAS,
    **SHARE_GROUP_RECORD_SCHEMAS,
}
"""Every record type tidelog reads -> (key class, value class): a subset of Kafka's
(``CONSUMER_OFFSETS_RECORDS`` of the generated module), the same classes for each."""

_VALUE_CLASS_BY_KEY_CLASS: dict[type[RecordKey], type[RecordValue]] = dict(RECORD_SCHEMAS.values())
_KNOWN_RECORD_TYPES = frozenset(CONSUMER_OFFSETS_RECORDS)


# -- encoding ------------------------------------------------------------------------------------------


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka writes: 1 when the commit carries an explicit expire timestamp, else 3."""
    return 1 if value.expire_timestamp != -1 else 3


def encode_key(key: RecordKey) -> bytes:
    """Record type + key body, as Kafka's ``CoordinatorRecordSerde`` writes it: the key schema's highest
    version is the record type written, and the body is encoded at that version."""
    record_type = type(key).VALID_VERSIONS[1]
    return encode_framed(record_type, key, record_type)


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """Value version + value body; ``version`` defaults to the one Kafka writes for this value."""
    if version is None:
        if isinstance(value, OffsetCommitValue):
            version = offset_commit_value_version(value)
        elif isinstance(value, GroupMetadataValue):
            version = GROUP_METADATA_VALUE_VERSION
        else:
            version = 0
    return encode_framed(version, value, version)


# -- decoding ------------------------------------------------------------------------------------------


def decode_key(buf: bytes | memoryview) -> RecordKey:
    """Parse a key; raises :class:`UnsupportedRecordTypeError` for types Kafka defines that tidelog
    does not read and :class:`CoordinatorRecordError` for anything else that is not a Kafka key."""
    record_type = read_prefix(buf, f"{_TOPIC} key", CoordinatorRecordError)
    schemas = RECORD_SCHEMAS.get(record_type)
    if schemas is None:
        if record_type in _KNOWN_RECORD_TYPES:
            raise UnsupportedRecordTypeError(record_type)
        raise CoordinatorRecordError(f"unknown {_TOPIC} record type {record_type}")
    cls = schemas[0]
    return decode_body(cls, record_type, buf, CoordinatorRecordError, cls.NAME)


def decode_value(key: RecordKey, buf: bytes | memoryview | None) -> RecordValue | None:
    """Parse the value that goes with ``key``; ``None`` stays ``None`` (a tombstone)."""
    if buf is None:
        return None
    version = read_prefix(buf, f"{_TOPIC} value", CoordinatorRecordError)
    cls = _VALUE_CLASS_BY_KEY_CLASS[type(key)]
    if not cls.supports(version):
        raise CoordinatorRecordError(f"{cls.NAME} has no version {version}")
    return decode_body(cls, version, buf, CoordinatorRecordError, f"{cls.NAME} v{version}")
