"""One log segment: a ``.log`` file of record batches with its offset and time indexes (Kafka's LogSegment).

Invariants:

* ``base_offset`` <= every offset in the segment, and every offset is below the next segment's base offset.
  The file is a sequence of whole magic-v2 batches ``[0, size)``: a torn tail is cut at load.
* In a log that is not compacted, the first batch starts at ``base_offset`` and each batch at the previous
  batch's next offset; :meth:`LogSegment.recover` checks this (and the CRC of every batch).
* Indexing follows Kafka exactly: before appending a batch, if more than ``index.interval.bytes`` were
  written since the last offset index entry, the batch gets an entry ``(last_offset, position)`` and the time
  index gets ``(max timestamp so far, last offset of the batch that reached it)`` if that timestamp grew.
  When the segment rolls or closes, the time index gets its final entry and both files are trimmed.
* The aborted-transaction index (:mod:`.txn_index`) holds the transactions whose ABORT marker lies in
  the segment; it goes with the segment (rename, delete, truncation), is emptied by :meth:`recover` (the
  log rebuilds it from the markers) and checked against the log at load.
* Reads never load payloads: headers are read with ``os.pread`` (a small window) starting from an index
  entry, and whole-batch :class:`FileRegion` s are returned. Every index entry used is checked against the
  header it points at; a mismatch rebuilds the indexes from the log. A read among the last batches this
  process appended to the active segment finds them in :class:`~tidelog.storage.recent_batches.RecentBatches`
  instead (no header read); every truncation, recovery and index rebuild forgets them.
* The ``.log`` is written with ``os.pwrite`` at ``size`` only; nothing else writes the file. Every segment,
  active or not, may release its handles when the limiter says so and reopens them on its next use (see
  :mod:`.file_handles`): open descriptors and maps stay bounded however many partitions there are. A new
  segment creates its index files empty; index entries reach the file a page at a time, at the latest
  when the segment is flushed, rolled or closed (:mod:`.index`).
* Not thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from tidelog.protocol.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_HEADER_SIZE,
    ControlRecordType,
    CorruptRecordError,
    RecordBatchHeader,
    RecordError,
    decode_batch,
    decode_control_record,
    read_batch_header,
    validate_batch,
)
from tidelog.storage import layout
from tidelog.storage.batch_reader import BatchScan
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import CorruptIndexError, KafkaStorageError, LogCorruptionError
from tidelog.storage.fetch_data import FileRegion
from tidelog.storage.file_handles import OpenSegmentLimiter, SegmentFile
from tidelog.storage.flush_plan import close_descriptors
from tidelog.storage.index import OffsetIndex, OffsetPosition, TimeIndex
from tidelog.storage.recent_batches import RecentBatch, RecentBatches
from tidelog.storage.txn_index import TransactionIndex

__all__ = ["LogSegment", "SegmentDescriptors"]

logger = logging.getLogger(__name__)

_SCAN_WINDOW: Final = 16 * 1024
_RECOVERY_CHUNK: Final = 1 << 20
_INT32_MAX: Final = 2**31 - 1
_NO_TIMESTAMP: Final = -1


class SegmentDescriptors(NamedTuple):
    """New descriptors of a segment's files to fsync (:meth:`LogSegment.open_for_fsync`), and the
    transaction index writes they cover (None if its descriptor is not among them)."""

    descriptors: tuple[int, ...]
    txn_writes: int | None


def _jitter_ms(config: LogConfig, directory: Path, base_offset: int) -> int:
    """Kafka's per-segment roll jitter, derived from the segment's identity instead of a random draw."""
    if config.segment_jitter_ms <= 0:
        return 0
    bound = min(config.segment_jitter_ms, config.segment_ms)
    return zlib.crc32(f"{directory.name}/{base_offset}".encode()) % bound


class LogSegment:
    """A segment of a partition log. Build with :meth:`create` (new, active) or :meth:`open` (existing)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        limiter: OpenSegmentLimiter,
        *,
        created_ms: int,
        size: int,
        extra_suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        self._dir = directory
        self._config = config
        self._limiter = limiter
        self._log_path = layout.log_file(directory, base_offset, extra_suffix)
        self.txn_index = TransactionIndex(
            layout.txn_index_file(directory, base_offset, extra_suffix), base_offset
        )
        self.offset_index = OffsetIndex(
            layout.offset_index_file(directory, base_offset, extra_suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self.time_index = TimeIndex(
            layout.time_index_file(directory, base_offset, extra_suffix),
            base_offset,
            config.segment_index_bytes,
        )
        self._file: SegmentFile | None = None
        self._size = size
        self._active = False
        self._deleted = False
        self._created_ms = created_ms
        self._first_append_ms: int | None = None
        self._first_batch_timestamp: int | None = None
        self._jitter_ms = _jitter_ms(config, directory, base_offset)
        # Known for active segments; loaded lazily (time index / tail scan) for inactive ones.
        self._next_offset: int | None = None
        self._max_timestamp = _NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self._max_timestamp_loaded = False
        self._bytes_since_last_index_entry = 0
        self._recent: RecentBatches | None = None
        """Where the last batches appended in this process lie (tail reads skip the header scan); None
        until the first append."""

    def __repr__(self) -> str:
        state = "active" if self._active else "inactive"
        return f"LogSegment({self._log_path.name}, size={self._size}, {state})"

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, limiter: OpenSegmentLimiter, *, now_ms: int
    ) -> LogSegment:
        """A new empty active segment; leftover files with the same base offset are removed first."""
        for suffix in layout.SEGMENT_FILE_SUFFIXES:
            (directory / layout.file_name(base_offset, suffix)).unlink(missing_ok=True)
        segment = cls(directory, base_offset, config, limiter, created_ms=now_ms, size=0)
        segment._file = SegmentFile(segment._log_path, "x+b")
        segment.offset_index.create_empty()  # no preallocation or mapping before the first entry
        segment.time_index.create_empty()
        segment._active = True
        limiter.touch(segment)
        segment._next_offset = base_offset
        segment._max_timestamp_loaded = True
        return segment

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        limiter: OpenSegmentLimiter,
        *,
        now_ms: int,
        extra_suffix: str = "",
    ) -> LogSegment:
        """An existing segment, inactive, nothing read yet (indexes map on first use)."""
        path = layout.log_file(directory, base_offset, extra_suffix)
        return cls(
            directory,
            base_offset,
            config,
            limiter,
            created_ms=now_ms,
            size=path.stat().st_size,
            extra_suffix=extra_suffix,
        )

    # ---- state ------------------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def size(self) -> int:
        """Bytes of whole batches in the ``.log`` file."""
        return self._size

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (``base_offset`` when empty)."""
        if self._next_offset is None:
            self.load_tail()
        assert self._next_offset is not None
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max_timestamp in the segment, -1 if none carries one."""
        self._ensure_max_timestamp()
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the first batch carrying :attr:`max_timestamp` (-1 when none)."""
        self._ensure_max_timestamp()
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What time retention compares: :attr:`max_timestamp`, else the file's modification time (Kafka)."""
        timestamp = self.max_timestamp
        if timestamp >= 0:
            return timestamp
        return int(os.stat(self._log_path).st_mtime * 1000)

    def set_config(self, config: LogConfig) -> None:
        self._config = config

    def _ensure_max_timestamp(self) -> None:
        if not self._max_timestamp_loaded:
            self._use()
            last = self.time_index.last_entry()
            if last is not None:
                self._max_timestamp, self._offset_of_max_timestamp = last.timestamp, last.offset
            self._max_timestamp_loaded = True

    # ---- handles ----------------------------------------------------------------------------------

    def _use(self) -> None:
        if self._deleted:
            raise KafkaStorageError(f"segment {self._log_path} was deleted")
        self._limiter.touch(self)

    def _handle(self) -> SegmentFile:
        self._use()
        handle = self._file
        if handle is None:
            handle = self._file = SegmentFile(self._log_path, "r+b")
        return handle

    def release_handles(self) -> None:
        """Drop the file object and index mappings (regions already handed out keep the file open)."""
        self._file = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.release()

    def mark_active(self) -> None:
        """This segment is now the log's last one: its indexes take entries up to their full capacity."""
        self._active = True
        self._handle()
        self.offset_index.resize(self._config.segment_index_bytes)
        self.time_index.resize(self._config.segment_index_bytes)
        if self._next_offset is None or not self._max_timestamp_loaded:
            self.load_tail()

    def mark_inactive(self) -> None:
        """The log rolled past this segment: write the time index's final entry, trim both indexes."""
        self._finish_indexes()
        self._active = False
        self._recent = None
        self._limiter.touch(self)

    def _finish_indexes(self) -> None:
        self._ensure_max_timestamp()
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def flush(self) -> None:
        """fsync the log, then the indexes."""
        os.fsync(self._handle().fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def open_for_fsync(self) -> SegmentDescriptors:
        """What :meth:`flush` makes durable, as new descriptors for an fsync on another thread, in its order:
        the log (a duplicate of the open handle, else opened by name), the indexes in use, the transaction
        index if written since its last fsync. The caller owns them (:mod:`.flush_plan`)."""
        if self._deleted:
            raise KafkaStorageError(f"segment {self._log_path} was deleted")
        handle = self._file
        descriptors = [
            os.dup(handle.fileno()) if handle is not None else os.open(self._log_path, os.O_RDONLY)
        ]
        try:
            for index in (self.offset_index, self.time_index):
                fd = index.open_for_fsync()
                if fd is not None:
                    descriptors.append(fd)
            txn = self.txn_index.open_for_fsync()
        except BaseException:
            close_descriptors(descriptors)
            raise
        if txn is None:
            return SegmentDescriptors(tuple(descriptors), None)
        descriptors.append(txn[0])
        return SegmentDescriptors(tuple(descriptors), txn[1])

    def close(self) -> None:
        """Finish the indexes (if active) and release every handle."""
        if self._deleted:
            return
        if self._active:
            self._finish_indexes()
            self._active = False
        self.release_handles()
        self._limiter.forget(self)

    def rename_for_deletion(self) -> None:
        """Leave the log: release the handles and rename every file to ``<name>.deleted``. Regions already
        handed out stay readable; :meth:`delete_files` removes the files later."""
        self.release_handles()
        self._limiter.forget(self)
        self._active = False
        deleted = layout.DELETED_FILE_SUFFIX
        with contextlib.suppress(FileNotFoundError):
            os.rename(self._log_path, f"{self._log_path}{deleted}")
        self._log_path = Path(f"{self._log_path}{deleted}")
        self.offset_index.rename_to(Path(f"{self.offset_index.path}{deleted}"))
        self.time_index.rename_to(Path(f"{self.time_index.path}{deleted}"))
        self.txn_index.rename_to(Path(f"{self.txn_index.path}{deleted}"))

    def delete_files(self) -> None:
        """Release handles and unlink every file of the segment (whatever its current names)."""
        self.release_handles()
        self._limiter.forget(self)
        self._active = False
        self._deleted = True
        self._log_path.unlink(missing_ok=True)
        self.offset_index.delete_file()
        self.time_index.delete_file()
        self.txn_index.delete_file()

    # ---- scanning ---------------------------------------------------------------------------------

    def _scan(self, start: int, end: int | None = None) -> BatchScan:
        """The whole batches in ``[start, end)``, headers only (:class:`BatchScan` items ``(position,
        header, None)``). Stops silently at a torn tail; raises :class:`LogCorruptionError` for bytes that are
        no batch header."""
        handle = self._handle()  # held by the scan: the descriptor outlives a release meanwhile
        return BatchScan(
            lambda nbytes, position: os.pread(handle.fileno(), nbytes, position),
            name=str(self._log_path),
            start=start,
            end=self._size if end is None else end,
            window_bytes=_SCAN_WINDOW,
        )

    def batches(self) -> Iterator[tuple[int, RecordBatchHeader]]:
        """``(position, header)`` of every batch of the segment (headers only)."""
        for position, header, _ in self._scan(0):
            yield position, header

    def _header_at(self, position: int) -> RecordBatchHeader | None:
        data = os.pread(self._handle().fileno(), RECORD_BATCH_HEADER_SIZE, position)
        try:
            return read_batch_header(data)
        except CorruptRecordError:
            return None

    def end_txn_marker(
        self, position: int, header: RecordBatchHeader
    ) -> tuple[ControlRecordType, int] | None:
        """``(COMMIT or ABORT, coordinator_epoch)`` of the control batch at ``position``; None when it holds no
        record (cleaned away) or a control record that is no transaction marker."""
        if not header.is_control or header.records_count == 0:
            return None
        _, records = decode_batch(self._read_exact(position, header.size_in_bytes))
        if not records:
            return None
        try:
            return decode_control_record(records[0])
        except RecordError:
            return None

    def _read_exact(self, position: int, nbytes: int) -> bytes:
        data = os.pread(self._handle().fileno(), nbytes, position)
        if len(data) != nbytes:
            raise LogCorruptionError(f"{self._log_path}: short read of {nbytes} bytes at {position}")
        return data

    def _checked_start(self, lookup: Callable[[], OffsetPosition | None], floor: int) -> int:
        """Where to start scanning: the index entry ``lookup()`` gives if it lies at/after ``floor`` and the
        batch there really ends at the entry's offset; else ``floor``. A bad entry rebuilds the indexes."""
        for attempt in range(2):
            entry = lookup()
            if entry is None or entry.position <= floor:
                return floor
            header = self._header_at(entry.position)
            if header is not None and header.last_offset == entry.offset:
                return entry.position
            if attempt == 0:
                logger.warning(
                    "%s: offset index entry %s does not match the log; rebuilding the indexes",
                    self._log_path,
                    entry,
                )
                self.rebuild_indexes()
        return floor

    # ---- append -----------------------------------------------------------------------------------

    def _index_batch(self, position: int, last_offset: int, size: int, max_timestamp: int) -> None:
        """The one indexing rule, for an append and for a rebuild alike (so both make the same entries): an
        offset and a time entry once more than ``index.interval.bytes`` went in since the last one."""
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = last_offset
        if self._bytes_since_last_index_entry > self._config.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = size
        else:
            self._bytes_since_last_index_entry += size

    def append(
        self, data: bytearray | memoryview, batches: Sequence[tuple[int, RecordBatchHeader]], *, now_ms: int
    ) -> None:
        """Write ``data`` (whole batches, offsets assigned) at the end of the file and index it.

        ``batches`` are the batches' positions within ``data`` and their headers.
        """
        if not batches:
            raise ValueError(f"append of no batch to {self._log_path}")
        position = self._size
        # _handle() without its two calls (once per append): refuse a deleted segment, touch the LRU, reopen
        if self._deleted:
            raise KafkaStorageError(f"segment {self._log_path} was deleted")
        self._limiter.touch(self)
        handle = self._file
        if handle is None:
            handle = self._file = SegmentFile(self._log_path, "r+b")
        fd = handle.fileno()
        total = len(data)
        try:
            done = os.pwrite(fd, data, position)  # all of it, but for a short write: no slice made
            while done < total:
                done += os.pwrite(fd, data[done:], position + done)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, position)
            raise KafkaStorageError(f"write to {self._log_path} failed: {exc}") from exc
        if position == 0:
            self._first_append_ms = now_ms
        if not self._max_timestamp_loaded:
            self._ensure_max_timestamp()
        recent = self._recent
        if recent is None:
            recent = self._recent = RecentBatches()
        # each header's last offset and size read once (not through its properties: once per batch)
        last_offset = 0
        for relative, header in batches:
            batch_position = position + relative
            base_offset = header.base_offset
            last_offset = base_offset + header.last_offset_delta
            size = header.batch_length + LOG_OVERHEAD
            self._index_batch(batch_position, last_offset, size, header.max_timestamp)
            recent.record(batch_position, base_offset, last_offset, size)
        self._size = position + total
        self._next_offset = last_offset + 1

    def _rolling_base_ms(self) -> int:
        """When the segment's first batch arrived (this process), else its timestamp, else creation time."""
        if self._first_append_ms is not None:
            return self._first_append_ms
        if self._first_batch_timestamp is None:
            header = self._header_at(0) if self._size else None
            timestamp = header.max_timestamp if header is not None else _NO_TIMESTAMP
            self._first_batch_timestamp = timestamp if timestamp >= 0 else self._created_ms
        return self._first_batch_timestamp

    def can_hold_offset(self, offset: int) -> bool:
        """Whether ``offset`` fits the segment's int32 relative offsets."""
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def should_roll(self, *, messages_size: int, max_offset_in_messages: int, now_ms: int) -> bool:
        """Kafka's ``shouldRoll``: the append would overflow ``segment.bytes``, the first batch is older than
        ``segment.ms`` (minus jitter), an index is full, or the offsets no longer fit. Never for an empty
        segment, except when the offsets do not fit."""
        if not 0 <= max_offset_in_messages - self.base_offset <= _INT32_MAX:  # can_hold_offset
            return True
        size = self._size
        if size == 0:
            return False
        config = self._config
        base_ms = self._first_append_ms  # asked before every append: _rolling_base_ms without its call
        if base_ms is None:
            base_ms = self._rolling_base_ms()
        return (
            size > config.segment_bytes - messages_size
            or now_ms - base_ms > config.segment_ms - self._jitter_ms
            or self.offset_index.is_full
            or self.time_index.is_full
        )

    # ---- read -------------------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, RecordBatchHeader] | None:
        """Position and header of the first batch (at/after ``start_position``) whose last offset is >=
        ``offset``; None if there is none in this segment."""
        start = self._checked_start(lambda: self.offset_index.lookup(offset), start_position)
        for position, header, _ in self._scan(start):
            if header.last_offset >= offset:
                return position, header
        return None

    def _locate(self, offset: int, start_position: int = 0) -> RecentBatch | None:
        """:meth:`translate_offset` as ``(position, base_offset, last_offset, size_in_bytes)``, from the
        recent batches when they know (a tail read), else by scanning."""
        if self._recent is not None:
            known = self._recent.find(offset, self._size)
            if known is False:
                return None
            if known is not None and known[0] >= start_position:
                return known
        found = self.translate_offset(offset, start_position)
        if found is None:
            return None
        position, header = found
        return position, header.base_offset, header.last_offset, header.size_in_bytes

    def _last_boundary(self, start: int, limit: int) -> tuple[int, int]:
        """The largest batch end at or before ``limit`` scanning from ``start`` (a batch start), and the
        offset of the batch that starts there."""
        scan_from = self._checked_start(lambda: self.offset_index.lookup_by_position(limit), start)
        boundary = scan_from
        next_offset: int | None = None
        for position, header, _ in self._scan(scan_from):
            end = position + header.size_in_bytes
            if end > limit:
                if next_offset is None:
                    next_offset = header.base_offset
                break
            boundary, next_offset = end, header.next_offset
        if next_offset is None:
            raise LogCorruptionError(f"{self._log_path}: no batch at position {scan_from}")
        return boundary, next_offset

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int,
        upper_bound_offset: int,
        min_one_batch: bool,
    ) -> tuple[FileRegion, int, bool] | None:
        """Whole batches from the one holding ``start_offset``.

        None: nothing to return, either because no batch here ends at/after ``start_offset`` (look in the
        next segment: check with :meth:`translate_offset`) or because the first batch is excluded. Otherwise
        ``(region, next_offset, reached_end)``: the batches before the first one whose base offset is >=
        ``max_offset``, at most ``max_bytes`` of them except that the first is always whole when
        ``min_one_batch``; ``next_offset`` is one past the last batch in the region; ``reached_end`` says
        the region ends at the end of the segment, so a read may go on in the next one.
        ``upper_bound_offset`` (next segment's base offset, or the log end) is where offsets of this segment
        end; it spares looking up ``max_offset`` when that lies beyond.
        """
        found = self._locate(start_offset)
        if found is None:
            return None
        start, first_base, first_last, first_size = found
        if first_base >= max_offset:
            return None
        end_limit, limit_next = self._size, upper_bound_offset
        if max_offset < upper_bound_offset:
            bound = self._locate(max_offset, start)
            if bound is not None:
                bound_position, bound_base, bound_last, bound_size = bound
                if bound_base >= max_offset:
                    end_limit, limit_next = bound_position, bound_base
                else:
                    end_limit = bound_position + bound_size
                    limit_next = bound_last + 1
        if self._active and end_limit == self._size:
            limit_next = self.next_offset
        first_end = start + first_size
        if first_size > max_bytes:
            if not min_one_batch:
                return None
            end, next_offset = first_end, first_last + 1
        elif start + max_bytes >= end_limit:
            end, next_offset = end_limit, limit_next
        else:
            end, next_offset = self._last_boundary(start, start + max_bytes)
        return FileRegion(self._handle(), start, end - start), next_offset, end == self._size

    def _first_record_at(
        self, position: int, header: RecordBatchHeader, *, min_offset: int, min_timestamp: int
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the batch's first record with both at least the given minimums.

        The batch is checked whole (CRC32C) first: a damaged one in a segment start-up trusted raises
        :class:`LogCorruptionError` rather than answer from garbage."""
        data = self._read_exact(position, header.size_in_bytes)
        try:
            validate_batch(data)
            _, records = decode_batch(data)
        except RecordError as exc:
            raise LogCorruptionError(
                f"{self._log_path}: batch at offsets {header.base_offset}..{header.last_offset} is damaged: {exc}"
            ) from exc
        for record in records:
            if record.offset >= min_offset and record.timestamp >= min_timestamp:
                return record.offset, record.timestamp
        return None

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at/after ``starting_offset`` whose timestamp is >=
        ``timestamp`` (Kafka's ``findOffsetByTimestamp``: time index, offset index, then a short scan)."""
        for attempt in range(2):
            entry = self.time_index.lookup(timestamp)
            lookup_offset = max(entry.offset if entry is not None else self.base_offset, starting_offset)
            found = self.translate_offset(lookup_offset)
            if found is None:
                return None
            if entry is not None and entry.offset >= starting_offset and attempt == 0:
                _, header = found
                if header.last_offset != entry.offset or header.max_timestamp != entry.timestamp:
                    logger.warning(
                        "%s: time index entry %s does not match the log; rebuilding", self._log_path, entry
                    )
                    self.rebuild_indexes()
                    continue
            for position, header, _ in self._scan(found[0]):
                if header.last_offset < starting_offset or header.max_timestamp < timestamp:
                    continue
                result = self._first_record_at(
                    position, header, min_offset=starting_offset, min_timestamp=timestamp
                )
                if result is not None:
                    return result
            return None
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record carrying the segment's largest timestamp."""
        timestamp = self.max_timestamp
        if timestamp < 0:
            return None
        found = self.translate_offset(self.offset_of_max_timestamp)
        if found is None:
            return None
        position, header = found
        result = self._first_record_at(
            position, header, min_offset=header.base_offset, min_timestamp=timestamp
        )
        return result if result is not None else (header.last_offset, timestamp)

    # ---- load, recovery, truncation ---------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` if an index file is missing or fails its checks."""
        for index in (self.offset_index, self.time_index):
            if not index.path.exists():
                raise CorruptIndexError(f"{index.path} is missing")
        self._use()
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()

    def check_against_log(self, *, cut_torn_tail: bool) -> None:
        """Cheap checks of a trusted segment's indexes against its log, at load; raise
        :class:`CorruptIndexError` (the caller then recovers the segment) when they disagree.

        Besides :meth:`sanity_check`: the time index's last entry must describe a real batch (last offset
        and max timestamp), and neither the first batch nor any batch after the last offset index entry
        may carry a larger timestamp than that entry (a rolled or closed segment's time index ends with its
        largest timestamp), and the transaction index must be ordered with its markers inside the segment,
        each entry matching its producer's ABORT marker and first transactional batch in the log. Also
        learns the next offset. A tail that is not whole is cut when ``cut_torn_tail`` (the last segment),
        else it is corruption.
        """
        self.sanity_check()
        last_time = self.time_index.last_entry()
        if last_time is not None:
            found = self.translate_offset(last_time.offset)
            if found is None or (found[1].last_offset, found[1].max_timestamp) != (
                last_time.offset,
                last_time.timestamp,
            ):
                raise CorruptIndexError(
                    f"{self.time_index.path}: last entry {last_time} does not match the log"
                )
        end = self.load_tail()
        if end < self._size:
            if not cut_torn_tail:
                raise CorruptIndexError(
                    f"{self._log_path}: {self._size - end} bytes after the last whole batch"
                )
            logger.warning("%s: cutting %d bytes of torn tail", self._log_path, self._size - end)
            self.truncate_file(end)
        self.txn_index.sanity_check(self.next_offset)
        self._check_txn_index_against_log()
        indexed_max = last_time.timestamp if last_time is not None else _NO_TIMESTAMP
        first = self._header_at(0) if self._size else None
        if self._max_timestamp > indexed_max or (first is not None and first.max_timestamp > indexed_max):
            raise CorruptIndexError(
                f"{self.time_index.path}: largest indexed timestamp {indexed_max} is below the log's"
            )

    def _check_txn_index_against_log(self) -> None:
        """Raise :class:`CorruptIndexError` unless every aborted transaction of the index has its ABORT
        marker, of its producer, at its last offset, and (when that lies in this segment) a transactional
        batch of its producer starting at its first offset. A plausible but wrong entry (one flipped bit in
        a producer id) would otherwise show the aborted records to read_committed consumers."""
        for entry in self.txn_index.entries():
            found = self.translate_offset(entry.last_offset)
            marker = None
            if found is not None:
                position, header = found
                if (header.base_offset, header.producer_id) == (entry.last_offset, entry.producer_id):
                    try:
                        marker = self.end_txn_marker(position, header)
                    except (RecordError, LogCorruptionError):
                        marker = None
            if marker is None or marker[0] != ControlRecordType.ABORT:
                raise CorruptIndexError(
                    f"{self.txn_index.path}: no ABORT marker of producer {entry.producer_id} at offset "
                    f"{entry.last_offset} for {entry}"
                )
            if entry.first_offset < self.base_offset:
                continue  # the transaction began in an earlier segment
            found = self.translate_offset(entry.first_offset)
            first = found[1] if found is not None else None
            if (
                first is None
                or (first.base_offset, first.producer_id) != (entry.first_offset, entry.producer_id)
                or not first.is_transactional
                or first.is_control
            ):
                raise CorruptIndexError(
                    f"{self.txn_index.path}: no transactional batch of producer {entry.producer_id} starts at "
                    f"offset {entry.first_offset} for {entry}"
                )

    def _reset_index_state(self) -> None:
        if self._recent is not None:
            self._recent.clear()
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp = _NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_loaded = True

    def load_tail(self) -> int:
        """Scan from the last offset index entry to the end of the file to learn the next offset and the
        largest timestamp. Returns where the whole batches end (< size when the tail is torn or garbled)."""
        start = self._checked_start(self.offset_index.last_entry, 0)
        entry = self.offset_index.last_entry() if start else None
        last_time = self.time_index.last_entry()
        max_timestamp, offset_of_max = (
            (last_time.timestamp, last_time.offset) if last_time else (_NO_TIMESTAMP, -1)
        )
        next_offset = entry.offset + 1 if entry is not None else self.base_offset
        end = start
        try:
            for position, header, _ in self._scan(start):
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                next_offset = header.next_offset
                end = position + header.size_in_bytes
        except LogCorruptionError as exc:
            logger.warning("%s: unreadable batch header in the tail: %s", self._log_path, exc)
        self._next_offset = next_offset
        self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, offset_of_max
        self._max_timestamp_loaded = True
        self._bytes_since_last_index_entry = end - start
        return end

    def truncate_file(self, size: int) -> int:
        """Cut the file to ``size`` bytes (a batch boundary); returns the bytes cut."""
        handle = self._handle()
        cut = self._size - size
        if cut > 0:
            if self._recent is not None:
                self._recent.clear()
            os.ftruncate(handle.fileno(), size)
            self._size = size
            self._first_batch_timestamp = None
            if size == 0:
                self._first_append_ms = None
        return max(cut, 0)

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batch headers (no CRC check; :meth:`recover` does that)."""
        self._use()
        self._reset_index_state()
        next_offset = self.base_offset
        for position, header, _ in self._scan(0):
            self._index_batch(position, header.last_offset, header.size_in_bytes, header.max_timestamp)
            next_offset = header.next_offset
        self._next_offset = next_offset
        if not self._active:
            self._finish_indexes()
        else:  # the rebuilt entries on disk now, not at the next flush: the file held bad ones
            self.offset_index.write_pending()
            self.time_index.write_pending()

    def recover(self, *, contiguous: bool) -> int:
        """Revalidate every batch and rebuild the indexes; cut the file at the first invalid byte.

        A batch is valid if :func:`~tidelog.protocol.records.validate_batch` accepts it (length, magic, CRC32C,
        counts, timestamps), its last offset fits the segment, and its base offset is at least the previous
        batch's next offset (the segment's base offset for the first) — exactly that offset when
        ``contiguous``. Returns the number of bytes cut. The transaction index is emptied: the log rebuilds
        it by replaying the producer state over this segment.
        """
        handle = self._handle()
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        self._size = size
        self._reset_index_state()
        self.txn_index.reset()
        scan = BatchScan(
            lambda nbytes, position: os.pread(fd, nbytes, position),
            name=str(self._log_path),
            start=0,
            end=size,
            window_bytes=_RECOVERY_CHUNK,
            validate=True,
            raise_on_damage=False,
        )
        position = 0
        next_offset = self.base_offset
        reason = ""
        for position, header, _ in scan:
            if header.base_offset < next_offset or (contiguous and header.base_offset != next_offset):
                reason = f"batch base offset {header.base_offset}, expected {next_offset}"
                break
            if not self.can_hold_offset(header.last_offset):
                reason = f"last offset {header.last_offset} does not fit base offset {self.base_offset}"
                break
            self._index_batch(position, header.last_offset, header.size_in_bytes, header.max_timestamp)
            next_offset = header.next_offset
        else:
            position = scan.position
            reason = scan.stop_reason or ""
        if position < size:
            logger.warning(
                "%s: cutting %d invalid bytes at position %d (%s)",
                self._log_path,
                size - position,
                position,
                reason or "torn tail",
            )
        cut = self.truncate_file(position)
        self._next_offset = next_offset
        return cut

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` (a batch holding ``offset`` goes whole).
        Returns the bytes cut."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        cut = self.truncate_file(found[0]) if found is not None else 0
        end = self.load_tail()
        if end != self._size:
            cut += self.truncate_file(end)
        return cut
