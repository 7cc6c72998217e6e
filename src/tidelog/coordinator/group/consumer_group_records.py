"""``__consumer_offsets`` records of KIP-848 consumer groups (record types 3-8), as Kafka writes them.

Kafka's group coordinator persists a consumer group as six kinds of record, each a key (record type
+ schema version 0, never flexible) and a value (schema version 0, flexible), written out here as
FieldSpec tables for tidelog's codec (Kafka's group-coordinator ``common/message`` JSON):

- 3 ``ConsumerGroupMetadataKey`` (group) / ``ConsumerGroupMetadataValue``: the group epoch.
- 4 ``ConsumerGroupPartitionMetadataKey`` (group) / ``ConsumerGroupPartitionMetadataValue``: the
  subscribed topics that exist (id, name, partition count) when the group epoch was last bumped.
- 5 ``ConsumerGroupMemberMetadataKey`` (group, member) / ``ConsumerGroupMemberMetadataValue``: what
  a member declared (instance id, rack, client, subscription, rebalance timeout, server assignor).
- 6 ``ConsumerGroupTargetAssignmentMetadataKey`` (group) / ``...Value``: the target assignment epoch.
- 7 ``ConsumerGroupTargetAssignmentMemberKey`` (group, member) / ``...Value``: one member's
  partitions in the target assignment.
- 8 ``ConsumerGroupCurrentMemberAssignmentKey`` (group, member) / ``...Value``: the member's epochs,
  reconciliation state, owned partitions and partitions it still has to revoke.

A tombstone (value ``None``) deletes what its key names. Tagged fields later Kafka versions add
(``MetadataHash``, ``ClassicMemberMetadata``, per-partition ``AssignmentEpochs`` ...) are kept in
``unknown_tagged_fields`` and written back unchanged.

Invariants: keys are encoded at version 0 without tagged fields, values at version 0 with them;
:data:`CONSUMER_GROUP_RECORD_SCHEMAS` maps each record type to its key and value classes and is the
only table the generic encoder/decoder in :mod:`tidelog.coordinator.group.records` consults for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as _field
from typing import ClassVar, TypeAlias
from uuid import UUID

from tidelog.protocol.schema import OPEN, ZERO_UUID, FieldSpec, Message, Struct

__all__ = [
    "CONSUMER_GROUP_RECORD_SCHEMAS",
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
]

_V0 = (0, 0)
_ALL = (0, OPEN)


class _Key(Message):
    """A consumer-group record key: version 0 only, never flexible."""

    __slots__ = ()
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = _V0
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = None
    RECORD_TYPE: ClassVar[int] = -1


class _Value(Message):
    """A consumer-group record value: version 0, flexible."""

    __slots__ = ()
    KIND: ClassVar[str] = "data"
    VALID_VERSIONS: ClassVar[tuple[int, int]] = _V0
    FLEXIBLE_VERSIONS_FROM: ClassVar[int | None] = 0


# -- keys ----------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ConsumerGroupMetadataKey(_Key):
    NAME: ClassVar[str] = "ConsumerGroupMetadataKey"
    RECORD_TYPE: ClassVar[int] = 3
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("group_id", "GroupId", "string", _V0),)

    group_id: str = ""


@dataclass(slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataKey(_Key):
    NAME: ClassVar[str] = "ConsumerGroupPartitionMetadataKey"
    RECORD_TYPE: ClassVar[int] = 4
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("group_id", "GroupId", "string", _V0),)

    group_id: str = ""


@dataclass(slots=True, kw_only=True)
class ConsumerGroupMemberMetadataKey(_Key):
    NAME: ClassVar[str] = "ConsumerGroupMemberMetadataKey"
    RECORD_TYPE: ClassVar[int] = 5
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("group_id", "GroupId", "string", _V0),
        FieldSpec("member_id", "MemberId", "string", _V0),
    )

    group_id: str = ""
    member_id: str = ""


@dataclass(slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataKey(_Key):
    NAME: ClassVar[str] = "ConsumerGroupTargetAssignmentMetadataKey"
    RECORD_TYPE: ClassVar[int] = 6
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("group_id", "GroupId", "string", _V0),)

    group_id: str = ""


@dataclass(slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberKey(_Key):
    NAME: ClassVar[str] = "ConsumerGroupTargetAssignmentMemberKey"
    RECORD_TYPE: ClassVar[int] = 7
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("group_id", "GroupId", "string", _V0),
        FieldSpec("member_id", "MemberId", "string", _V0),
    )

    group_id: str = ""
    member_id: str = ""


@dataclass(slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentKey(_Key):
    NAME: ClassVar[str] = "ConsumerGroupCurrentMemberAssignmentKey"
    RECORD_TYPE: ClassVar[int] = 8
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("group_id", "GroupId", "string", _V0),
        FieldSpec("member_id", "MemberId", "string", _V0),
    )

    group_id: str = ""
    member_id: str = ""


# -- values --------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ConsumerGroupMetadataValue(_Value):
    """The group epoch (later Kafka versions add tagged ``MetadataHash`` and ``CreationTimeMs``)."""

    NAME: ClassVar[str] = "ConsumerGroupMetadataValue"
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("epoch", "Epoch", "int32", _ALL),)

    epoch: int = 0
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataValue(_Value):
    """The subscribed topics' metadata the target assignment was computed from."""

    NAME: ClassVar[str] = "ConsumerGroupPartitionMetadataValue"

    @dataclass(slots=True, kw_only=True)
    class PartitionMetadata(Struct):
        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("partition", "Partition", "int32", _ALL),
            FieldSpec("racks", "Racks", "[]string", _ALL),
        )

        partition: int = 0
        racks: list[str] = _field(default_factory=list)
        unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)

    @dataclass(slots=True, kw_only=True)
    class TopicMetadata(Struct):
        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("topic_id", "TopicId", "uuid", _ALL),
            FieldSpec("topic_name", "TopicName", "string", _ALL),
            FieldSpec("num_partitions", "NumPartitions", "int32", _ALL),
            FieldSpec("partition_metadata", "PartitionMetadata", "[]PartitionMetadata", _ALL),
        )

        topic_id: UUID = ZERO_UUID
        topic_name: str = ""
        num_partitions: int = 0
        partition_metadata: list[ConsumerGroupPartitionMetadataValue.PartitionMetadata] = _field(
            default_factory=list
        )
        unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("epoch", "Epoch", "int32", _ALL),
        FieldSpec("topics", "Topics", "[]TopicMetadata", _ALL),
    )

    epoch: int = 0
    """Kafka leaves it 0."""
    topics: list[ConsumerGroupPartitionMetadataValue.TopicMetadata] = _field(default_factory=list)
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue(_Value):
    """What a member declared in its heartbeats (Kafka's tagged ``ClassicMemberMetadata`` stays unknown:
    tidelog's consumer groups have no classic members)."""

    NAME: ClassVar[str] = "ConsumerGroupMemberMetadataValue"
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("instance_id", "InstanceId", "string", _ALL, nullable_versions=_ALL),
        FieldSpec("rack_id", "RackId", "string", _ALL, nullable_versions=_ALL),
        FieldSpec("client_id", "ClientId", "string", _ALL),
        FieldSpec("client_host", "ClientHost", "string", _ALL),
        FieldSpec("subscribed_topic_names", "SubscribedTopicNames", "[]string", _ALL),
        FieldSpec("subscribed_topic_regex", "SubscribedTopicRegex", "string", _ALL, nullable_versions=_ALL),
        FieldSpec("rebalance_timeout_ms", "RebalanceTimeoutMs", "int32", _ALL),
        FieldSpec("server_assignor", "ServerAssignor", "string", _ALL, nullable_versions=_ALL),
    )

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = _field(default_factory=list)
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataValue(_Value):
    NAME: ClassVar[str] = "ConsumerGroupTargetAssignmentMetadataValue"
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("assignment_epoch", "AssignmentEpoch", "int32", _ALL),
    )

    assignment_epoch: int = 0
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberValue(_Value):
    NAME: ClassVar[str] = "ConsumerGroupTargetAssignmentMemberValue"

    @dataclass(slots=True, kw_only=True)
    class TopicPartition(Struct):
        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("topic_id", "TopicId", "uuid", _ALL),
            FieldSpec("partitions", "Partitions", "[]int32", _ALL),
        )

        topic_id: UUID = ZERO_UUID
        partitions: list[int] = _field(default_factory=list)
        unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topic_partitions", "TopicPartitions", "[]TopicPartition", _ALL),
    )

    topic_partitions: list[ConsumerGroupTargetAssignmentMemberValue.TopicPartition] = _field(
        default_factory=list
    )
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentValue(_Value):
    """A member's reconciliation: ``state`` is Kafka's ``MemberState`` byte."""

    NAME: ClassVar[str] = "ConsumerGroupCurrentMemberAssignmentValue"

    @dataclass(slots=True, kw_only=True)
    class TopicPartitions(Struct):
        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("topic_id", "TopicId", "uuid", _ALL),
            FieldSpec("partitions", "Partitions", "[]int32", _ALL),
        )

        topic_id: UUID = ZERO_UUID
        partitions: list[int] = _field(default_factory=list)
        unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("member_epoch", "MemberEpoch", "int32", _ALL),
        FieldSpec("previous_member_epoch", "PreviousMemberEpoch", "int32", _ALL),
        FieldSpec("state", "State", "int8", _ALL),
        FieldSpec("assigned_partitions", "AssignedPartitions", "[]TopicPartitions", _ALL),
        FieldSpec("partitions_pending_revocation", "PartitionsPendingRevocation", "[]TopicPartitions", _ALL),
    )

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0
    assigned_partitions: list[ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions] = _field(
        default_factory=list
    )
    partitions_pending_revocation: list[ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions] = _field(
        default_factory=list
    )
    unknown_tagged_fields: dict[int, bytes] | None = _field(default=None, repr=False)


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
"""Record type -> (key class, value class)."""
