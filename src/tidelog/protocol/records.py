"""Kafka record batches, magic v2: the one import path for everything about them.

* :mod:`~tidelog.protocol.records_header` — the 61-byte header and the broker's hot path: validate a
  batch as a whole, assign offsets, stamp the leader epoch, LogAppendTime; never decodes records.
* :mod:`~tidelog.protocol.records_codec` — records inside a batch: encode, decode, control records.
* :mod:`~tidelog.protocol.records_errors` — one error class per refusal, each with its Kafka error code.
* :mod:`~tidelog.protocol.compression` — the codecs of attributes bits 0-2.

Invariant: this module only re-exports; its ``__all__`` is the public surface.
"""

from __future__ import annotations

from tidelog.protocol.compression import Compression
from tidelog.protocol.records_codec import (
    ControlRecordType,
    Record,
    RecordLike,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    decode_records,
    encode_batch,
    encode_control_batch,
    uncompressed_batch_limit,
)
from tidelog.protocol.records_errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)
from tidelog.protocol.records_header import (
    LOG_OVERHEAD,
    MAGIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_HEADER_SIZE,
    RecordBatchHeader,
    TimestampType,
    assign_offsets,
    compute_crc,
    iter_batch_headers,
    read_batch_header,
    set_log_append_time,
    validate_batch,
    validate_batches,
)

__all__ = [
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_HEADER_SIZE",
    "Compression",
    "ControlRecordType",
    "CorruptRecordError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "Record",
    "RecordBatchHeader",
    "RecordError",
    "RecordLike",
    "RecordTooLargeError",
    "SimpleRecord",
    "TimestampType",
    "UnsupportedCompressionTypeError",
    "assign_offsets",
    "compute_crc",
    "decode_batch",
    "decode_control_record",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "iter_batch_headers",
    "read_batch_header",
    "set_log_append_time",
    "uncompressed_batch_limit",
    "validate_batch",
    "validate_batches",
]
