"""The log of one partition: ordered segments in ``<log.dir>/<topic>-<partition>/`` (Kafka's UnifiedLog/LocalLog).

Invariants:

* ``log_start_offset <= high_watermark <= log_end_offset`` and ``recovery_point <= log_end_offset``; all
  offsets are absolute. Segments are sorted by base offset; the last one is the *active* segment, the only
  one appended to; every offset of a segment is below the next segment's base offset.
* Offsets in a log that is not compacted are contiguous. A follower's append (:meth:`append_as_follower`)
  starts exactly at the log end (in a compacted log at or above it: the leader's cleaner leaves gaps); an
  append with offsets that leaves a gap (``append(assign_offsets=False)``) starts a new segment at its
  first offset.
* Leader epochs (:mod:`.leader_epoch_cache`, ``leader-epoch-checkpoint``): every append records the
  partition leader epoch of its batches where it rises, the file written before the batches; truncation
  removes the epochs starting at or after the new log end, a rising log start offset moves the first epoch
  up, :meth:`truncate_fully_and_start_at` empties it, each written at once. Loading trusts the file cut to
  the log, or rebuilds a missing or damaged one from the batches (:mod:`.recovery` step 6).
* Replication: the high watermark is whatever the owner sets within ``[log_start_offset, log_end_offset]``
  (a follower's lags its log end, and is checkpointed and loaded as it is, capped at the log end);
  :meth:`truncate_to` brings the producer state, ``.txnindex``, leader epochs and high watermark down with
  the log.
* Data written by :meth:`PartitionLog.append` is in the page cache when it returns: a process crash loses
  none of it. fsync happens in :meth:`append` once ``flush.messages`` are unflushed, on :meth:`flush`, and
  in the periodic flush (:meth:`plan_flush` / :meth:`complete_flush` around a :class:`FlushPlan` executed
  on another thread, or :meth:`maybe_flush` doing all three) for segments that rolled and once ``flush.ms``
  passed. The recovery point advances only after the fsync returned, never past what it covered: a flush
  completed after the log was closed or truncated since its plan is dropped.
* Compaction (:mod:`.cleaner`) replaces inactive segments below the recovery point by
  :meth:`replace_segments` (:mod:`.segment_swap`: ``.cleaned`` -> ``.swap`` -> live, crash-safe); offsets
  never change, gaps appear.
* Retention (:mod:`.retention`) picks the oldest segments past the log start offset, ``retention.bytes``
  or ``retention.ms``, all below the high watermark. Segments leave by rename to ``.deleted`` and are
  unlinked by :meth:`remove_deleted_files` after ``file.delete.delay.ms`` (:mod:`.segment_deletion`);
  regions already handed out stay readable meanwhile.
* The active segment is never deleted in place: retention that covers every segment rolls first.
* Idempotent producers (:mod:`tidelog.storage.producer_state`): a leader append is checked against the
  producer state before anything is written (a follower's with origin REPLICATION: no sequence checks); a
  duplicate writes nothing and returns the original offsets (``LogAppendInfo.duplicate``); a sequence or
  epoch error raises before the write. The state is
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

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import ControlRecordType, RecordBatchHeader, encode_control_batch
from tidelog.protocol.records_header import CONTROL_BIT
from tidelog.storage import layout, log_validator, retention, segment_swap
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.checkpoint import fsync_dir
from tidelog.storage.config import LONG_MAX, LogConfig
from tidelog.storage.errors import OffsetOutOfRangeError, RecordBatchTooLargeError
from tidelog.storage.fetch_data import FetchDataInfo, FileRegion
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.flush_plan import FlushPlan, FlushState, close_descriptors, open_dir_for_fsync
from tidelog.storage.leader_epoch_cache import (
    EpochEndOffset,
    EpochEntry,
    LeaderEpochFileCache,
    OffsetTruncationState,
)
from tidelog.storage.log_segments import LogSegments
from tidelog.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    AppendStatus,
    BatchMetadata,
    CompletedTxn,
    EndTxnMarker,
    ProducerAppendInfo,
    ProducerStateManager,
)
from tidelog.storage.recovery import load_log
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_deletion import DeletedSegments
from tidelog.storage.txn_index import AbortedTransaction, AbortedTxn

__all__ = ["OffsetAndTimestamp", "PartitionLog"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_SEGMENTS: Final = 64
"""Inactive segments a standalone log keeps open (a LogManager shares one bound across its logs)."""


class OffsetAndTimestamp(NamedTuple):
    """A record's offset and timestamp (ListOffsets' answer)."""

    offset: int
    timestamp: int


class PartitionLog:
    """One partition's log. Build with :meth:`open`.

    What a replica does with it (Kafka's ``Partition`` / ``AbstractFetcherThread`` calls, in Kafka's
    order; the server owns the when and the fencing by leader epoch):

    * Becoming leader in epoch ``e``: :meth:`maybe_assign_epoch_start_offset` ``(e, log_end_offset)``; then
      :meth:`append` / :meth:`append_control_marker` with ``leader_epoch=e``, and
      :meth:`maybe_increment_high_watermark` as the ISR's log end offsets rise. OffsetForLeaderEpoch
      answers :meth:`end_offset_for_epoch`; a follower's fetch with ``LastFetchedEpoch`` ``l`` at offset
      ``f`` has diverged when ``end_offset_for_epoch(l)`` has an epoch below ``l`` or an end offset below
      ``f`` (answer that pair as its DivergingEpoch).
    * Following: fetch at :attr:`log_end_offset` with ``LastFetchedEpoch`` :attr:`latest_epoch`. On a
      DivergingEpoch (or the leader's OffsetForLeaderEpoch answer) ``d``:
      :meth:`offset_truncation_state` ``(d, fetch_offset=high_watermark)``, then :meth:`truncate_to` its
      offset; not ``truncation_completed``: ask again with the epoch now latest (KIP-279). Fetched bytes go
      to :meth:`append_as_follower` whole; then :meth:`update_high_watermark` ``(leader's high
      watermark)`` (capped at the log end) and :meth:`delete_records_before` ``(min(leader's log start
      offset, high_watermark))`` when it rose. OFFSET_OUT_OF_RANGE with the leader's log start above the log
      end: :meth:`truncate_fully_and_start_at` that offset.
    * Durable state: the ``leader-epoch-checkpoint`` is written by the log itself; the high watermark,
      recovery point and log start offset by :class:`~tidelog.storage.log_manager.LogManager`'s
      checkpoints (a follower's high watermark is checkpointed as it is, lagging its log end).
    """

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
        leader_epochs: LeaderEpochFileCache | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self._dir = directory
        self._config = config
        self._limiter = limiter
        self._segments = LogSegments(segments)
        self._log_start_offset = log_start_offset
        self._high_watermark = log_start_offset
        self._clock_ms = now_ms
        self._flushes = FlushState(recovery_point=recovery_point, now_ms=now_ms)
        self._deleted = DeletedSegments()
        self._closed = False
        self.producer_state = ProducerStateManager(
            directory, producer_id_expiration_ms=producer_id_expiration_ms
        )
        self._epochs = (
            leader_epochs
            if leader_epochs is not None
            else LeaderEpochFileCache(directory / layout.LEADER_EPOCH_CHECKPOINT_FILE)
        )
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
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> PartitionLog:
        """Load the log in ``directory`` (created if absent), recovering it unless ``clean_shutdown``.

        ``recovery_point`` and ``log_start_offset`` come from the log dir's checkpoints; ``high_watermark``
        from ``replication-offset-checkpoint`` (None: the log start offset), capped at the log end offset
        the load ends with (a follower's may lag it; after an unclean shutdown it may name offsets the
        recovery cut). The leader epoch cache is loaded, or rebuilt, as :mod:`.recovery` step 6 says.
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
            leader_epochs=loaded.leader_epochs,
            producer_id_expiration_ms=producer_id_expiration_ms,
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
        return self._segments.active.next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._flushes.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._flushes.last_flush_ms

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._flushes.recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments in base-offset order (read-only view; the last is active)."""
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, bounded to ``[log_start_offset, log_end_offset]``; returns the value set.
        A follower sets min(leader's high watermark, its log end offset) after each fetch, lower than
        before after a truncation (Kafka's ``updateHighWatermark``)."""
        return self._set_high_watermark(offset, self.log_end_offset)

    def _set_high_watermark(self, offset: int, log_end_offset: int) -> int:
        self._high_watermark = min(max(offset, self._log_start_offset), log_end_offset)
        self.producer_state.on_high_watermark_updated(self._high_watermark)
        return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int, *, log_end_offset: int | None = None) -> bool:
        """A leader's high watermark only rises (Kafka's ``maybeIncrementHighWatermark``): set ``offset`` if
        it is above the current one; returns whether it was. ``ValueError`` above the log end offset
        (``log_end_offset``: as the caller has just read it, not read again)."""
        log_end = self.log_end_offset if log_end_offset is None else log_end_offset
        if offset > log_end:
            raise ValueError(
                f"high watermark {offset} of {self._dir.name} above the log end offset {log_end}"
            )
        if offset <= self._high_watermark:
            return False
        # _set_high_watermark without its call (after every leader append); offset <= log_end already
        self._high_watermark = high_watermark = max(offset, self._log_start_offset)
        self.producer_state.on_high_watermark_updated(high_watermark)
        return True

    # ---- leader epochs ----------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int | None:
        """The leader epoch of the log's last epoch entry (a follower's ``LastFetchedEpoch``), None if the
        log has none."""
        return self._epochs.latest_epoch

    @property
    def leader_epoch_entries(self) -> tuple[EpochEntry, ...]:
        """``(epoch, start_offset)`` of every leader epoch in the log, oldest first (the
        ``leader-epoch-checkpoint``)."""
        return self._epochs.entries

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch's answer, and a leader's test for a fetch's DivergingEpoch: the largest epoch
        at most ``leader_epoch`` and its end offset (the log end offset for the latest epoch), else
        ``(-1, -1)`` (:meth:`LeaderEpochFileCache.end_offset_for`)."""
        return self._epochs.end_offset_for(leader_epoch, self.log_end_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch of the batch holding ``offset`` (ListOffsets' ``leader_epoch``), None below the
        first epoch entry."""
        return self._epochs.epoch_for_offset(offset)

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Record that ``leader_epoch`` starts at ``start_offset`` (Kafka's ``maybeAssignEpochStartOffset``: a
        broker becoming leader calls it with its log end offset before it appends, so OffsetForLeaderEpoch
        answers for the epoch before at once); written at once if it changed the cache."""
        self._epochs.assign(leader_epoch, start_offset)
        self._epochs.write()

    def offset_truncation_state(self, leader: EpochEndOffset, *, fetch_offset: int) -> OffsetTruncationState:
        """Where this log, as a follower, truncates once the leader answered ``leader`` (OffsetForLeaderEpoch
        for :attr:`latest_epoch`, or a fetch's DivergingEpoch); ``fetch_offset`` is used when the leader
        knew no end offset (Kafka: the follower's high watermark). See
        :meth:`LeaderEpochFileCache.offset_truncation_state`; :meth:`truncate_to` does the truncation."""
        return self._epochs.offset_truncation_state(
            leader, log_end_offset=self.log_end_offset, fetch_offset=fetch_offset
        )

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

    def offset_snapshot(self) -> tuple[int, int, int]:
        """(high watermark, last stable offset, log start offset): what every fetch answer carries, in one
        call (issue 17: a consumer's full fetch asks it of each of its partitions, each poll)."""
        high_watermark = self._high_watermark
        log_start = self._log_start_offset
        first = self.producer_state.first_unstable_offset
        if first is None:
            return high_watermark, high_watermark, log_start
        return high_watermark, min(max(first, log_start), high_watermark), log_start

    def update_config(self, config: LogConfig) -> None:
        """New topic configs (AlterConfigs); index sizes apply to segments created from now on."""
        self._config = config
        for segment in self._segments:
            segment.set_config(config)
        self._flushes.changed()

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
        headers: Sequence[RecordBatchHeader] | None = None,
    ) -> LogAppendInfo:
        """Append one or more whole batches as leader (already checked by ``records.validate_batches``; the
        log's own checks and rewrites are :mod:`.log_validator`'s).

        Batches get offsets from the log end and ``leader_epoch``, rewritten in place (``records`` is
        copied first unless it is a writable buffer), and with LogAppendTime the broker's ``now_ms``; a new
        ``leader_epoch`` (>= 0) starts at the first offset in the leader epoch cache, written before the
        batches. May roll first; fsyncs afterwards once ``flush.messages`` are unflushed (``flush.ms`` is
        the periodic flush's, as in Kafka). ``origin`` COORDINATOR is for the broker's own writes with a
        producer id (transactional offset commits): epochs are checked, but not sequences or duplicates.
        COMMIT/ABORT control batches close the producer's transaction.

        ``assign_offsets=False`` writes the batches at the offsets they carry, checking only that they do
        not go backwards (a gap starts a new segment), and replays them into the producer state without
        checks; their partition leader epochs go to the cache. Tools and tests use it; a replica uses
        :meth:`append_as_follower`.

        ``headers``: what ``records.validate_batches`` returned for ``records`` (so they fill it exactly),
        not parsed again.
        """
        if now_ms > self._clock_ms:  # noqa: PLR1730 - _observe without its call or max() (every append)
            self._clock_ms = now_ms
        buf: bytearray | memoryview
        if not assign_offsets:
            buf = records if isinstance(records, memoryview) else memoryview(records)
        elif isinstance(records, bytearray) or (isinstance(records, memoryview) and not records.readonly):
            buf = records
        else:
            buf = bytearray(records)
        if headers is None:
            batches = log_validator.whole_batches(buf)
        elif len(headers) == 1:  # a produce's one batch (v3+): positioned(headers) without its call
            batches = [(0, headers[0])]
        else:
            batches = log_validator.positioned(headers)
        config = self._config
        if len(buf) > config.segment_bytes:
            self._check_append_size(len(buf))
        log_end = self._segments.active.next_offset  # log_end_offset without its call
        if len(batches) == 1 and not batches[0][1].attributes & CONTROL_BIT:
            markers = (
                None  # end_txn_markers' answer for one batch that is not a control batch, without its calls
            )
        else:
            markers = log_validator.end_txn_markers(buf, batches)
        if not assign_offsets:
            log_validator.check_assigned_offsets(batches, log_end)
            self._assign_batch_epochs(batches)
            return self._write(
                buf, batches, None, markers, now_ms=now_ms, log_append_time=-1, log_end=log_end
            )
        append_time = config.log_append_time
        if not append_time and (
            config.message_timestamp_before_max_ms != LONG_MAX
            or config.message_timestamp_after_max_ms != LONG_MAX
        ):  # at Kafka's defaults (both LONG_MAX) no int64 timestamp is out of bounds: nothing to check
            log_validator.check_timestamps(config, batches, now_ms)
        producer_info = self.producer_state.prepare(
            headers if headers is not None else [header for _, header in batches], markers, origin=origin
        )
        if producer_info.status is AppendStatus.DUPLICATE:
            assert producer_info.duplicate is not None
            return self._duplicate_info(producer_info.duplicate, batches)
        if producer_info.status is not AppendStatus.OK:
            producer_info.raise_for_error()
        batches = log_validator.assign_offsets_and_epoch(
            buf,
            batches,
            first_offset=log_end,
            leader_epoch=leader_epoch,
            log_append_time_ms=now_ms if append_time else None,
        )
        if leader_epoch >= 0:
            self._epochs.assign(leader_epoch, log_end)
        log_append_time = now_ms if append_time else -1
        return self._write(
            buf,
            batches,
            producer_info,
            markers,
            now_ms=now_ms,
            log_append_time=log_append_time,
            log_end=log_end,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview, *, now_ms: int) -> LogAppendInfo:
        """Append batches copied from the leader's log, offsets and leader epochs as the leader wrote them
        (Kafka's ``appendAsFollower``). Nothing is rewritten or copied.

        Checks, before anything is written: whole batches (:class:`UnexpectedAppendOffsetError`), at most
        ``segment.bytes`` (:class:`RecordBatchTooLargeError`), each batch whole by
        ``records.validate_batch`` (CRC32C, structure: its ``RecordError``, e.g. ``CorruptRecordError``),
        the first batch starting at the log end offset (in a compacted log at or above it: the leader's
        cleaner removes whole batches) and offsets increasing, else :class:`UnexpectedAppendOffsetError`
        with the append's ``first_offset``/``last_offset`` and the ``log_end_offset``. A log that is empty
        at its log start offset being sent the batch holding that offset (the leader's start offset fell
        inside a batch: DeleteRecords) gets that error too; Kafka's answer, the caller's, is
        :meth:`truncate_fully_and_start_at` the error's ``first_offset`` and the same append again.

        The producer state takes the batches with origin REPLICATION (no sequence or duplicate checks, an
        older producer or coordinator epoch is applied with a warning, ``InvalidTxnStateError`` for a
        non-transactional batch of a producer whose transaction is open); COMMIT/ABORT markers close
        transactions and an ABORT gets its ``.txnindex`` entry. Each batch's partition leader epoch newer
        than the cache's latest starts there (written before the batches). The high watermark is the
        caller's to move (:meth:`update_high_watermark`: min(leader's, log end offset)).
        """
        self._observe(now_ms)
        buf = records if isinstance(records, memoryview) else memoryview(records)
        batches = log_validator.whole_batches(buf)
        self._check_append_size(len(buf))
        log_validator.validate_whole(buf, batches)
        log_end = self.log_end_offset
        log_validator.check_follower_offsets(batches, log_end, gaps_allowed=self._config.compact_enabled)
        markers = log_validator.end_txn_markers(buf, batches)
        producer_info = self.producer_state.prepare(
            [header for _, header in batches], markers, origin=AppendOrigin.REPLICATION
        )
        producer_info.raise_for_error()
        self._assign_batch_epochs(batches)
        return self._write(
            buf, batches, producer_info, markers, now_ms=now_ms, log_append_time=-1, log_end=log_end
        )

    def _check_append_size(self, total: int) -> None:
        if total > self._config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {total} bytes to {self._dir.name} exceeds "
                f"segment.bytes={self._config.segment_bytes}"
            )

    def _assign_batch_epochs(self, batches: log_validator.Batches) -> None:
        """Kafka's ``maybeAssignEpochStartOffset`` for each batch carrying a partition leader epoch."""
        for _, header in batches:
            if header.partition_leader_epoch >= 0:
                self._epochs.assign(header.partition_leader_epoch, header.base_offset)

    def _write(
        self,
        buf: bytearray | memoryview,
        batches: log_validator.Batches,
        producer_info: ProducerAppendInfo | None,
        markers: Sequence[EndTxnMarker | None] | None,
        *,
        now_ms: int,
        log_append_time: int,
        log_end: int,
    ) -> LogAppendInfo:
        """Write checked batches (offsets final) at the log end (``log_end``, as the caller read it), then
        apply them to the producer state (``producer_info`` committed, else replayed) and the transaction
        index."""
        self._epochs.write()  # before the batches: the file never lacks the epoch of a batch in the log
        total = len(buf)
        first_offset = batches[0][1].base_offset
        max_timestamp = -1
        offset_of_max = last_offset = -1
        for _, header in batches:  # the last one's last offset (the property without its call)
            last_offset = header.base_offset + header.last_offset_delta
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, last_offset

        active = self._segments.active
        if first_offset > log_end or active.should_roll(
            messages_size=total, max_offset_in_messages=last_offset, now_ms=now_ms
        ):
            active = self.roll(now_ms, expected_next_offset=first_offset)
        active.append(buf, batches, now_ms=now_ms)
        self._flushes.changed()
        if producer_info is not None:
            if not producer_info.pending and not producer_info.markers:
                completed = []  # batches without a producer id: nothing to commit (commit's own shortcut)
            else:
                completed = self.producer_state.commit(
                    producer_info, first_offset, log_append_time=log_append_time
                )
        else:
            replayed = (
                self.producer_state.replay(h, markers[i] if markers else None)
                for i, (_, h) in enumerate(batches)
            )
            completed = [txn for txn in replayed if txn is not None]
        if completed:
            self._index_completed_transactions(completed)

        # the log end is now last_offset + 1 (the active segment's next offset)
        if last_offset + 1 - self._flushes.recovery_point >= self._config.flush_messages:
            self.flush(now_ms)
        return LogAppendInfo(  # positional, in the field order (the keyword form costs about 0.2 µs more)
            first_offset,  # first_offset
            last_offset,  # last_offset
            max_timestamp,  # max_timestamp
            offset_of_max,  # shallow_offset_of_max_timestamp
            log_append_time,  # log_append_time
            self._log_start_offset,  # log_start_offset
            len(batches),  # shallow_count
            (  # records_count
                batches[0][1].records_count
                if len(batches) == 1
                else sum(header.records_count for _, header in batches)
            ),
            total,  # valid_bytes
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

    def _index_completed_transactions(self, completed: Sequence[CompletedTxn]) -> None:
        """Add each aborted transaction to the ``.txnindex`` of the segment holding its marker, unless that
        index has it already (a replay over a segment whose index survived)."""
        for txn in completed:
            if not txn.is_aborted:
                continue
            index = self._segments[self._segments.index_of(txn.last_offset)].txn_index
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
        for segment in self._segments[self._segments.index_of(start_offset) :]:
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

    def roll(self, now_ms: int, *, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log_end_offset)``.

        An empty active segment at that offset is kept as it is; an empty one below it is replaced. The
        segments rolled past are fsynced by the next periodic flush (:meth:`plan_flush`).
        """
        self._observe(now_ms)
        log_end = self.log_end_offset
        new_base = max(expected_next_offset if expected_next_offset is not None else log_end, log_end)
        active = self._segments.active
        if active.size == 0:
            if active.base_offset == new_base:
                return active
            self._segments.pop_active()
            active.delete_files()
        else:
            active.mark_inactive()
            self._flushes.rolled(new_base)
        segment = LogSegment.create(self._dir, new_base, self._config, self._limiter, now_ms=now_ms)
        self._segments.append(segment)
        self._flushes.files_changed()
        self.producer_state.update_map_end_offset(new_base)
        self.producer_state.take_snapshot()
        logger.debug("%s: rolled new segment at offset %d", self._dir.name, new_base)
        return segment

    # ---- read -------------------------------------------------------------------------------------

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
        index = self._segments.index_of(fetch_offset)
        while next_offset < limit and index < len(segments):
            segment = segments[index]
            upper = segments.upper_bound(index, log_end)
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
        """Remove everything at and above ``offset`` (a batch holding ``offset`` goes whole; Kafka's
        ``truncateTo``, a follower's after a leader change). Returns whether anything was removed. Below the
        first segment the log starts over at ``offset`` (:meth:`truncate_fully_and_start_at`).

        With the log: the producer state is rebuilt (the latest snapshot at or below the new log end offset,
        then a replay of the batches after it: an open transaction whose batches went is gone, one whose
        marker went is open again), the ``.txnindex`` entries of markers that went go with them, the leader
        epoch cache loses the epochs starting at or after the new log end (written at once), and the high
        watermark, log start offset and recovery point are at most the new log end offset. At or above the
        log end only the epochs starting there or later go (an epoch a leader began without writing).
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        now = self._observe(now_ms)
        if offset >= self.log_end_offset:
            self._epochs.truncate_from_end(self.log_end_offset)
            self._epochs.write()
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms=now)
            return True
        doomed = [segment for segment in self._segments if segment.base_offset > offset]
        self._delete_segments(doomed, now)
        active = self._segments.active
        if not active.is_active:
            active.mark_active()
        active.truncate_to(offset)
        log_end = self.log_end_offset
        self._flushes.truncated(log_end)
        self._log_start_offset = min(self._log_start_offset, log_end)
        self._high_watermark = min(self._high_watermark, log_end)
        self._epochs.truncate_from_end(log_end)
        self._epochs.write()
        self.load_producer_state(now)
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Delete every segment; the log restarts empty at ``offset`` (start, end, high watermark), with no
        producer state, snapshot or leader epoch (Kafka's ``truncateFullyAndStartAt``: a follower whose log
        end is below the leader's log start offset)."""
        now = self._observe(now_ms)
        self._delete_segments(list(self._segments), now)
        segment = LogSegment.create(self._dir, offset, self._config, self._limiter, now_ms=now)
        self._segments.reset(segment)
        self._flushes.files_changed()
        self._flushes.started_over(offset)
        self._log_start_offset = self._high_watermark = offset
        self.producer_state.truncate_fully_and_start_at(offset)
        self._epochs.clear()
        self._epochs.write()

    def delete_records_before(self, offset: int, *, now_ms: int | None = None) -> int:
        """DeleteRecords (Kafka's ``maybeIncrementLogStartOffset``; a follower's too, with the leader's log
        start offset): raise the log start offset to ``offset`` (at most the high watermark, else
        :class:`OffsetOutOfRangeError`) and delete the segments entirely below it; the leader epoch cache's
        first entry moves up to it. Returns the log start."""
        now = self._observe(now_ms)
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self._dir.name} to {offset}, "
                f"above the high watermark {self._high_watermark}"
            )
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self._on_log_start_offset_incremented()
            self._delete_old_segments(retention.log_start_offset_breach(offset), now)
            self._epochs.write()
        return self._log_start_offset

    def delete_retention(self, now_ms: int) -> int:
        """Delete the segments past retention (:mod:`.retention`); returns how many. Kafka's
        ``deleteOldSegments``: segments below the log start offset always; with ``cleanup.policy`` delete also
        the oldest segments while ``retention.bytes`` is exceeded by at least their size, and those whose
        largest timestamp is more than ``retention.ms`` before ``now_ms``. Only segments entirely below the
        high watermark, oldest first."""
        self._observe(now_ms)
        deleted = self._delete_old_segments(retention.log_start_offset_breach(self._log_start_offset), now_ms)
        if self._config.delete_enabled:
            by_size = retention.retention_size_breach(self._config, self.size_in_bytes)
            if by_size is not None:
                deleted += self._delete_old_segments(by_size, now_ms)
            by_time = retention.retention_ms_breach(self._config, now_ms)
            if by_time is not None:
                deleted += self._delete_old_segments(by_time, now_ms)
        self._epochs.write()
        return deleted

    def _delete_old_segments(self, breach: retention.Breach, now_ms: int) -> int:
        deletable = retention.deletable_segments(
            self._segments,
            breach,
            high_watermark=self._high_watermark,
            log_end_offset=self.log_end_offset,
        )
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self.roll(now_ms)
        self._delete_segments(deletable, now_ms)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._on_log_start_offset_incremented()
        self.producer_state.delete_snapshots_before(self._segments[0].base_offset)
        return len(deletable)

    def _on_log_start_offset_incremented(self) -> None:
        """What follows the log start offset (the caller writes the leader epoch cache)."""
        self.producer_state.on_log_start_offset_incremented(self._log_start_offset)
        self._epochs.truncate_from_start(self._log_start_offset)

    def _delete_segments(self, doomed: Sequence[LogSegment], now_ms: int) -> None:
        """Take segments out of the log; rename their files ``.deleted`` (unlinked after the delay)."""
        if not doomed:
            return
        self._segments.remove(doomed)
        self._deleted.add(doomed, now_ms=now_ms, delay_ms=self._config.file_delete_delay_ms)
        self._flushes.files_changed()

    def remove_deleted_files(self, now_ms: int) -> int:
        """Unlink the ``.deleted`` files whose delay has passed; returns how many segments went."""
        self._observe(now_ms)
        return self._deleted.remove_due(now_ms)

    # ---- compaction -------------------------------------------------------------------------------

    def replace_segments(
        self, replacements: Sequence[tuple[int, Sequence[LogSegment]]], *, now_ms: int
    ) -> tuple[int, int]:
        """Swap the log cleaner's output in (Kafka's ``replaceSegments``, :mod:`.segment_swap`); returns
        ``(swapped, rejected)``.

        Each ``(base_offset, old)``, in base offset order, names a finished ``<base_offset>.log.cleaned``
        segment (and its ``.cleaned`` indexes) replacing the consecutive inactive segments ``old``. Leading
        replacements whose segments all left the log meanwhile (retention) are dropped. If any other one no
        longer fits the log (a segment gone, now active, not consecutive), all of them are rejected: they
        were cleaned together. The old segments become ``.deleted`` (unlinked after
        ``file.delete.delay.ms``; reads already handed out keep reading them); every step leaves a log that
        recovery completes.
        """
        now = self._observe(now_ms)
        swapped, rejected = segment_swap.replace_segments(
            self._segments,
            replacements,
            directory=self._dir,
            open_segment=lambda base: LogSegment.open(
                self._dir, base, self._config, self._limiter, now_ms=now
            ),
            delete=lambda old: self._delete_segments(old, now),
        )
        if swapped:
            self._flushes.dir_fsynced()  # the swap fsynced the directory last
        return swapped, rejected

    # ---- producer state ---------------------------------------------------------------------------

    def _batches_from(self, offset: int) -> Iterator[tuple[RecordBatchHeader, EndTxnMarker | None]]:
        for segment in self._segments[self._segments.index_of(offset) :]:
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
        flushes = self._flushes
        if now_ms is not None:
            self._observe(now_ms)
            flushes.last_flush_ms = now_ms
        self._epochs.write()
        log_end = self.log_end_offset
        target = log_end if up_to_offset is None else min(up_to_offset, log_end)
        if target > flushes.recovery_point:
            for segment in self._segments_to_flush(target):
                segment.flush()
        if flushes.dir_dirty:
            generation = flushes.dir_generation
            fsync_dir(self._dir)
            flushes.dir_fsynced(generation)
        flushes.recovery_point = max(flushes.recovery_point, target)

    def _segments_to_flush(self, target: int) -> list[LogSegment]:
        """The segments holding offsets in ``[recovery_point, target)``."""
        segments = self._segments
        log_end = self.log_end_offset
        recovery_point = self._flushes.recovery_point
        return [
            segment
            for i, segment in enumerate(segments)
            if segments.upper_bound(i, log_end) > recovery_point and segment.base_offset < target
        ]

    def plan_flush(self, now_ms: int) -> FlushPlan | None:
        """Plan the periodic flush (Kafka's ``flushDirtyLogs``); None if nothing is due or left to fsync.

        Due (:meth:`FlushState.due`): the segments that rolled, and everything once ``flush.ms`` passed since
        the last flush or ``flush.messages`` are unflushed. The plan holds new descriptors of the segments
        holding ``[recovery_point, target_offset)`` and of the directory if files came or went; run
        :meth:`FlushPlan.execute` on any thread, then :meth:`complete_flush` here. Nothing changes until
        then (another plan made meanwhile covers the same again). See :mod:`.flush_plan`.
        """
        self._observe(now_ms)
        flushes = self._flushes
        due = flushes.due(now_ms=now_ms, log_end_offset=self.log_end_offset, config=self._config)
        if due is None:
            return None
        target, flush_time_ms = due
        dir_generation = flushes.dir_generation
        if target <= flushes.recovery_point and not flushes.dir_dirty:
            flushes.record(target, flush_time_ms)  # nothing left to fsync
            return None
        descriptors: list[int] = []
        txn_writes = []
        dir_fd = None
        try:
            if target > flushes.recovery_point:
                for segment in self._segments_to_flush(target):
                    opened = segment.open_for_fsync()
                    descriptors.extend(opened.descriptors)
                    if opened.txn_writes is not None:
                        txn_writes.append((segment.txn_index, opened.txn_writes))
            if flushes.dir_dirty:
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
            truncations=flushes.truncations,
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
        flushes = self._flushes
        if self._closed or plan.truncations != flushes.truncations:
            return False
        flushes.dir_fsynced(plan.dir_generation)
        for txn_index, writes in plan.txn_writes:
            txn_index.mark_synced(writes)
        flushes.record(min(plan.target_offset, self.log_end_offset), plan.flush_time_ms)
        return True

    def watch_flushes(self, on_change: Callable[[], None] | None) -> None:
        """Have ``on_change`` told of every change that can make a periodic flush due (an append, a roll,
        files coming or going, a truncation, a new config): the owner visits only those logs, dropping one
        once :attr:`flush_idle`. See :mod:`.flush_plan`."""
        self._flushes.on_change = on_change

    @property
    def flush_idle(self) -> bool:
        """No periodic flush is due now or at any later time until ``watch_flushes``'s callback is told of
        a change (:meth:`FlushState.idle`)."""
        return self._flushes.idle(log_end_offset=self.log_end_offset, config=self._config)

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
        self._deleted.remove_all()
        for segment in self._segments:
            segment.close()

    @property
    def closed(self) -> bool:
        return self._closed
