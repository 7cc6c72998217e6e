"""One cleaning of one compacted log: inputs snapshotted by the log's owner, the work done on any thread.

Kafka's ``Cleaner.doClean``. A :class:`CleaningJob` is built by :mod:`.cleaner` on the thread that owns
the log (the broker's event loop): it holds plain values and descriptors of the segment files opened
then, never the log or its segments. :meth:`CleaningJob.run` may then run on another thread while the log
keeps serving appends and reads; it only reads through its own descriptors and only writes ``.cleaned``
files. Swapping the result in is the owner's job again (:meth:`PartitionLog.replace_segments`).

What :meth:`CleaningJob.run` does, in order (Kafka's algorithm):

1. Scans the batch headers of every segment in the plan for transactions
   (:mod:`.cleaner_transactions`): aborted ones, and the first still open, below which the cleaning stops.
   A transaction whose marker lies past the plan began below the first uncleanable offset (at most the last
   stable offset) and is decided: aborted if the planner's ``.txnindex`` entries of the later segments say
   so, else committed.
2. Builds the key -> last offset map of the dirty section ``[first_dirty_offset, upper)`` (Kafka's
   ``buildOffsetMap``; aborted batches are not mapped). If the map fills up, the cleaning ends after the
   last batch that fitted: ``end_offset``, the next first dirty offset.
3. Groups the segments below ``end_offset`` so that each group's sizes fit one segment (Kafka's
   ``groupSegmentsBySize``) and rewrites each group into one ``<base>.log.cleaned`` segment, keeping a
   record only if no later record of its key is in the map, dropping tombstones (null value) once their
   batch's delete horizon has passed and setting the horizon (now + ``delete.retention.ms``) on batches that
   keep a tombstone or a removable marker, dropping aborted batches and the markers Kafka's rules allow
   (see :mod:`.cleaner_transactions`), and keeping as an empty batch the last batch of every active producer
   (its sequence and epoch) and the last batch of the cleaned range.
4. Each cleaned batch keeps its base offset, last offset, sequence, producer, epoch, partition leader
   epoch, timestamp type and compression; a batch that loses no record and needs no horizon is copied
   byte for byte. Indexes are built for the cleaned segment (its ``.txnindex`` holds the aborted
   transactions whose ABORT marker it keeps with some of their batches, as Kafka's), then the log and
   indexes are fsynced and the log file gets the replaced segments' modification time.

I/O accounting (for ``log.cleaner.io.max.bytes.per.second``, Kafka's ``Throttler``): right after every
read from a source segment and every write to a ``.cleaned`` log file, :meth:`CleaningJob.run` reports its
byte count to the caller's ``throttle`` (each ``pread`` and each ``write``; index files are not counted, as
in Kafka), then polls ``should_abort``. The throttle may block the calling thread; the job itself never
reads a clock or sleeps.

Invariants: offsets never change; for every key the record with the largest offset in the cleaned range
survives unless it is a tombstone past its horizon; nothing at or above ``upper`` is read as dirty.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import (
    RECORD_BATCH_HEADER_SIZE,
    Compression,
    Record,
    RecordBatchHeader,
    RecordError,
    TimestampType,
    decode_batch,
    encode_batch,
    validate_batch,
)
from tidelog.storage import layout
from tidelog.storage.batch_reader import BatchScan
from tidelog.storage.cleaner_transactions import (
    AbortedRange,
    CleanedTransactionMetadata,
    TransactionScanner,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import LogCorruptionError, StorageError
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.offset_map import OffsetMap
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_index import AbortedTxn

__all__ = [
    "CleanedGroup",
    "CleanerStats",
    "CleaningJob",
    "CleaningResult",
    "LastRecord",
    "LogCleaningAbortedError",
    "SourceSegment",
    "Throttle",
    "group_segments_by_size",
]

logger = logging.getLogger(__name__)

_INT32_MAX: Final = 2**31 - 1

Throttle = Callable[[int], None]
"""Told the byte count of each read and write the job just did; may block (the caller's rate limit)."""

_CLEANED_SUFFIXES: Final = (
    layout.LOG_FILE_SUFFIX,
    layout.INDEX_FILE_SUFFIX,
    layout.TIME_INDEX_FILE_SUFFIX,
    layout.TXN_INDEX_FILE_SUFFIX,
)


class LogCleaningAbortedError(StorageError):
    """The cleaning was asked to stop (shutdown, log deleted); its ``.cleaned`` files are gone."""


@dataclass(frozen=True, slots=True)
class LastRecord:
    """What the cleaner must keep of an active producer (Kafka's ``LastRecord``): the batch ending at its
    last data offset, or (none known) its last marker of ``producer_epoch``."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """An inactive segment as of the plan: its offsets, sizes, and a descriptor of its ``.log`` opened then
    (valid even if the log renames or deletes the file meanwhile)."""

    base_offset: int
    next_segment_base: int
    """Where the segment's offsets end: the next segment's base offset."""
    size: int
    offset_index_bytes: int
    time_index_bytes: int
    mtime_ns: int
    name: str
    fd: int


@dataclass(slots=True)
class CleanerStats:
    """Figures of one cleaning (Kafka's ``CleanerStats``)."""

    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    messages_read: int = 0
    bytes_written: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    """Records without a key, dropped (a compacted topic cannot hold them)."""
    buffer_utilization: float = 0.0
    segments_read: int = 0
    segments_written: int = 0
    elapsed_ms: int = 0


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One ``.cleaned`` segment: it replaces ``sources[first_source : first_source + source_count]``."""

    base_offset: int
    first_source: int
    source_count: int
    size: int


@dataclass(frozen=True, slots=True)
class CleaningResult:
    first_dirty_offset: int
    end_offset: int
    """The new first dirty offset (cleaner checkpoint) once every group is swapped in."""
    groups: tuple[CleanedGroup, ...]
    stats: CleanerStats
    earliest_delete_horizon_ms: int | None
    """Smallest delete horizon among the batches written (when a later cleaning can drop something)."""


def cleaned_file(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / layout.file_name(base_offset, suffix + layout.CLEANED_FILE_SUFFIX)


def remove_cleaned_files(directory: Path, base_offset: int) -> None:
    for suffix in _CLEANED_SUFFIXES:
        cleaned_file(directory, base_offset, suffix).unlink(missing_ok=True)


def group_segments_by_size(
    sources: Sequence[SourceSegment], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[int]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose log sizes, offset index sizes and time
    index sizes each sum to at most ``max_size`` / ``max_index_size`` and whose offsets fit one segment's
    int32 relative offsets; returns lists of indexes into ``sources``."""
    groups: list[list[int]] = []
    i = 0
    while i < len(sources):
        group = [i]
        log_size = sources[i].size
        index_size = sources[i].offset_index_bytes
        time_index_size = sources[i].time_index_bytes
        i += 1
        while i < len(sources):
            candidate = sources[i]
            last_offset = (
                sources[i + 1].base_offset - 1 if i + 1 < len(sources) else first_uncleanable_offset - 1
            )
            if (
                log_size + candidate.size > max_size
                or index_size + candidate.offset_index_bytes > max_index_size
                or time_index_size + candidate.time_index_bytes > max_index_size
                or (candidate.size > 0 and last_offset - sources[group[0]].base_offset > _INT32_MAX)
            ):
                break
            group.append(i)
            log_size += candidate.size
            index_size += candidate.offset_index_bytes
            time_index_size += candidate.time_index_bytes
            i += 1
        groups.append(group)
    return groups


# ---- reading source segments ----------------------------------------------------------------------


def _scan(
    source: SourceSegment,
    buffer_size: int,
    on_read: Throttle,
    with_data: bool | Callable[[RecordBatchHeader], bool],
) -> BatchScan:
    """The whole batches of a source segment, each read reported to ``on_read``; bytes that are no
    batch, or a segment ending inside one, are :class:`LogCorruptionError` (the sources are whole)."""

    def read(nbytes: int, position: int) -> bytes:
        data = os.pread(source.fd, nbytes, position)
        on_read(len(data))
        return data

    return BatchScan(
        read,
        name=source.name,
        start=0,
        end=source.size,
        window_bytes=buffer_size,
        with_data=with_data,
        raise_on_torn_tail=True,
    )


def _is_transaction_marker(header: RecordBatchHeader) -> bool:
    return header.is_control and header.is_transactional


def _control_type(records: Sequence[Record]) -> int | None:
    """The record type in a control batch's first record key (None: the batch has no record left)."""
    if not records:
        return None
    key = records[0].key
    if key is None or len(key) < 4:
        return -1
    return int.from_bytes(key[2:4], "big", signed=True)


def _decode(header: RecordBatchHeader, data: memoryview, name: str) -> list[Record]:
    """The records of a batch whose CRC and structure check out (a damaged batch is never rewritten with a
    fresh CRC, nor lets a damaged key or offset into the map)."""
    try:
        validate_batch(data)
        return decode_batch(data)[1]
    except RecordError as exc:
        raise LogCorruptionError(f"{name}: batch at offset {header.base_offset}: {exc}") from exc


# ---- the job --------------------------------------------------------------------------------------


class CleaningJob:
    """A cleaning of one log, planned by its owner; :meth:`run` does the work (on any one thread)."""

    def __init__(
        self,
        *,
        topic_partition: TopicPartition,
        directory: Path,
        config: LogConfig,
        sources: Sequence[SourceSegment],
        first_dirty_offset: int,
        first_uncleanable_offset: int,
        active_producers: Mapping[int, LastRecord],
        now_ms: int,
        offset_map: OffsetMap,
        io_buffer_size: int,
        aborted_index: Mapping[int, AbortedTxn] | None = None,
        aborted_past_sources: Sequence[AbortedRange] = (),
    ) -> None:
        """``aborted_index``: the ``.txnindex`` entries of the sources by marker offset (their last stable
        offsets are copied into the cleaned segments' indexes). ``aborted_past_sources``: the aborted
        transactions that began below ``first_uncleanable_offset`` with their ABORT marker in a segment
        after the sources (from those segments' ``.txnindex``)."""
        self.topic_partition = topic_partition
        self.directory = directory
        self.config = config
        self.sources = tuple(sources)
        self.first_dirty_offset = first_dirty_offset
        self.first_uncleanable_offset = first_uncleanable_offset
        self.active_producers = dict(active_producers)
        self.now_ms = now_ms
        self.aborted_index = dict(aborted_index or {})
        self.aborted_past_sources = tuple(aborted_past_sources)
        self._map = offset_map
        self._buffer_size = max(io_buffer_size, RECORD_BATCH_HEADER_SIZE)
        self._written: list[int] = []
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"CleaningJob({self.topic_partition}, dirty from {self.first_dirty_offset} to "
            f"{self.first_uncleanable_offset}, {len(self.sources)} segments)"
        )

    def close(self) -> None:
        """Close the source descriptors (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for source in self.sources:
            os.close(source.fd)

    def discard(self) -> None:
        """Remove every ``.cleaned`` file this job wrote, and close it."""
        for base in self._written:
            remove_cleaned_files(self.directory, base)
        self._written.clear()
        self.close()

    # ---- the work ---------------------------------------------------------------------------------

    def run(
        self, should_abort: Callable[[], bool] = lambda: False, throttle: Throttle = lambda _: None
    ) -> CleaningResult:
        """Clean; ``should_abort`` is polled between batches and after every read and write (then
        :class:`LogCleaningAbortedError`); ``throttle`` is told the byte count of every read and write
        (module docstring). On any error the ``.cleaned`` files written so far are removed. The descriptors
        are closed either way."""
        try:
            return self._run(should_abort, throttle)
        except BaseException:
            self.discard()
            raise
        finally:
            self.close()

    def _run(self, should_abort: Callable[[], bool], throttle: Throttle = lambda _: None) -> CleaningResult:
        def check() -> None:
            if should_abort():
                raise LogCleaningAbortedError(f"cleaning of {self.topic_partition} aborted")

        def on_io(nbytes: int) -> None:
            throttle(nbytes)
            check()

        stats = CleanerStats()
        sources = self.sources
        first_dirty = self.first_dirty_offset

        scanner = TransactionScanner()
        for source in sources:
            check()
            os.fsync(source.fd)  # so that the owner's flush before the swap finds nothing left to write
            for _, header, data in _scan(source, self._buffer_size, on_io, _is_transaction_marker):
                marker = _control_type(_decode(header, data, source.name)) if data is not None else None
                scanner.on_batch(header, marker)
        upper = self.first_uncleanable_offset
        scanner.decide_open(upper, self.aborted_past_sources)
        first_open = scanner.first_open_offset
        if first_open is not None and first_open < upper:
            upper = max(
                [s.base_offset for s in sources if s.base_offset <= first_open] or [sources[0].base_offset]
            )
            logger.debug(
                "%s: transaction open at offset %d; cleaning below %d",
                self.topic_partition,
                first_open,
                upper,
            )

        offset_map = self._map
        offset_map.clear()
        map_txns = CleanedTransactionMetadata()
        map_txns.add_aborted_transactions(
            [t for t in scanner.aborted if t.last_offset >= first_dirty and t.first_offset < upper]
        )
        for source in sources:
            if source.base_offset >= upper or source.next_segment_base <= first_dirty:
                continue
            check()
            if self._map_segment(source, first_dirty, map_txns, stats, on_io):
                logger.debug("%s: offset map full in %s", self.topic_partition, source.name)
                break
            offset_map.update_latest_offset(min(source.next_segment_base, upper) - 1)
        end_offset = max(offset_map.latest_offset + 1, first_dirty)
        offset_map.update_latest_offset(end_offset - 1)  # nothing dirty: the clean section is all seen
        stats.buffer_utilization = offset_map.utilization

        to_clean = [s for s in sources if s.base_offset < end_offset]
        config = self.config
        groups: list[CleanedGroup] = []
        txns = CleanedTransactionMetadata()
        txns.add_aborted_transactions(scanner.aborted)
        earliest_horizon: int | None = None
        for indexes in group_segments_by_size(
            to_clean, config.segment_bytes, config.segment_index_bytes, upper
        ):
            group = [to_clean[i] for i in indexes]
            size, horizon = self._clean_group(group, txns, upper, stats, check, on_io)
            groups.append(CleanedGroup(group[0].base_offset, indexes[0], len(indexes), size))
            if horizon is not None and (earliest_horizon is None or horizon < earliest_horizon):
                earliest_horizon = horizon
        return CleaningResult(first_dirty, end_offset, tuple(groups), stats, earliest_horizon)

    def _map_segment(
        self,
        source: SourceSegment,
        start: int,
        txns: CleanedTransactionMetadata,
        stats: CleanerStats,
        on_io: Throttle,
    ) -> bool:
        """Add the keys of one dirty segment from ``start`` on; True when the map filled up first (the
        batches mapped are then those up to its ``latest_offset``)."""
        offset_map = self._map
        for _, header, data in _scan(source, self._buffer_size, on_io, with_data=True):
            assert data is not None
            stats.map_bytes_read += header.size_in_bytes
            if header.is_control:
                txns.on_control_batch_read(header, _control_type(_decode(header, data, source.name)))
                stats.map_messages_read += 1
            elif txns.on_batch_read(header):
                stats.map_messages_read += header.records_count
            elif header.last_offset >= start:
                if len(offset_map) and not offset_map.room_for(header.records_count):
                    return True
                for record in _decode(header, data, source.name):
                    if record.key is not None and record.offset >= start:
                        offset_map.put(record.key, record.offset)
                stats.map_messages_read += header.records_count
            if header.last_offset >= start:
                offset_map.update_latest_offset(header.last_offset)
        return False

    def _clean_group(
        self,
        group: Sequence[SourceSegment],
        txns: CleanedTransactionMetadata,
        upper: int,
        stats: CleanerStats,
        check: Callable[[], None],
        on_io: Throttle,
    ) -> tuple[int, int | None]:
        """Write ``group`` as one ``.cleaned`` segment with its indexes, durably; returns its size and the
        smallest delete horizon written."""
        directory = self.directory
        base = group[0].base_offset
        remove_cleaned_files(directory, base)
        self._written.append(base)
        path = cleaned_file(directory, base, layout.LOG_FILE_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        size = 0
        earliest_horizon: int | None = None
        retained_before = len(txns.retained_aborted)
        try:
            pending: list[bytes] = []
            pending_bytes = 0
            for source in group:
                for _, header, data in _scan(source, self._buffer_size, on_io, with_data=True):
                    assert data is not None
                    check()
                    filtered = self._filter_batch(header, data, source.name, txns, upper, stats)
                    if filtered is None:
                        continue
                    out, horizon = filtered
                    if horizon is not None and (earliest_horizon is None or horizon < earliest_horizon):
                        earliest_horizon = horizon
                    pending.append(out)
                    pending_bytes += len(out)
                    if pending_bytes >= self._buffer_size:
                        size += _write_all(fd, b"".join(pending), on_io)
                        pending, pending_bytes = [], 0
                stats.segments_read += 1
            size += _write_all(fd, b"".join(pending), on_io)
        finally:
            os.close(fd)
        mtime = max(source.mtime_ns for source in group)
        os.utime(path, ns=(mtime, mtime))
        segment = LogSegment.open(
            directory,
            base,
            self.config,
            OpenSegmentLimiter(1),
            now_ms=self.now_ms,
            extra_suffix=layout.CLEANED_FILE_SUFFIX,
        )
        try:
            segment.rebuild_indexes()
            for txn in txns.retained_aborted[retained_before:]:
                segment.txn_index.append(self._index_entry(txn))
            segment.flush()
        finally:
            segment.close()
        stats.bytes_written += size
        stats.segments_written += 1
        return size, earliest_horizon

    def _filter_batch(
        self,
        header: RecordBatchHeader,
        data: memoryview,
        name: str,
        txns: CleanedTransactionMetadata,
        upper: int,
        stats: CleanerStats,
    ) -> tuple[bytes, int | None] | None:
        """Kafka's ``MemoryRecords.filterTo`` with the log cleaner's filter, for one batch: the bytes to write
        in its place and, if it keeps a tombstone or a marker until a delete horizon, that horizon; None to
        drop the batch."""
        stats.bytes_read += header.size_in_bytes
        now = self.now_ms
        records: list[Record] | None = None
        if header.is_control:
            records = _decode(header, data, name)
            can_discard = txns.on_control_batch_read(header, _control_type(records))
            discard_records = can_discard and header.has_delete_horizon and header.base_timestamp <= now
        else:
            can_discard = txns.on_batch_read(header)
            discard_records = can_discard
        retain_empty = (header.has_producer_id and self._is_last_of_producer(header)) or (
            header.next_offset == upper
        )
        if discard_records and not retain_empty:
            return None
        retained: list[Record] = []
        if not discard_records:
            if records is None:
                records = _decode(header, data, name)
            stats.messages_read += len(records)
            if header.is_control:
                retained = records
            else:
                retained = [r for r in records if self._should_retain_record(header, r, stats)]
        if not retained:
            if not retain_empty:
                return None
            if records is not None and not records:
                return bytes(data), None  # already an empty batch
            empty = encode_batch(
                [],
                base_offset=header.base_offset,
                last_offset_delta=header.last_offset_delta,
                timestamp_type=header.timestamp_type,
                base_timestamp=header.max_timestamp,
                max_timestamp=header.max_timestamp,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                is_transactional=header.is_transactional,
                is_control=header.is_control,
                partition_leader_epoch=header.partition_leader_epoch,
                compression=Compression.NONE,
            )
            return empty, None
        stats.messages_written += len(retained)
        has_tombstone = any(r.value is None for r in retained)
        needs_horizon = (
            has_tombstone or (can_discard and header.is_control)
        ) and not header.has_delete_horizon
        if needs_horizon:
            horizon: int | None = now + self.config.delete_retention_ms
        else:
            horizon = header.base_timestamp if header.has_delete_horizon else None
        # What the horizon will let go: a tombstone, or a marker (a horizon is only set on removable ones).
        pending_horizon = horizon if has_tombstone or header.is_control else None
        if records is not None and len(retained) == len(records) and not needs_horizon:
            return bytes(data), pending_horizon
        log_append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
        rewritten = encode_batch(
            retained,
            base_offset=header.base_offset,
            compression=header.compression,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            partition_leader_epoch=header.partition_leader_epoch,
            offset_deltas=[r.offset - header.base_offset for r in retained],
            last_offset_delta=header.last_offset_delta,
            max_timestamp=header.max_timestamp if log_append_time else None,
            delete_horizon_ms=horizon,
        )
        return rewritten, pending_horizon

    def _index_entry(self, txn: AbortedRange) -> AbortedTxn:
        """The ``.txnindex`` entry of an aborted transaction whose marker a cleaned segment keeps: the
        source's, else (index lost) one whose last stable offset is its first offset, which only makes
        read_committed fetches look further back for aborted transactions, never less far."""
        entry = self.aborted_index.get(txn.last_offset)
        if entry is not None and entry.producer_id == txn.producer_id:
            return entry
        return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.first_offset)

    def _is_last_of_producer(self, header: RecordBatchHeader) -> bool:
        last = self.active_producers.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch

    def _should_retain_record(self, header: RecordBatchHeader, record: Record, stats: CleanerStats) -> bool:
        """Kafka's ``Cleaner.shouldRetainRecord``."""
        offset_map = self._map
        if record.offset > offset_map.latest_offset:
            return True
        if record.key is None:
            stats.invalid_messages += 1
            return False
        if record.offset < offset_map.get(record.key):
            return False
        if record.value is not None:
            return True
        return not header.has_delete_horizon or self.now_ms < header.base_timestamp


def _write_all(fd: int, data: bytes, on_write: Throttle) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        written = os.write(fd, view[done:])
        on_write(written)
        done += written
    return done
