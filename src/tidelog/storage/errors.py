"""Typed errors of the storage layer, each carrying the Kafka error code a broker answers with.

Invariants: every class is a :class:`~tidelog.protocol.errors.KafkaProtocolError`; its class-level
``error_code`` is what Kafka's broker would put in the response for the partition at fault. Errors about
a record batch's bytes come from :mod:`tidelog.protocol.records` (``CorruptRecordError`` ...) and are not
redefined here.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = [
    "CheckpointError",
    "CorruptIndexError",
    "InconsistentClusterIdError",
    "InconsistentNodeIdError",
    "InvalidConfigError",
    "InvalidTopicError",
    "KafkaStorageError",
    "LogCorruptionError",
    "LogDirError",
    "OffsetOutOfRangeError",
    "RecordBatchTooLargeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
]


class StorageError(KafkaProtocolError):
    """Base of every storage error."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class KafkaStorageError(StorageError):
    """An I/O failure on a log directory (Kafka's ``KafkaStorageException``)."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogCorruptionError(KafkaStorageError):
    """Bytes in a segment that are not a batch where one must start, or a batch that fails its CRC32C where
    its records are decoded (found while reading, not recovering)."""


class CorruptIndexError(StorageError):
    """An index file failed a sanity check; the segment rebuilds it from its log (internal, rarely escapes)."""


class CheckpointError(KafkaStorageError):
    """A checkpoint file that cannot be parsed."""


class LogDirError(KafkaStorageError):
    """A log directory that cannot be used: locked by another process, or meta.properties inconsistent."""


class InconsistentClusterIdError(LogDirError):
    """meta.properties names another cluster than the one this broker belongs to."""

    error_code = ErrorCode.INCONSISTENT_CLUSTER_ID


class InconsistentNodeIdError(LogDirError):
    """meta.properties names another node id (Kafka's ``InconsistentBrokerIdException``)."""


class OffsetOutOfRangeError(StorageError):
    """A fetch, or a new log start offset, outside ``[log_start_offset, log_end_offset]`` / the high watermark."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordBatchTooLargeError(StorageError):
    """An append larger than ``segment.bytes`` (Kafka's ``RecordBatchTooLargeException``)."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class UnexpectedAppendOffsetError(StorageError):
    """An append that is not whole batches, or whose offsets (already assigned: a follower's) go backwards
    or do not start where the log ends (Kafka's ``UnexpectedAppendOffsetException``). ``first_offset`` and
    ``last_offset`` are the append's (None when it is not whole batches), ``log_end_offset`` the log's."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(
        self,
        message: str,
        error_code: ErrorCode | None = None,
        *,
        first_offset: int | None = None,
        last_offset: int | None = None,
        log_end_offset: int | None = None,
    ) -> None:
        super().__init__(message, error_code)
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_end_offset = log_end_offset


class InvalidConfigError(StorageError):
    """A topic or broker log config value that is out of range or unknown."""

    error_code = ErrorCode.INVALID_CONFIG


class InvalidTopicError(StorageError):
    """A topic name Kafka would refuse (empty, '.' or '..', too long, characters outside [a-zA-Z0-9._-])."""

    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
