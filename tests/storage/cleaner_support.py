"""Helpers for the log cleaner tests: a compacted log with a cleaner, writes recorded, reads checked."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from tidelog.protocol.records import (
    Compression,
    ControlRecordType,
    RecordBatchHeader,
    SimpleRecord,
    decode_batch,
    encode_batch,
    encode_control_batch,
    iter_batch_headers,
    validate_batch,
)
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog

# Small segments and a dense index, tombstones kept one second, any dirt worth cleaning.
COMPACT = LogConfig(
    segment_bytes=1024,
    index_interval_bytes=128,
    segment_index_bytes=4096,
    file_delete_delay_ms=0,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=1000,
)

Written = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of a record as appended."""


class CompactedLog:
    """Partition ``t-0`` of a LogManager in ``directory``, a cleaner over it, and every record written."""

    def __init__(
        self, directory: Path, config: LogConfig = COMPACT, cleaner_config: CleanerConfig | None = None
    ) -> None:
        self.directory = directory
        self.config = config
        self.manager = LogManager([directory], config, now_ms=0)
        self.log: PartitionLog = self.manager.create("t", 0)
        self.cleaner = LogCleaner(self.manager, cleaner_config)
        self.written: list[Written] = []

    @property
    def partition_dir(self) -> Path:
        return self.log.dir

    def append(
        self,
        items: list[tuple[bytes | None, bytes | None]],
        *,
        now_ms: int,
        compression: Compression = Compression.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
    ) -> int:
        """One batch of ``items`` (key, value) stamped ``now_ms``; returns its base offset."""
        data = bytearray(
            encode_batch(
                [SimpleRecord(key=k, value=v, timestamp=now_ms) for k, v in items],
                compression=compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
            )
        )
        info = self.log.append(data, leader_epoch=0, now_ms=now_ms)
        self.written.extend((info.first_offset + i, k, v) for i, (k, v) in enumerate(items))
        return info.first_offset

    def append_transactional(
        self, items: list[tuple[bytes, bytes | None]], *, producer_id: int, base_sequence: int, now_ms: int
    ) -> int:
        """A transactional batch, appended as a follower would (offsets from the log end, no checks)."""
        base = self.log.log_end_offset
        data = bytearray(
            encode_batch(
                [SimpleRecord(key=k, value=v, timestamp=now_ms) for k, v in items],
                base_offset=base,
                producer_id=producer_id,
                producer_epoch=0,
                base_sequence=base_sequence,
                is_transactional=True,
            )
        )
        self.log.append(data, leader_epoch=0, now_ms=now_ms, assign_offsets=False)
        self.written.extend((base + i, k, v) for i, (k, v) in enumerate(items))
        return base

    def append_marker(self, kind: ControlRecordType, *, producer_id: int, now_ms: int) -> int:
        base = self.log.log_end_offset
        data = bytearray(
            encode_control_batch(
                kind,
                producer_id=producer_id,
                producer_epoch=0,
                coordinator_epoch=0,
                base_offset=base,
                timestamp_ms=now_ms,
            )
        )
        self.log.append(data, leader_epoch=0, now_ms=now_ms, assign_offsets=False)
        return base

    def settle(self, now_ms: int, *, roll: bool = False) -> None:
        """Everything committed (high watermark) and fsynced (recovery point); optionally roll first."""
        if roll:
            self.log.roll(now_ms)
        self.log.update_high_watermark(self.log.log_end_offset)
        self.log.flush(now_ms)

    def clean(self, now_ms: int) -> bool:
        return self.cleaner.clean_once(now_ms)

    def close(self) -> None:
        self.manager.close()


def random_updates(
    log: CompactedLog,
    rng: random.Random,
    *,
    keys: int,
    records: int,
    now_ms: int,
    compression: Compression = Compression.NONE,
    tombstone_share: float = 0.0,
) -> None:
    """``records`` updates of ``keys`` keys in batches of 1-4; values name the key and a global sequence."""
    written = 0
    while written < records:
        size = min(rng.randint(1, 4), records - written)
        items: list[tuple[bytes | None, bytes | None]] = []
        for _ in range(size):
            key = b"key-%03d" % rng.randrange(keys)
            value = (
                None if rng.random() < tombstone_share else b"%s=%06d" % (key, len(log.written) + len(items))
            )
            items.append((key, value))
        log.append(items, now_ms=now_ms, compression=compression)
        written += size


def read_batches(
    log: PartitionLog, start: int | None = None
) -> list[tuple[RecordBatchHeader, list[Written]]]:
    """Every batch from ``start`` (log start) to the log end through ``read()``, each CRC-checked."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        result = log.read(offset, 4096)
        data = result.read_bytes()
        for position, _ in iter_batch_headers(data):
            validate_batch(data, position)
            header, records = decode_batch(data, position)
            out.append((header, [(r.offset, r.key, r.value) for r in records]))
        assert result.next_offset > offset, f"no progress at offset {offset}"
        offset = result.next_offset
    return out


def record_at(log: PartitionLog, offset: int) -> Written | None:
    """The first record at or after ``offset``, found through the log's indexes (one small read)."""
    data = log.read(offset, 1).read_bytes()
    for position, _ in iter_batch_headers(data):
        for record in decode_batch(data, position)[1]:
            if record.offset >= offset:
                return record.offset, record.key, record.value
    return None


def read_records(log: PartitionLog, start: int | None = None) -> list[Written]:
    """The data records (not transaction markers) from ``start`` on."""
    return [
        record for header, records in read_batches(log, start) if not header.is_control for record in records
    ]


def compacted(written: list[Written], boundary: int, *, drop_tombstones: bool = False) -> list[Written]:
    """What a cleaning of ``[0, boundary)`` keeps: below it, each key's last record (without tombstones if
    their horizon passed); from it on, everything."""
    last = {key: offset for offset, key, _ in written if offset < boundary}
    return [
        (offset, key, value)
        for offset, key, value in written
        if offset >= boundary or (last[key] == offset and (value is not None or not drop_tombstones))
    ]


def latest_values(records: list[Written]) -> dict[bytes | None, bytes | None]:
    return {key: value for _, key, value in records}


def with_config(config: LogConfig, **changes: object) -> LogConfig:
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
