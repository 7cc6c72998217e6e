"""Typed errors for record batches: one class per way a batch can be refused.

Invariants: every class is a :class:`~tidelog.protocol.errors.KafkaProtocolError` whose class-level
``error_code`` is the Kafka error code a broker answers for that partition (the same code Kafka's
``LogValidator`` / ``DefaultRecordBatch`` would produce). Messages name the field at fault and its value.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = [
    "CorruptRecordError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "RecordError",
    "RecordTooLargeError",
    "UnsupportedCompressionTypeError",
]


class RecordError(KafkaProtocolError):
    """Base of every record-batch error; ``error_code`` says what the broker answers."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class CorruptRecordError(RecordError):
    """Bytes that are not a well-formed v2 batch: bad length, magic, CRC, or truncated/garbled records."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(RecordError):
    """A well-formed batch the broker refuses: count vs offsets, control batch from a client, bad sequence."""

    error_code = ErrorCode.INVALID_RECORD


class RecordTooLargeError(RecordError):
    """A batch larger than ``max.message.bytes``."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class UnsupportedCompressionTypeError(RecordError):
    """Compression bits (attributes 0-2) naming no codec Kafka knows."""

    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidTimestampError(RecordError):
    """A negative timestamp other than -1 (no timestamp), or max_timestamp below base_timestamp."""

    error_code = ErrorCode.INVALID_TIMESTAMP
