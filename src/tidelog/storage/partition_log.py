"""The log of one partition: ordered segments in ``<log.dir>/<topic>-<partition>/`` (Kafka's UnifiedLog/LocalLog).

Invariants:

* ``log_start_offset <= high_watermark <= log_end_offset`` and ``recovery_point <= log_end_offset``; all
  offsets are absolute. Segments are sorted by base offset; the last one is the *active* segment, the only
  one appended to; every offset of a segment is below the next segment's base offset.
* Offsets in a log that is not compacted are contiguous: an append with assigned offsets that leaves a gap
  (a follower after the leader deleted records) starts a new segment at its first offset.
* Data written by :meth:`PartitionLog.append` is in the page cache when it returns: a process crash loses
  none of it. fsync happens in :meth:`append` once ``flush.messages`` are unflushed, on :meth:`flush`, and
  in the periodic flush (:meth:`plan_flush` / :meth:`complete_flush` around a :class:`FlushPlan` executed
  on another thread, or :meth:`maybe_flush` doing all three) for segments that rolled and once ``flush.ms``
  passed. The recovery point advances only after the fsync returned, never past what it covered: a flush
  completed after the log was closed or truncated since its plan is dropped.
* Compaction (:mod:`.cleaner`) replaces inactive segments below the recovery point by
  :meth:`replace_segments` (``.cleaned`` -> ``.swap`` -> live, crash-safe); offsets never change, gaps
  appear.
* Segments leave by rename to ``.deleted`` and are unlinked by :meth:`remove_deleted_files` after
  ``file.delete.delay.ms``; regions already handed out stay readable meanwhile.
* The active segment is never deleted in place: retention that covers every segment rolls first.
* Idempotent producers (:mod:`tidelog.storage.producer_state`): a leader append is checked against the
  producer state before anything is written; a duplicate writes nothing and returns the original offsets
  (``LogAppendInfo.duplicate``); a sequence or epoch error raises before the write. The state is
  snapshotted (``<offset>.snapshot``) at every roll and by :meth:`take_producer_snapshot` (clean shutdown),
  rebuilt on open and after truncation, and old snapshots go with their segments.
* Transactions: the producer state tracks open transactions; :meth:`append_control_marker` (or any leader
  append of a COMMIT/ABORT control batch) closes one. ``last_stable_offset`` = min(first offset of the
  oldest transaction open or completed above the high watermark, raised to the log start offset; high
  watermark): read_committed consumers read below it. An ABORT marker adds an entry to the active
  segment's ``.txnindex`` (:mod:`.txn_index`). Replaying the producer state (open, truncation) adds the
  entries a recovered or truncated segment lacks: on open, the replay starts at or below the first segment
  that recovery revalidated, so its index is rebuilt.
* Time comes in as ``now_ms``; nothing here reads a clock. Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import (
    ControlRecordType,
    InvalidTimestampError,
    RecordBatchHeader,
    RecordError,
    TimestampType,
    decode_batch,
    decode_control_record,
    encode_control_batch,
    iter_batch_headers,
    read_batch_header,
    set_log_append_time,
)
from tidelog.protocol.records import assign_offsets as _assign_offsets
from tidelog.storage import layout
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.checkpoint import fsync_dir
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import (
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from tidelog.storage.fetch_data import FetchDataInfo, FileRegion
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.flush_plan import FlushPlan, close_descriptors, open_dir_for_fsync
from tidelog.storage.producer_state import (
    AppendOrigin,
    AppendStatus,
    BatchMetadata,
    CompletedTxn,
    EndTxnMarker,
    ProducerStateManager,
)
from tidelog.storage.recovery import load_log
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_index import AbortedTransaction, AbortedTxn

__all__ = ["OffsetAndTimestamp", "PartitionLog"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_SEGMENTS: Final = 64
"""Inactive segments a standalone log keeps open (a LogManager shares one bound across its logs)."""


class OffsetAndTimestamp(NamedTuple):
    """A record's offset and timestamp (ListOffsets' answer)."""

    offset: int
    timestamp: int


_Predicate = Callable[[LogSegment, "LogSegment | None"], bool]
_SWAP_ORDER: Final = (
    layout.INDEX_FILE_SUFFIX,
    layout.TIME_INDEX_FILE_SUFFIX,
    layout.TXN_INDEX_FILE_SUFFIX,
    layout.LOG_FILE_SUFFIX,
)
"""A segment's files in the order the cleaner's swap renames them: the ``.log`` (what recovery looks for)
last."""


class PartitionLog:
    """One partition's log. Build with :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        limiter: OpenSegmentLimiter,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int | None,
        now_ms: int,
    ) -> None:
        self._dir = directory
        self._config = config
        self._limiter = limiter
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._high_watermark = log_start_offset
        self._last_flush_ms = now_ms
        self._clock_ms = now_ms
        self._roll_flush_offset: int | None = None
        self._dir_changes = 0  # files created, renamed or deleted (counted); fsynced up to _dir_synced
        self._dir_synced = 0
        self._truncations = 0  # truncate_to / truncate_fully_and_start_at calls that removed something
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self.producer_state = ProducerStateManager(directory)
        self.update_high_watermark(high_watermark if high_watermark is not None else log_start_offset)
        try:
            self.topic_partition: TopicPartition | None = layout.parse_partition_dir_name(directory.name)[0]
        except ValueError:
            self.topic_partition = None

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: int,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool,
        high_watermark: int | None = None,
        limiter: OpenSegmentLimiter | None = None,
    ) -> PartitionLog:
        """Load the log in ``directory`` (created if absent), recovering it unless ``clean_shutdown``.

        ``recovery_point`` and ``log_start_offset`` come from the log dir's checkpoints; ``high_watermark``
        from ``replication-offset-checkpoint`` (None: the log start offset).
        """
        limiter = limiter if limiter is not None else OpenSegmentLimiter(DEFAULT_MAX_OPEN_SEGMENTS)
        loaded = load_log(
            directory,
            config,
            limiter,
            now_ms=now_ms,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean_shutdown,
        )
        log = cls(
            directory,
            config,
            limiter,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            high_watermark=high_watermark,
            now_ms=now_ms,
        )
        if loaded.recovered_from is not None:
            # Kafka's recoverSegment: the state is rebuilt from at most the first revalidated segment on,
            # which restores that segment's transaction index (recovery emptied it).
            log.producer_state.delete_snapshots_after(loaded.recovered_from)
        log.load_producer_state(now_ms)
        return log

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self._dir.name}, start={self._log_start_offset}, hw={self._high_watermark}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )

    # ---- offsets and state ------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments in base-offset order (read-only view; the last is active)."""
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, bounded to ``[log_start_offset, log_end_offset]``; returns the value set."""
        self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)
        return self._high_watermark

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction open or completed above the high watermark, at least the
        log start offset; None if there is none (Kafka's ``firstUnstableOffset``)."""
        first = self.producer_state.first_unstable_offset
        return None if first is None else max(first, self._log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed reads stop: the first unstable offset if it is below the high watermark,
        else the high watermark (Kafka's ``lastStableOffset``)."""
        first = self.first_unstable_offset
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def update_config(self, config: LogConfig) -> None:
        """New topic configs (AlterConfigs); index sizes apply to segments created from now on."""
        self._config = config
        for segment in self._segments:
            segment.set_config(config)

    def _observe(self, now_ms: int | None) -> int:
        if now_ms is not None and now_ms > self._clock_ms:
            self._clock_ms = now_ms
        return self._clock_ms

    # ---- append -----------------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        leader_epoch: int,
        now_ms: int,
        assign_offsets: bool = True,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Append one or more whole batches (already checked by ``records.validate_batches``).

        With ``assign_offsets`` (leader): batches get offsets from the log end and ``leader_epoch``, rewritten
        in place (``records`` is copied first unless it is a writable buffer), and with LogAppendTime the
        broker's ``now_ms``. Without (follower): offsets must start at or above the log end and increase.
        May roll first; fsyncs afterwards once ``flush.messages`` are unflushed (``flush.ms`` is the periodic
        flush's, as in Kafka). ``origin`` COORDINATOR is for the broker's own writes with a producer id
        (transactional offset commits): epochs are checked, but not sequences or duplicates. COMMIT/ABORT control batches close the producer's transaction.
        """
        self._observe(now_ms)
        buf: bytearray | memoryview
        if isinstance(records, bytearray) or (isinstance(records, memoryview) and not records.readonly):
            buf = records
        else:
            buf = bytearray(records)
        total = len(buf)
        batches = list(iter_batch_headers(buf))
        consumed = batches[-1][0] + batches[-1][1].size_in_bytes if batches else 0
        if not batches or consumed != total:
            raise UnexpectedAppendOffsetError(f"append of {total} bytes is not a sequence of whole batches")
        config = self._config
        if total > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {total} bytes to {self._dir.name} exceeds segment.bytes={config.segment_bytes}"
            )
        log_end = self.log_end_offset
        producer_info = None
        markers = self._end_txn_markers(buf, batches)
        if assign_offsets:
            self._check_timestamps(batches, now_ms)
            producer_info = self.producer_state.prepare(
                [header for _, header in batches], markers, origin=origin
            )
            if producer_info.status is AppendStatus.DUPLICATE:
                assert producer_info.duplicate is not None
                return self._duplicate_info(producer_info.duplicate, batches)
            producer_info.raise_for_error()
            next_offset = log_end
            for position, header in batches:
                _assign_offsets(buf, position, next_offset, leader_epoch)
                if config.log_append_time:
                    set_log_append_time(buf, position, now_ms)
                next_offset += header.last_offset_delta + 1
            batches = [(position, read_batch_header(buf, position)) for position, _ in batches]
        else:
            self._check_assigned_offsets(batches, log_end)

        first_offset = batches[0][1].base_offset
        last_offset = batches[-1][1].last_offset
        max_timestamp = -1
        offset_of_max = -1
        for _, header in batches:
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset

        active = self._segments[-1]
        if first_offset > log_end or active.should_roll(
            messages_size=total, max_offset_in_messages=last_offset, now_ms=now_ms
        ):
            active = self.roll(now_ms, expected_next_offset=first_offset)
        active.append(memoryview(buf), batches, now_ms=now_ms)
        if producer_info is not None:
            log_append_time = now_ms if config.log_append_time else -1
            completed = self.producer_state.commit(
                producer_info, first_offset, log_append_time=log_append_time
            )
        else:
            replayed = (
                self.producer_state.replay(h, markers[i] if markers else None)
                for i, (_, h) in enumerate(batches)
            )
            completed = [txn for txn in replayed if txn is not None]
        self._index_completed_transactions(completed)

        if self.unflushed_messages >= config.flush_messages:
            self.flush(now_ms)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            max_timestamp=max_timestamp,
            shallow_offset_of_max_timestamp=offset_of_max,
            log_append_time=now_ms if assign_offsets and config.log_append_time else -1,
            log_start_offset=self._log_start_offset,
            shallow_count=len(batches),
            records_count=sum(header.records_count for _, header in batches),
            valid_bytes=total,
        )

    def append_control_marker(
        self,
        kind: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        leader_epoch: int,
        now_ms: int,
    ) -> LogAppendInfo:
        """Append a transaction marker as leader (Kafka's WriteTxnMarkers -> ``appendAsLeader`` with origin
        COORDINATOR): a control batch of one COMMIT or ABORT record stamped ``now_ms``.

        It closes the producer's open transaction (an ABORT gets a ``.txnindex`` entry), or completes nothing
        if the producer has none here. Raises ``InvalidProducerEpochError`` (INVALID_PRODUCER_EPOCH) for a
        ``producer_epoch`` below the producer's current one and ``TransactionCoordinatorFencedError``
        (TRANSACTION_COORDINATOR_FENCED) for a ``coordinator_epoch`` below the last marker's; nothing is
        written then. The caller advances the high watermark afterwards, as for :meth:`append`.
        """
        batch = encode_control_batch(
            kind,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            base_offset=self.log_end_offset,
            timestamp_ms=now_ms,
            partition_leader_epoch=leader_epoch,
        )
        return self.append(
            bytearray(batch), leader_epoch=leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR
        )

    @staticmethod
    def _end_txn_markers(
        buf: bytearray | memoryview, batches: Sequence[tuple[int, RecordBatchHeader]]
    ) -> list[EndTxnMarker | None] | None:
        """The end marker of each control batch (None elsewhere); None when there is no control batch."""
        if not any(header.is_control for _, header in batches):
            return None
        markers: list[EndTxnMarker | None] = []
        for position, header in batches:
            marker = None
            if header.is_control and header.records_count > 0:
                _, records = decode_batch(buf, position)
                if records:
                    try:
                        marker = EndTxnMarker(*decode_control_record(records[0]))
                    except RecordError:
                        marker = None
            markers.append(marker)
        return markers

    def _index_completed_transactions(self, completed: Sequence[CompletedTxn]) -> None:
        """Add each aborted transaction to the ``.txnindex`` of the segment holding its marker, unless that
        index has it already (a replay over a segment whose index survived)."""
        for txn in completed:
            if not txn.is_aborted:
                continue
            index = self._segments[self._segment_index(txn.last_offset)].txn_index
            last = index.last_offset
            if last is None or last < txn.last_offset:
                index.append(
                    AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
                )

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTransaction]:
        """``(producer_id, first_offset)`` of the aborted transactions that overlap ``[start_offset,
        upper_bound_offset)`` (what a read_committed fetch of that range answers with), in marker order.

        Kafka's ``collectAbortedTransactions``: the ``.txnindex`` files from the segment holding
        ``start_offset`` on, until an entry's last stable offset reaches the upper bound.
        """
        found: list[AbortedTransaction] = []
        if upper_bound_offset <= start_offset:
            return found
        for segment in self._segments[self._segment_index(start_offset) :]:
            entries, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            found.extend(entry.aborted_transaction for entry in entries)
            if complete:
                break
        return found

    def _duplicate_info(
        self, original: BatchMetadata, batches: Sequence[tuple[int, RecordBatchHeader]]
    ) -> LogAppendInfo:
        """The answer to a retried idempotent batch: the original batch's offsets, nothing written."""
        return LogAppendInfo(
            first_offset=original.first_offset,
            last_offset=original.last_offset,
            max_timestamp=original.timestamp,
            shallow_offset_of_max_timestamp=original.last_offset,
            log_append_time=original.timestamp if self._config.log_append_time else -1,
            log_start_offset=self._log_start_offset,
            shallow_count=len(batches),
            records_count=sum(header.records_count for _, header in batches),
            valid_bytes=0,
            duplicate=True,
        )

    def _check_timestamps(self, batches: Sequence[tuple[int, RecordBatchHeader]], now_ms: int) -> None:
        """Kafka's ``message.timestamp.before.max.ms`` / ``after.max.ms`` for create-time topics."""
        config = self._config
        if config.log_append_time:
            return
        for _, header in batches:
            if header.timestamp_type != TimestampType.CREATE_TIME:
                continue
            low = header.base_timestamp if header.base_timestamp >= 0 else header.max_timestamp
            if 0 <= low < now_ms - config.message_timestamp_before_max_ms:
                raise InvalidTimestampError(
                    f"timestamp {low} is more than message.timestamp.before.max.ms="
                    f"{config.message_timestamp_before_max_ms} before the broker's time {now_ms}"
                )
            if header.max_timestamp > now_ms + config.message_timestamp_after_max_ms:
                raise InvalidTimestampError(
                    f"timestamp {header.max_timestamp} is more than message.timestamp.after.max.ms="
                    f"{config.message_timestamp_after_max_ms} after the broker's time {now_ms}"
                )

    @staticmethod
    def _check_assigned_offsets(batches: Sequence[tuple[int, RecordBatchHeader]], log_end: int) -> None:
        expected = log_end
        for _, header in batches:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"batch base offset {header.base_offset} is below the expected {expected} (log end {log_end})"
                )
            expected = header.next_offset

    def roll(self, now_ms: int, *, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log_end_offset)``.

        An empty active segment at that offset is kept as it is; an empty one below it is replaced. The
        segments rolled past are fsynced by the next periodic flush (:meth:`plan_flush`).
        """
        self._observe(now_ms)
        log_end = self.log_end_offset
        new_base = max(expected_next_offset if expected_next_offset is not None else log_end, log_end)
        active = self._segments[-1]
        if active.size == 0:
            if active.base_offset == new_base:
                return active
            self._segments.pop()
            self._bases.pop()
            active.delete_files()
        else:
            active.mark_inactive()
            self._roll_flush_offset = new_base
        segment = LogSegment.create(self._dir, new_base, self._config, self._limiter, now_ms=now_ms)
        self._segments.append(segment)
        self._bases.append(new_base)
        self._dir_changes += 1
        self.producer_state.update_map_end_offset(new_base)
        self.producer_state.take_snapshot()
        logger.debug("%s: rolled new segment at offset %d", self._dir.name, new_base)
        return segment

    # ---- read -------------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset``, as file regions.

        At most ``max_bytes`` bytes, except that with ``min_one_batch`` the first batch is returned whole
        whatever its size; no batch whose base offset is >= ``max_offset`` (e.g. the high watermark). Reads
        on into later segments while bytes remain. Raises :class:`OffsetOutOfRangeError` unless
        ``log_start_offset <= fetch_offset <= log_end_offset``; at the log end the result is empty.
        """
        log_end = self.log_end_offset
        if not self._log_start_offset <= fetch_offset <= log_end:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} is outside [{self._log_start_offset}, {log_end}] of {self._dir.name}"
            )
        limit = log_end if max_offset is None else min(max_offset, log_end)
        regions: list[FileRegion] = []
        total = 0
        next_offset = fetch_offset
        segments = self._segments
        index = self._segment_index(fetch_offset)
        while next_offset < limit and index < len(segments):
            segment = segments[index]
            upper = segments[index + 1].base_offset if index + 1 < len(segments) else log_end
            result = segment.read(
                next_offset,
                max_bytes - total,
                max_offset=limit,
                upper_bound_offset=upper,
                min_one_batch=min_one_batch and not regions,
            )
            index += 1
            if result is None:
                if regions or segment.translate_offset(next_offset) is not None:
                    break  # the next batch is excluded (max_offset or max_bytes)
                continue  # nothing at/after next_offset in this segment
            region, next_offset, reached_end = result
            regions.append(region)
            total += region.nbytes
            if not reached_end or total >= max_bytes:
                break
            next_offset = max(next_offset, upper)
        return FetchDataInfo(fetch_offset, tuple(regions), total, next_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """The first record at/after the log start whose timestamp is >= ``timestamp_ms`` (ListOffsets)."""
        for segment in self._segments:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
                if found is not None:
                    return OffsetAndTimestamp(*found)
        return None

    def max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        """The first record carrying the log's largest timestamp (ListOffsets MAX_TIMESTAMP), None if none."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        found = best.max_timestamp_record()
        return OffsetAndTimestamp(*found) if found is not None else None

    # ---- truncation and deletion ------------------------------------------------------------------

    def truncate_to(self, offset: int, *, now_ms: int | None = None) -> bool:
        """Remove everything at and above ``offset`` (a batch holding ``offset`` goes whole). Returns whether
        anything was removed. Below the first segment the log starts over at ``offset``."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        now = self._observe(now_ms)
        if offset >= self.log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms=now)
            return True
        self._truncations += 1
        doomed = [segment for segment in self._segments if segment.base_offset > offset]
        self._delete_segments(doomed, now)
        active = self._segments[-1]
        if not active.is_active:
            active.mark_active()
        active.truncate_to(offset)
        log_end = self.log_end_offset
        self._recovery_point = min(self._recovery_point, log_end)
        self._log_start_offset = min(self._log_start_offset, log_end)
        self._high_watermark = min(self._high_watermark, log_end)
        if self._roll_flush_offset is not None and self._roll_flush_offset > log_end:
            self._roll_flush_offset = None
        self.load_producer_state(now)
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Delete every segment; the log restarts empty at ``offset`` (start, end, high watermark)."""
        now = self._observe(now_ms)
        self._truncations += 1
        self._delete_segments(list(self._segments), now)
        segment = LogSegment.create(self._dir, offset, self._config, self._limiter, now_ms=now)
        self._segments = [segment]
        self._bases = [offset]
        self._dir_changes += 1
        self._log_start_offset = self._recovery_point = self._high_watermark = offset
        self._roll_flush_offset = None
        self.producer_state.truncate_fully_and_start_at(offset)

    def delete_records_before(self, offset: int, *, now_ms: int | None = None) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (at most the high watermark, else
        :class:`OffsetOutOfRangeError`) and delete the segments entirely below it. Returns the log start."""
        now = self._observe(now_ms)
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self._dir.name} to {offset}, "
                f"above the high watermark {self._high_watermark}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self.producer_state.on_log_start_offset_incremented(offset)
            self._delete_old_segments(self._start_offset_breached, now)
        return self._log_start_offset

    def delete_retention(self, now_ms: int) -> int:
        """Delete the segments past retention; returns how many. Kafka's ``deleteOldSegments``: segments
        below the log start offset always; with ``cleanup.policy`` delete also the oldest segments while
        ``retention.bytes`` is exceeded by at least their size, and those whose largest timestamp is more than
        ``retention.ms`` before ``now_ms``. Only segments entirely below the high watermark, oldest first."""
        self._observe(now_ms)
        deleted = self._delete_old_segments(self._start_offset_breached, now_ms)
        if self._config.delete_enabled:
            deleted += self._delete_retention_size_breached(now_ms)
            deleted += self._delete_retention_ms_breached(now_ms)
        return deleted

    def _start_offset_breached(self, _segment: LogSegment, next_segment: LogSegment | None) -> bool:
        return next_segment is not None and next_segment.base_offset <= self._log_start_offset

    def _delete_retention_ms_breached(self, now_ms: int) -> int:
        retention_ms = self._config.retention_ms
        if retention_ms < 0:
            return 0
        return self._delete_old_segments(
            lambda segment, _next: now_ms - segment.largest_timestamp > retention_ms, now_ms
        )

    def _delete_retention_size_breached(self, now_ms: int) -> int:
        retention_bytes = self._config.retention_bytes
        size = self.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = size - retention_bytes

        def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal excess
            if excess - segment.size >= 0:
                excess -= segment.size
                return True
            return False

        return self._delete_old_segments(breached, now_ms)

    def _delete_old_segments(self, predicate: _Predicate, now_ms: int) -> int:
        segments = self._segments
        deletable: list[LogSegment] = []
        for i, segment in enumerate(segments):
            next_segment = segments[i + 1] if i + 1 < len(segments) else None
            upper = next_segment.base_offset if next_segment is not None else self.log_end_offset
            last_and_empty = next_segment is None and segment.size == 0
            if self._high_watermark >= upper and not last_and_empty and predicate(segment, next_segment):
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            self.roll(now_ms)
        self._delete_segments(deletable, now_ms)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.producer_state.on_log_start_offset_incremented(self._log_start_offset)
        self.producer_state.delete_snapshots_before(self._segments[0].base_offset)
        return len(deletable)

    def _delete_segments(self, doomed: Sequence[LogSegment], now_ms: int) -> None:
        """Take segments out of the log; rename their files ``.deleted`` (unlinked after the delay)."""
        if not doomed:
            return
        gone = {id(segment) for segment in doomed}
        self._segments = [segment for segment in self._segments if id(segment) not in gone]
        self._bases = [segment.base_offset for segment in self._segments]
        for segment in doomed:
            segment.rename_for_deletion()
            if self._config.file_delete_delay_ms == 0:
                segment.delete_files()
            else:
                self._pending_deletes.append((now_ms + self._config.file_delete_delay_ms, segment))
        self._dir_changes += 1

    def remove_deleted_files(self, now_ms: int) -> int:
        """Unlink the ``.deleted`` files whose delay has passed; returns how many segments went."""
        self._observe(now_ms)
        due = [segment for deadline, segment in self._pending_deletes if deadline <= now_ms]
        self._pending_deletes = [(deadline, s) for deadline, s in self._pending_deletes if deadline > now_ms]
        for segment in due:
            segment.delete_files()
        return len(due)

    # ---- compaction -------------------------------------------------------------------------------

    def replace_segments(
        self, replacements: Sequence[tuple[int, Sequence[LogSegment]]], *, now_ms: int
    ) -> tuple[int, int]:
        """Swap the log cleaner's output in (Kafka's ``replaceSegments``); returns ``(swapped, rejected)``.

        Each ``(base_offset, old)``, in base offset order, names a finished ``<base_offset>.log.cleaned``
        segment (and its ``.cleaned`` indexes) replacing the consecutive inactive segments ``old``. Leading
        replacements whose segments all left the log meanwhile (retention) are dropped. If any other one no
        longer fits the log (a segment gone, now active, not consecutive), all of them are rejected: they
        were cleaned together. The ``.cleaned`` files of dropped and rejected ones are removed first. Then,
        each step leaving a log that recovery completes (:mod:`.recovery`): every ``.cleaned`` file becomes
        ``.swap`` (the ``.log`` last) and the directory is fsynced; for each replacement in order, the old
        segments' files become ``.deleted`` (unlinked after ``file.delete.delay.ms``; reads already handed
        out keep reading them) and the ``.swap`` files become the live segment; the directory is fsynced.
        """
        now = self._observe(now_ms)
        directory = self._dir
        position = {id(segment): i for i, segment in enumerate(self._segments)}
        remaining = list(replacements)
        dropped: list[int] = []
        while remaining and all(id(segment) not in position for segment in remaining[0][1]):
            dropped.append(remaining.pop(0)[0])
        accepted: list[tuple[int, Sequence[LogSegment]]] = []
        for base, old in remaining:
            places = [position.get(id(segment)) for segment in old]
            first = places[0] if places else None
            if (
                first is None
                or places != list(range(first, first + len(old)))
                or first + len(old) >= len(self._segments)
                or old[0].base_offset != base
                or not layout.log_file(directory, base, layout.CLEANED_FILE_SUFFIX).exists()
            ):
                break
            accepted.append((base, old))
        rejected = 0
        if len(accepted) < len(remaining):
            rejected = len(remaining)
            dropped.extend(base for base, _ in remaining)
            accepted = []
        for base in dropped:
            for suffix in _SWAP_ORDER:
                cleaned = layout.file_name(base, suffix + layout.CLEANED_FILE_SUFFIX)
                (directory / cleaned).unlink(missing_ok=True)
        if not accepted:
            return 0, rejected
        for base, _ in accepted:
            self._rename_segment_files(base, layout.CLEANED_FILE_SUFFIX, layout.SWAP_FILE_SUFFIX)
        fsync_dir(directory)
        for base, old in accepted:
            self._delete_segments(old, now)
            self._rename_segment_files(base, layout.SWAP_FILE_SUFFIX, "")
            segment = LogSegment.open(directory, base, self._config, self._limiter, now_ms=now)
            index = bisect.bisect_left(self._bases, base)
            self._segments.insert(index, segment)
            self._bases.insert(index, base)
        fsync_dir(directory)
        self._dir_synced = self._dir_changes
        return len(accepted), rejected

    def _rename_segment_files(self, base_offset: int, from_suffix: str, to_suffix: str) -> None:
        """Rename the files of segment ``base_offset`` that carry the extra suffix ``from_suffix``."""
        for suffix in _SWAP_ORDER:
            source = self._dir / layout.file_name(base_offset, suffix + from_suffix)
            if source.exists():
                source.replace(self._dir / layout.file_name(base_offset, suffix + to_suffix))

    # ---- producer state ---------------------------------------------------------------------------

    def _batches_from(self, offset: int) -> Iterator[tuple[RecordBatchHeader, EndTxnMarker | None]]:
        for segment in self._segments[self._segment_index(offset) :]:
            for position, header in segment.batches():
                if header.last_offset >= offset:
                    found = segment.end_txn_marker(position, header) if header.is_control else None
                    yield header, EndTxnMarker(*found) if found is not None else None

    def load_producer_state(self, now_ms: int) -> None:
        """Rebuild the producer state: latest snapshot at or below the log end, then a replay of the batch
        headers (and end markers) after it, which also restores the ``.txnindex`` entries of the replayed
        range that are missing."""
        completed = self.producer_state.load(
            log_start_offset=self._log_start_offset,
            log_end_offset=self.log_end_offset,
            batches_from=self._batches_from,
            now_ms=now_ms,
        )
        self._index_completed_transactions(completed)
        self.producer_state.on_log_start_offset_incremented(self._log_start_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)

    def take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end (clean shutdown), durably."""
        self.producer_state.update_map_end_offset(self.log_end_offset)
        self.producer_state.take_snapshot()

    def remove_expired_producers(self, now_ms: int, producer_id_expiration_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many."""
        self._observe(now_ms)
        return self.producer_state.remove_expired_producers(now_ms, producer_id_expiration_ms)

    # ---- durability -------------------------------------------------------------------------------

    def flush(self, now_ms: int | None = None, *, up_to_offset: int | None = None) -> None:
        """fsync the segments holding ``[recovery_point, up_to_offset)`` (default: the log end) and the
        directory if files came or went; the recovery point becomes ``up_to_offset``. Synchronous, on the
        owner's thread (shutdown, ``flush.messages``); the broker's periodic flush uses :meth:`plan_flush`."""
        if now_ms is not None:
            self._observe(now_ms)
            self._last_flush_ms = now_ms
        log_end = self.log_end_offset
        target = log_end if up_to_offset is None else min(up_to_offset, log_end)
        if target > self._recovery_point:
            for segment in self._segments_to_flush(target):
                segment.flush()
        if self._dir_changes != self._dir_synced:
            changes = self._dir_changes
            fsync_dir(self._dir)
            self._dir_synced = changes
        self._recovery_point = max(self._recovery_point, target)

    def _segments_to_flush(self, target: int) -> list[LogSegment]:
        """The segments holding offsets in ``[recovery_point, target)``."""
        segments = self._segments
        log_end = self.log_end_offset
        return [
            segment
            for i, segment in enumerate(segments)
            if (segments[i + 1].base_offset if i + 1 < len(segments) else log_end) > self._recovery_point
            and segment.base_offset < target
        ]

    def plan_flush(self, now_ms: int) -> FlushPlan | None:
        """Plan the periodic flush (Kafka's ``flushDirtyLogs``); None if nothing is due or left to fsync.

        Due: the segments that rolled, and everything once ``flush.ms`` passed since the last flush or
        ``flush.messages`` are unflushed. The plan holds new descriptors of the segments holding
        ``[recovery_point, target_offset)`` and of the directory if files came or went; run
        :meth:`FlushPlan.execute` on any thread, then :meth:`complete_flush` here. Nothing changes until
        then (another plan made meanwhile covers the same again). See :mod:`.flush_plan`.
        """
        self._observe(now_ms)
        config = self._config
        log_end = self.log_end_offset
        if (
            self.unflushed_messages >= config.flush_messages
            or now_ms - self._last_flush_ms >= config.flush_ms
        ):
            target, flush_time_ms = log_end, now_ms
        elif self._roll_flush_offset is not None:
            target, flush_time_ms = min(self._roll_flush_offset, log_end), None
        else:
            return None
        dir_generation = self._dir_changes
        if target <= self._recovery_point and dir_generation == self._dir_synced:
            self._record_flush(target, flush_time_ms)  # nothing left to fsync
            return None
        descriptors: list[int] = []
        txn_writes = []
        dir_fd = None
        try:
            if target > self._recovery_point:
                for segment in self._segments_to_flush(target):
                    opened = segment.open_for_fsync()
                    descriptors.extend(opened.descriptors)
                    if opened.txn_writes is not None:
                        txn_writes.append((segment.txn_index, opened.txn_writes))
            if dir_generation != self._dir_synced:
                dir_fd = open_dir_for_fsync(self._dir)
        except BaseException:
            close_descriptors(descriptors)
            raise
        return FlushPlan(
            log_name=self._dir.name,
            target_offset=target,
            descriptors=tuple(descriptors),
            dir_descriptor=dir_fd,
            owner=self,
            truncations=self._truncations,
            flush_time_ms=flush_time_ms,
            dir_generation=dir_generation,
            txn_writes=tuple(txn_writes),
        )

    def complete_flush(self, plan: FlushPlan) -> bool:
        """Record an executed :meth:`plan_flush`: the recovery point rises to its target offset, the files
        and directory changes it covered count as fsynced, a due roll flush it covered is done. Returns
        False, changing nothing, if the log was closed or truncated since the plan (what it fsynced may
        no longer be what the log holds below the target). ``ValueError`` for a plan of another log or one
        that did not execute successfully."""
        if plan.owner is not self:
            raise ValueError(f"flush plan of {plan.log_name} completed on {self._dir.name}")
        if not plan.executed:
            raise ValueError(f"flush plan of {plan.log_name} did not execute: nothing was made durable")
        if self._closed or plan.truncations != self._truncations:
            return False
        self._dir_synced = max(self._dir_synced, plan.dir_generation)
        for txn_index, writes in plan.txn_writes:
            txn_index.mark_synced(writes)
        self._record_flush(min(plan.target_offset, self.log_end_offset), plan.flush_time_ms)
        return True

    def _record_flush(self, target: int, flush_time_ms: int | None) -> None:
        self._recovery_point = max(self._recovery_point, target)
        if flush_time_ms is not None:
            self._last_flush_ms = max(self._last_flush_ms, flush_time_ms)
        if self._roll_flush_offset is not None and self._roll_flush_offset <= self._recovery_point:
            self._roll_flush_offset = None

    def maybe_flush(self, now_ms: int) -> bool:
        """The periodic flush done synchronously: :meth:`plan_flush`, execute, :meth:`complete_flush`.
        Returns whether it fsynced."""
        plan = self.plan_flush(now_ms)
        if plan is None:
            return False
        with plan:
            plan.execute()
        self.complete_flush(plan)
        return True

    def close(self) -> None:
        """Finish every segment's indexes and release all handles (no fsync: flush first for that).
        Pending ``.deleted`` files are removed now."""
        if self._closed:
            return
        self._closed = True
        for _, segment in self._pending_deletes:
            segment.delete_files()
        self._pending_deletes = []
        for segment in self._segments:
            segment.close()

    @property
    def closed(self) -> bool:
        return self._closed
