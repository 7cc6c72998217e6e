"""Kafka's error codes: the numbers that travel in every response's ``error_code`` fields.

Invariants: names and numbers are exactly Apache Kafka's (``org.apache.kafka.common.protocol.Errors``);
``retriable`` matches whether Kafka's exception for the code is a ``RetriableException``.
A code this module does not know maps to ``UNKNOWN_SERVER_ERROR`` via :meth:`ErrorCode.of`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

__all__ = ["ErrorCode", "KafkaProtocolError"]


class ErrorCode(IntEnum):
    """A Kafka error code; ``.retriable`` and ``.description`` come from Kafka's ``Errors``."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127

    @property
    def retriable(self) -> bool:
        """Whether a client may retry the request that got this code."""
        return self in _RETRIABLE

    @property
    def description(self) -> str:
        """Kafka's one-line explanation of the code."""
        return _DESCRIPTIONS.get(self, "")

    @classmethod
    def name_of(cls, code: int) -> str:
        """Kafka's name for ``code`` (``NOT_COORDINATOR``), or ``error <code>`` for a number it never defined."""
        try:
            return cls(code).name
        except ValueError:
            return f"error {code}"

    @classmethod
    def of(cls, code: int) -> ErrorCode:
        """The member for ``code``, or ``UNKNOWN_SERVER_ERROR`` for a number Kafka never defined."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


_RETRIABLE: Final = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
    }
)

_DESCRIPTIONS: Final[dict[ErrorCode, str]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "An unexpected server error.",
    ErrorCode.NONE: "No error--it worked!",
    ErrorCode.OFFSET_OUT_OF_RANGE: "The requested offset is outside the range of offsets maintained by the server for the given topic/partition.",
    ErrorCode.CORRUPT_MESSAGE: "This message has failed its CRC checksum, exceeds the valid size, or is otherwise corrupt.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This request is for a topic or partition that does not exist on this broker.",
    ErrorCode.INVALID_FETCH_SIZE: "The message has a negative size.",
    ErrorCode.LEADER_NOT_AVAILABLE: "This error is thrown if we are in the middle of a leadership election and there is currently no leader for this partition and hence it is unavailable for writes.",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "This error is thrown if the client attempts to send messages to a replica that is not the leader for some partition. It indicates that the clients metadata is out of date.",
    ErrorCode.REQUEST_TIMED_OUT: "This error is thrown if the request exceeds the user-specified time limit in the request.",
    ErrorCode.BROKER_NOT_AVAILABLE: "This is not a client facing error and is used mostly by tools when a broker is not alive.",
    ErrorCode.REPLICA_NOT_AVAILABLE: "If replica is expected on a broker, but is not (this can be safely ignored).",
    ErrorCode.MESSAGE_TOO_LARGE: "The server has a configurable maximum message size to avoid unbounded memory allocation. This error is thrown if the client attempt to produce a message larger than this maximum.",
    ErrorCode.STALE_CONTROLLER_EPOCH: "Internal error code for broker-to-broker communication.",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "If you specify a string larger than configured maximum for offset metadata.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The broker returns this error code for txn or group requests, when the coordinator is loading and hence cant process requests",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The broker returns this error code for consumer and transaction requests if the offsets topic has not yet been created, or if the group/txn coordinator is not active.",
    ErrorCode.NOT_COORDINATOR: "The broker returns this error code if it is not the correct coordinator for the specified consumer or transaction group",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "For a request which attempts to access an invalid topic (e.g. one which has an illegal name), or if an attempt is made to write to an internal topic (such as the consumer offsets topic).",
    ErrorCode.RECORD_LIST_TOO_LARGE: "If a message batch in a produce request exceeds the maximum configured segment size.",
    ErrorCode.NOT_ENOUGH_REPLICAS: "Returned from a produce request when the number of in-sync replicas is lower than the configured minimum and requiredAcks is -1.",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "Returned from a produce request when the message was written to the log, but with fewer in-sync replicas than required.",
    ErrorCode.INVALID_REQUIRED_ACKS: "Returned from a produce request if the requested requiredAcks is invalid (anything other than -1, 1, or 0).",
    ErrorCode.ILLEGAL_GENERATION: "Returned from group membership requests (such as heartbeats) when the generation id provided in the request is not the current generation.",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "Returned in join group when the member provides a protocol type or set of protocols which is not compatible with the current group.",
    ErrorCode.INVALID_GROUP_ID: "Returned in join group when the groupId is empty or null.",
    ErrorCode.UNKNOWN_MEMBER_ID: "Returned from group requests (offset commits/fetches, heartbeats, etc) when the memberId is not in the current generation.",
    ErrorCode.INVALID_SESSION_TIMEOUT: "Return in join group when the requested session timeout is outside of the allowed range on the broker",
    ErrorCode.REBALANCE_IN_PROGRESS: "Returned in heartbeat requests when the coordinator has begun rebalancing the group. This indicates to the client that it should rejoin the group.",
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: "This error indicates that an offset commit was rejected because of oversize metadata.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Returned by the broker when the client is not authorized to access the requested topic.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Returned by the broker when the client is not authorized to access a particular groupId.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Returned by the broker when the client is not authorized to use an inter-broker or administrative API.",
    ErrorCode.INVALID_TIMESTAMP: "The timestamp of the message is out of acceptable range.",
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: "The broker does not support the requested SASL mechanism.",
    ErrorCode.ILLEGAL_SASL_STATE: "Request is not valid given the current SASL state.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
    ErrorCode.TOPIC_ALREADY_EXISTS: "Topic with this name already exists.",
    ErrorCode.INVALID_PARTITIONS: "Number of partitions is invalid.",
    ErrorCode.INVALID_REPLICATION_FACTOR: "Replication-factor is invalid.",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "Replication assignment is invalid.",
    ErrorCode.INVALID_CONFIG: "Configuration is invalid.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.",
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: "The message format version on the broker does not support this request.",
    ErrorCode.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "The broker received an out of order sequence number.",
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: "The broker received a duplicate sequence number.",
    ErrorCode.INVALID_PRODUCER_EPOCH: "Producer attempted to produce with an old epoch.",
    ErrorCode.INVALID_TXN_STATE: "The producer attempted a transactional operation in an invalid state.",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms).",
    ErrorCode.CONCURRENT_TRANSACTIONS: "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
    ErrorCode.SECURITY_DISABLED: "Security features are disabled.",
    ErrorCode.OPERATION_NOT_ATTEMPTED: "The broker did not attempt to execute this operation. This may happen for batched RPCs where some operations in the batch failed, causing the broker to respond without trying the rest.",
    ErrorCode.KAFKA_STORAGE_ERROR: "Disk error when trying to access log file on the disk.",
    ErrorCode.LOG_DIR_NOT_FOUND: "The user-specified log directory is not found in the broker config.",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "SASL Authentication failed.",
    ErrorCode.UNKNOWN_PRODUCER_ID: "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question. This could happen if, for instance, the producer's records were deleted because their retention time had elapsed. Once the last records of the producerId are removed, the producer's metadata is removed from the broker, and future appends by the producer will return this exception.",
    ErrorCode.REASSIGNMENT_IN_PROGRESS: "A partition reassignment is in progress.",
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: "Delegation Token feature is not enabled.",
    ErrorCode.DELEGATION_TOKEN_NOT_FOUND: "Delegation Token is not found on server.",
    ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: "Specified Principal is not valid Owner/Renewer.",
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels.",
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "Delegation Token authorization failed.",
    ErrorCode.DELEGATION_TOKEN_EXPIRED: "Delegation Token is expired.",
    ErrorCode.INVALID_PRINCIPAL_TYPE: "Supplied principalType is not supported.",
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: "The fetch session ID was not found.",
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: "The fetch session epoch is invalid.",
    ErrorCode.LISTENER_NOT_FOUND: "There is no listener on the leader broker that matches the listener on which metadata request was processed.",
    ErrorCode.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
    ErrorCode.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    ErrorCode.UNKNOWN_LEADER_EPOCH: "The leader epoch in the request is newer than the epoch on the broker.",
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: "The requesting client does not support the compression type of given partition.",
    ErrorCode.STALE_BROKER_EPOCH: "Broker epoch has changed.",
    ErrorCode.OFFSET_NOT_AVAILABLE: "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.",
    ErrorCode.MEMBER_ID_REQUIRED: "The group member needs to have a valid member id before actually entering a consumer group.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "The consumer group has reached its max size.",
    ErrorCode.FENCED_INSTANCE_ID: "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: "No partition reassignment is in progress.",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
    ErrorCode.INVALID_RECORD: "This record has failed the validation on broker and hence will be rejected.",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "There are unstable offsets that need to be cleared.",
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: "The throttling quota has been exceeded.",
    ErrorCode.PRODUCER_FENCED: "There is a newer producer with the same transactionalId which fences the current one.",
    ErrorCode.RESOURCE_NOT_FOUND: "A request illegally referred to a resource that does not exist.",
    ErrorCode.DUPLICATE_RESOURCE: "A request illegally referred to the same resource twice.",
    ErrorCode.UNACCEPTABLE_CREDENTIAL: "Requested credential would not meet criteria for acceptability.",
    ErrorCode.INCONSISTENT_VOTER_SET: "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters.",
    ErrorCode.INVALID_UPDATE_VERSION: "The given update version was invalid.",
    ErrorCode.FEATURE_UPDATE_FAILED: "Unable to update finalized features due to an unexpected server error.",
    ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE: "Request principal deserialization failed during forwarding. This indicates an internal error on the broker cluster security setup.",
    ErrorCode.SNAPSHOT_NOT_FOUND: "Requested snapshot was not found.",
    ErrorCode.POSITION_OUT_OF_RANGE: "Requested position is not greater than or equal to zero, and less than the size of the snapshot.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.DUPLICATE_BROKER_REGISTRATION: "This broker ID is already in use.",
    ErrorCode.BROKER_ID_NOT_REGISTERED: "The given broker ID was not registered.",
    ErrorCode.INCONSISTENT_TOPIC_ID: "The log's topic ID did not match the topic ID in the request.",
    ErrorCode.INCONSISTENT_CLUSTER_ID: "The clusterId in the request does not match that found on the server.",
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "The transactionalId could not be found.",
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR: "The fetch session encountered inconsistent topic ID usage.",
    ErrorCode.INELIGIBLE_REPLICA: "The new ISR contains at least one ineligible replica.",
    ErrorCode.NEW_LEADER_ELECTED: "The AlterPartition request successfully updated the partition state but the leader has changed.",
    ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE: "The requested offset is moved to tiered storage.",
    ErrorCode.FENCED_MEMBER_EPOCH: "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
    ErrorCode.UNRELEASED_INSTANCE_ID: "The instance ID is still used by another member in the consumer group. That member must leave first.",
    ErrorCode.UNSUPPORTED_ASSIGNOR: "The assignor or its version range is not supported by the consumer group.",
    ErrorCode.STALE_MEMBER_EPOCH: "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.",
    ErrorCode.MISMATCHED_ENDPOINT_TYPE: "The request was sent to an endpoint of the wrong type.",
    ErrorCode.UNSUPPORTED_ENDPOINT_TYPE: "This endpoint type is not supported yet.",
    ErrorCode.UNKNOWN_CONTROLLER_ID: "This controller ID is not known.",
    ErrorCode.UNKNOWN_SUBSCRIPTION_ID: "Client sent a push telemetry request with an invalid or outdated subscription ID.",
    ErrorCode.TELEMETRY_TOO_LARGE: "Client sent a push telemetry request larger than the maximum size the broker will accept.",
    ErrorCode.INVALID_REGISTRATION: "The controller has considered the broker registration to be invalid.",
    ErrorCode.TRANSACTION_ABORTABLE: "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID.",
    ErrorCode.INVALID_RECORD_STATE: "The record state is invalid. The acknowledgement of delivery could not be completed.",
    ErrorCode.SHARE_SESSION_NOT_FOUND: "The share session was not found.",
    ErrorCode.INVALID_SHARE_SESSION_EPOCH: "The share session epoch is invalid.",
    ErrorCode.FENCED_STATE_EPOCH: "The share coordinator rejected the request because the share-group state epoch did not match.",
    ErrorCode.INVALID_VOTER_KEY: "The voter key doesn't match the receiving replica's key.",
    ErrorCode.DUPLICATE_VOTER: "The voter is already part of the set of voters.",
    ErrorCode.VOTER_NOT_FOUND: "The voter is not part of the set of voters.",
}


class KafkaProtocolError(Exception):
    """An error that is answered on the wire with a Kafka error code.

    Raised by the pure layers (codec, record validation, storage) so the server can put
    ``error_code`` into the response for exactly the partition or request at fault.
    """

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code
