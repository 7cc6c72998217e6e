"""Helpers for the storage tests: deterministic batches and reading a log back as decoded records."""

from __future__ import annotations

from pathlib import Path

from tidelog.protocol.records import (
    Compression,
    Record,
    RecordBatchHeader,
    SimpleRecord,
    decode_batch,
    encode_batch,
    iter_batch_headers,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.partition_log import PartitionLog

# Small segments and a dense index so a few kilobytes exercise rolls and index lookups.
SMALL = LogConfig(
    segment_bytes=1024, index_interval_bytes=256, segment_index_bytes=4096, file_delete_delay_ms=0
)


def batch(
    seq: int,
    *,
    records: int = 3,
    value_size: int = 20,
    timestamp: int | None = None,
    compression: Compression = Compression.NONE,
) -> bytes:
    """A batch whose content is a function of ``seq``: keys ``k<seq:06>-<i>``, values of ``value_size`` bytes
    (so batches of equal arguments have equal sizes)."""
    ts = 1_000_000 + seq if timestamp is None else timestamp
    return encode_batch(
        [
            SimpleRecord(
                key=b"k%06d-%d" % (seq, i), value=bytes([(seq + i) % 251]) * value_size, timestamp=ts + i
            )
            for i in range(records)
        ],
        compression=compression,
    )


def open_log(
    directory: Path, config: LogConfig = SMALL, *, now_ms: int = 0, clean: bool = False, **kwargs: int
) -> PartitionLog:
    return PartitionLog.open(directory, config, now_ms=now_ms, clean_shutdown=clean, **kwargs)


def headers(data: bytes) -> list[RecordBatchHeader]:
    return [header for _, header in iter_batch_headers(data)]


def decode_all(data: bytes) -> list[tuple[RecordBatchHeader, list[Record]]]:
    out = []
    for position, _ in iter_batch_headers(data):
        out.append(decode_batch(data, position))
    return out


def read_everything(log: PartitionLog, start: int | None = None) -> bytes:
    """Every batch from ``start`` (default: log start) to the log end, through read() in small steps."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        result = log.read(offset, 1000)
        data = result.read_bytes()
        hs = headers(data)
        assert hs, f"no progress at offset {offset}"
        assert result.next_offset == hs[-1].next_offset
        out += data
        offset = result.next_offset
    return bytes(out)


def record_tuples(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every record in ``data``."""
    return [(r.offset, r.timestamp, r.key, r.value) for _, records in decode_all(data) for r in records]
