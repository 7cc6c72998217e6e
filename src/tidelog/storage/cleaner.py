"""The log cleaner: compaction of the logs whose ``cleanup.policy`` has ``compact`` (Kafka's ``LogCleaner``
and ``LogCleanerManager``).

A compacted log keeps, for every key, at least the last record written with that key. Its segments form
three sections, in offset order:

* clean: ``[log start, first dirty offset)``, every key in it at most once since the last cleaning (the
  first dirty offset is the ``cleaner-offset-checkpoint``, :mod:`.cleaner_checkpoint`);
* dirty, cleanable: ``[first dirty offset, first uncleanable offset)``;
* uncleanable: from the first uncleanable offset, the base offset of the segment holding the smallest of
  the active segment's base offset, the last stable offset (no open transaction is cleaned, nothing above
  the high watermark) and, with ``min.compaction.lag.ms``, the first segment holding a record younger
  than that.

:meth:`LogCleaner.grab_filthiest_log` picks the log with the largest dirty ratio (cleanable bytes over
clean plus cleanable bytes) above its ``min.cleanable.dirty.ratio``, or any log whose oldest dirty
segment waited longer than ``max.compaction.lag.ms``, or else (tidelog's addition, so that tombstones of
quiet logs still go) a log with a delete horizon that has passed; it returns a :class:`Cleaning`: the log's
segments and a :class:`~tidelog.storage.cleaner_job.CleaningJob` holding only values and file
descriptors, whose ``run`` may go to another thread. :meth:`LogCleaner.complete` then swaps the result in
(:meth:`PartitionLog.replace_segments`), writes the checkpoint, and logs what was read and written.
Before the swap the log is flushed up to the end of the replaced segments (the job fsynced them already,
off the owner's thread, so this is cheap): the cleaner only replaces segments below the recovery point, so
recovery after a crash never revalidates a cleaned segment (whose offsets have gaps) as if it were new.

Invariants:

* Everything here except ``CleaningJob.run`` runs on the thread that owns the logs; at most one cleaning
  of a log is under way. A log that made a cleaning fail unexpectedly is left alone until it is
  recreated or the process restarts (Kafka's "uncleanable partitions").
* A cleaning never changes what a reader from the log start gets for a key, except that a record with a
  later record of the same key, a tombstone past ``delete.retention.ms`` after the cleaning that first kept
  it, an aborted record and a marker no longer needed disappear; offsets never change.
* Time comes in as ``now_ms``; nothing here reads a clock.
"""

from __future__ import annotations

import bisect
import logging
import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.storage.cleaner_job import (
    CleaningJob,
    CleaningResult,
    LastRecord,
    LogCleaningAbortedError,
    SourceSegment,
)
from tidelog.storage.cleaner_transactions import AbortedRange
from tidelog.storage.config import LONG_MAX
from tidelog.storage.errors import StorageError
from tidelog.storage.log_manager import LogManager
from tidelog.storage.offset_map import DEFAULT_LOAD_FACTOR, OffsetMap
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.segment import LogSegment

__all__ = [
    "Cleaning",
    "CleanerConfig",
    "LogCleaner",
    "LogToClean",
    "OffsetsToClean",
    "calculate_cleanable_bytes",
    "cleanable_offsets",
    "max_compaction_delay",
]

logger = logging.getLogger(__name__)

_MB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    dedupe_buffer_load_factor: float = DEFAULT_LOAD_FACTOR
    io_buffer_size: int = 524_288
    io_max_bytes_per_second: float = sys.float_info.max
    """The rate the broker's throttle holds the job's reads plus writes to (Kafka's default: unlimited);
    the throttling itself is the caller's (``CleaningJob.run``'s ``throttle``), storage never sleeps."""
    backoff_ms: int = 15_000


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool
    """The checkpoint was outside the log and was reset to the log start offset."""


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A compacted log and its sections, as the cleaner weighs it (Kafka's ``LogToClean``)."""

    topic_partition: TopicPartition
    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    """Base offset of the first segment that cannot be cleaned now."""
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    """``max.compaction.lag.ms`` has passed for some dirty record."""

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(slots=True)
class Cleaning:
    """A cleaning under way: the job, and (for the owner's thread only) the log and its segments then."""

    job: CleaningJob
    log: PartitionLog
    segments: tuple[LogSegment, ...]
    started_ms: int
    dirty_ratio: float


# ---- Kafka's section arithmetic -------------------------------------------------------------------


def segments_in_range(log: PartitionLog, from_offset: int, to_offset: int) -> list[LogSegment]:
    """Kafka's ``logSegments(from, to)``: from the segment holding ``from_offset`` (or the first) to the last
    one whose base offset is below ``to_offset``."""
    segments = log.segments
    bases = [segment.base_offset for segment in segments]
    start = max(bisect.bisect_right(bases, from_offset) - 1, 0)
    end = bisect.bisect_left(bases, to_offset)
    return list(segments[start:end])


def _non_active_segments_from(log: PartitionLog, offset: int) -> list[LogSegment]:
    return segments_in_range(log, offset, log.active_segment.base_offset)


def _last_stable_offset(log: PartitionLog) -> int:
    """The log's last stable offset once transactions track it, else its high watermark."""
    stable = getattr(log, "last_stable_offset", None)
    return int(stable) if stable is not None else log.high_watermark


def cleanable_offsets(log: PartitionLog, last_clean_offset: int | None, now_ms: int) -> OffsetsToClean:
    """Kafka's ``cleanableOffsets``."""
    start = log.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start:
        if not log.config.delete_enabled:
            logger.warning(
                "%s: resetting the first dirty offset to the log start offset %d, the checkpointed %d is "
                "below it",
                log.dir.name,
                start,
                checkpoint,
            )
        first_dirty, force = start, True
    elif checkpoint > log.log_end_offset:
        logger.warning(
            "%s: the checkpointed first dirty offset %d is above the log end offset %d; cleaning from the "
            "log start offset %d",
            log.dir.name,
            checkpoint,
            log.log_end_offset,
            start,
        )
        first_dirty, force = start, True
    else:
        first_dirty = checkpoint
    bounds = [_last_stable_offset(log), log.active_segment.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _non_active_segments_from(log, first_dirty):
            if segment.largest_timestamp > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(bounds)), force)


def calculate_cleanable_bytes(
    log: PartitionLog, first_dirty: int, uncleanable_offset: int
) -> tuple[int, int]:
    """Kafka's ``calculateCleanableBytes``: the base offset of the segment holding ``uncleanable_offset``
    (the active one at most) and the bytes of the segments from ``first_dirty`` up to it."""
    non_active = _non_active_segments_from(log, uncleanable_offset)
    first_uncleanable = non_active[0] if non_active else log.active_segment
    boundary = first_uncleanable.base_offset
    cleanable = sum(s.size for s in segments_in_range(log, min(first_dirty, boundary), boundary))
    return boundary, cleanable


_first_batch_timestamps: weakref.WeakKeyDictionary[LogSegment, int] = weakref.WeakKeyDictionary()


def _first_batch_timestamp(segment: LogSegment) -> int:
    cached = _first_batch_timestamps.get(segment)
    if cached is None:
        first = next(iter(segment.batches()), None)
        cached = first[1].max_timestamp if first is not None else -1
        _first_batch_timestamps[segment] = cached
    return cached


def max_compaction_delay(log: PartitionLog, first_dirty: int, now_ms: int) -> int:
    """Kafka's ``maxCompactionDelay``: how long ago ``max.compaction.lag.ms`` passed for the oldest dirty
    segment (by its first batch's timestamp), 0 if it has not."""
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    if clean_until <= 0:
        return 0
    timestamps = [
        t for t in map(_first_batch_timestamp, _non_active_segments_from(log, first_dirty)) if t > 0
    ]
    earliest = min(timestamps, default=LONG_MAX)
    return clean_until - earliest if earliest < clean_until else 0


# ---- the cleaner ----------------------------------------------------------------------------------


class LogCleaner:
    """Cleans the compacted logs of a :class:`LogManager`, one at a time."""

    def __init__(self, log_manager: LogManager, config: CleanerConfig | None = None) -> None:
        self.config = config if config is not None else CleanerConfig()
        self._logs = log_manager
        threads = max(self.config.threads, 1)
        self._offset_map = OffsetMap(
            min(self.config.dedupe_buffer_size // threads, 2**31 - 1), self.config.dedupe_buffer_load_factor
        )
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, PartitionLog] = {}
        self._delete_horizons: dict[TopicPartition, tuple[PartitionLog, int]] = {}
        self.dirtiest_log_cleanable_ratio = 0.0

    @property
    def uncleanable_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, log in self._uncleanable.items() if self._logs.get(*tp) is log)

    # ---- choosing -------------------------------------------------------------------------------

    def _log_to_clean(self, tp: TopicPartition, log: PartitionLog, now_ms: int) -> LogToClean:
        checkpoints = self._logs.cleaner_checkpoints
        offsets = cleanable_offsets(log, checkpoints.get(tp), now_ms)
        if offsets.force_update_checkpoint:
            checkpoints.update(log.dir.parent, tp, offsets.first_dirty_offset, live=self._is_live)
        first_dirty = offsets.first_dirty_offset
        boundary, cleanable = calculate_cleanable_bytes(
            log, first_dirty, offsets.first_uncleanable_dirty_offset
        )
        clean = sum(s.size for s in segments_in_range(log, -1, first_dirty))
        delay = max_compaction_delay(log, first_dirty, now_ms)
        return LogToClean(tp, log, first_dirty, boundary, clean, cleanable, delay > 0)

    def _is_live(self, tp: TopicPartition) -> bool:
        return self._logs.get(*tp) is not None

    def _candidates(self) -> list[tuple[TopicPartition, PartitionLog]]:
        out = []
        for tp, log in self._logs.all_logs().items():
            if not log.config.compact_enabled or log.closed or tp in self._in_progress:
                continue
            if self._uncleanable.get(tp) is log:
                continue
            out.append((tp, log))
        return out

    def grab_filthiest_log(self, now_ms: int) -> Cleaning | None:
        """Choose the log to clean now and plan its cleaning (None: nothing to do). The caller must then run
        ``cleaning.job.run`` (any thread) and hand the result to :meth:`complete`, or call :meth:`abandon`."""
        dirty: list[LogToClean] = []
        for tp, log in self._candidates():
            try:
                ltc = self._log_to_clean(tp, log, now_ms)
            except (OSError, StorageError) as exc:
                self._mark_uncleanable(tp, log, exc)
                continue
            if ltc.total_bytes > 0:
                dirty.append(ltc)
        self.dirtiest_log_cleanable_ratio = max((ltc.cleanable_ratio for ltc in dirty), default=0.0)
        cleanable = [
            ltc
            for ltc in dirty
            if (ltc.need_compaction_now and ltc.cleanable_bytes > 0)
            or ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio
        ]
        if not cleanable:
            cleanable = [ltc for ltc in dirty if self._delete_horizon_passed(ltc, now_ms)]
        if not cleanable:
            return None
        chosen = max(cleanable, key=lambda ltc: ltc.cleanable_ratio)
        try:
            return self._plan(chosen, now_ms)
        except (OSError, StorageError) as exc:
            self._mark_uncleanable(chosen.topic_partition, chosen.log, exc)
            return None

    def _delete_horizon_passed(self, ltc: LogToClean, now_ms: int) -> bool:
        known = self._delete_horizons.get(ltc.topic_partition)
        return known is not None and known[0] is ltc.log and known[1] <= now_ms

    def _plan(self, ltc: LogToClean, now_ms: int) -> Cleaning:
        log = ltc.log
        all_segments = log.segments
        planned = [s for s in all_segments[:-1] if s.base_offset < ltc.first_uncleanable_offset]
        sources: list[SourceSegment] = []
        try:
            for i, segment in enumerate(planned):
                fd = os.open(segment.log_path, os.O_RDONLY)
                try:
                    mtime_ns = os.fstat(fd).st_mtime_ns
                    sources.append(
                        SourceSegment(
                            base_offset=segment.base_offset,
                            next_segment_base=all_segments[i + 1].base_offset,
                            size=segment.size,
                            offset_index_bytes=_file_size(segment.offset_index.path),
                            time_index_bytes=_file_size(segment.time_index.path),
                            mtime_ns=mtime_ns,
                            name=f"{log.dir.name}/{segment.log_path.name}",
                            fd=fd,
                        )
                    )
                except BaseException:
                    os.close(fd)
                    raise
        except BaseException:
            for source in sources:
                os.close(source.fd)
            raise
        aborted_index = {
            entry.last_offset: entry for segment in planned for entry in segment.txn_index.entries()
        }
        aborted_past_sources = [
            AbortedRange(entry.producer_id, entry.first_offset, entry.last_offset)
            for segment in all_segments[len(planned) :]
            for entry in segment.txn_index.entries()
            if entry.first_offset < ltc.first_uncleanable_offset
        ]
        producers = {
            pid: LastRecord(entry.last_offset if entry.last_offset >= 0 else None, entry.producer_epoch)
            for pid, entry in log.producer_state.producers.items()
        }
        job = CleaningJob(
            topic_partition=ltc.topic_partition,
            directory=log.dir,
            config=log.config,
            sources=sources,
            first_dirty_offset=ltc.first_dirty_offset,
            first_uncleanable_offset=ltc.first_uncleanable_offset,
            active_producers=producers,
            now_ms=now_ms,
            offset_map=self._offset_map,
            io_buffer_size=self.config.io_buffer_size,
            aborted_index=aborted_index,
            aborted_past_sources=aborted_past_sources,
        )
        self._in_progress.add(ltc.topic_partition)
        logger.info(
            "Cleaning %s: dirty section [%d, %d), dirty ratio %.1f%%, %d segment(s)",
            ltc.topic_partition,
            ltc.first_dirty_offset,
            ltc.first_uncleanable_offset,
            100 * ltc.cleanable_ratio,
            len(sources),
        )
        return Cleaning(job, log, tuple(planned), now_ms, ltc.cleanable_ratio)

    # ---- finishing ------------------------------------------------------------------------------

    def complete(self, cleaning: Cleaning, result: CleaningResult, now_ms: int) -> bool:
        """Swap a finished cleaning in and advance the checkpoint; False (and its files removed) if the log
        changed under it in a way that forbids the swap (deleted, truncated)."""
        job, log = cleaning.job, cleaning.log
        tp = job.topic_partition
        self._in_progress.discard(tp)
        if log.closed or self._logs.get(*tp) is not log:
            job.discard()
            logger.info("Cleaning of %s dropped: the log was deleted meanwhile", tp)
            return False
        if not self._sources_unchanged(cleaning, result):
            job.discard()
            logger.info("Cleaning of %s dropped: segments it read were rewritten meanwhile", tp)
            return False
        if result.groups:
            last = result.groups[-1]
            replaced_end = job.sources[last.first_source + last.source_count - 1].next_segment_base
            if log.recovery_point < replaced_end:
                log.flush(up_to_offset=replaced_end)
        replacements = [
            (
                group.base_offset,
                cleaning.segments[group.first_source : group.first_source + group.source_count],
            )
            for group in result.groups
        ]
        swapped, rejected = log.replace_segments(replacements, now_ms=now_ms)
        stats = result.stats
        stats.elapsed_ms = max(now_ms - cleaning.started_ms, 0)
        if rejected:
            logger.info(
                "Cleaning of %s: %d of %d cleaned segment(s) dropped, the log changed meanwhile",
                tp,
                rejected,
                len(replacements),
            )
            return False
        self._logs.cleaner_checkpoints.update(log.dir.parent, tp, result.end_offset, live=self._is_live)
        if result.earliest_delete_horizon_ms is not None:
            self._delete_horizons[tp] = (log, result.earliest_delete_horizon_ms)
        else:
            self._delete_horizons.pop(tp, None)
        _log_stats(tp, result, swapped, cleaning.dirty_ratio)
        return True

    @staticmethod
    def _sources_unchanged(cleaning: Cleaning, result: CleaningResult) -> bool:
        """Whether every replaced segment still in the log has the size and modification time it had when
        the cleaning read it (a truncation followed by new appends would change them)."""
        live = {id(segment) for segment in cleaning.log.segments[:-1]}
        for group in result.groups:
            for i in range(group.first_source, group.first_source + group.source_count):
                segment, source = cleaning.segments[i], cleaning.job.sources[i]
                if id(segment) not in live:
                    continue  # gone: replace_segments allows that only for leading groups (retention)
                try:
                    mtime_ns = os.stat(segment.log_path).st_mtime_ns
                except FileNotFoundError:
                    return False
                if segment.size != source.size or mtime_ns != source.mtime_ns:
                    return False
        return True

    def abandon(self, cleaning: Cleaning, error: BaseException | None = None) -> None:
        """Give a cleaning up (its ``run`` failed or never ran): remove its files. An ``error`` other than an
        abort marks the log uncleanable."""
        cleaning.job.discard()
        tp = cleaning.job.topic_partition
        self._in_progress.discard(tp)
        if error is not None and not isinstance(error, LogCleaningAbortedError) and not cleaning.log.closed:
            self._mark_uncleanable(tp, cleaning.log, error)

    def _mark_uncleanable(self, tp: TopicPartition, log: PartitionLog, error: BaseException) -> None:
        self._uncleanable[tp] = log
        logger.warning(
            "Cleaning of %s failed (%s: %s); the log is not cleaned again until it is recreated or the "
            "broker restarts",
            tp,
            type(error).__name__,
            error,
        )

    def clean_once(self, now_ms: int, *, should_abort: Callable[[], bool] = lambda: False) -> bool:
        """Choose, clean and swap in one log on this thread; whether a cleaning happened."""
        cleaning = self.grab_filthiest_log(now_ms)
        if cleaning is None:
            return False
        try:
            result = cleaning.job.run(should_abort)
        except Exception as exc:
            self.abandon(cleaning, exc)
            raise
        return self.complete(cleaning, result, now_ms)


def _file_size(path: os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _log_stats(tp: TopicPartition, result: CleaningResult, swapped: int, dirty_ratio: float) -> None:
    stats = result.stats
    seconds = stats.elapsed_ms / 1000
    read_mb = stats.bytes_read / _MB
    reduction = 100 * (1 - stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0.0
    fewer = 100 * (1 - stats.messages_written / stats.messages_read) if stats.messages_read else 0.0
    logger.info(
        "Cleaned %s (dirty section [%d, %d), dirty ratio %.1f%%): %.3f MB of log read in %.3f s (%.1f MB/s), "
        "offset map built from %.3f MB (%d messages, buffer utilization %.1f%%), %d segment(s) rewritten "
        "into %d: %d -> %d bytes (%.1f%% size reduction), %d -> %d messages (%.1f%% fewer)",
        tp,
        result.first_dirty_offset,
        result.end_offset,
        100 * dirty_ratio,
        read_mb,
        seconds,
        read_mb / seconds if seconds > 0 else 0.0,
        stats.map_bytes_read / _MB,
        stats.map_messages_read,
        100 * stats.buffer_utilization,
        stats.segments_read,
        swapped,
        stats.bytes_read,
        stats.bytes_written,
        reduction,
        stats.messages_read,
        stats.messages_written,
        fewer,
    )
