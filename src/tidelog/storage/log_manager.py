"""All partition logs of a broker across its ``log.dirs`` (Kafka's LogManager).

Invariants:

* Each log dir is locked (``.lock``, ``flock``) for the manager's lifetime, holds a ``meta.properties`` of
  this node and cluster, and per-dir checkpoints (``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``, ``replication-offset-checkpoint``) naming only the logs in that dir.
* A partition lives in exactly one dir; new partitions go to the dir holding the fewest (first on ties).
* ``.kafka_cleanshutdown`` in a dir means every log in it was flushed and checkpointed before the
  previous process stopped: its logs are loaded without revalidation. It is removed once loading is done
  and written again only by :meth:`LogManager.shutdown`, after flush, checkpoints and close.
* A deleted partition's directory is first renamed ``<topic>-<partition>.<uuid>-delete`` (atomic, and
  ignored by loading), then removed; leftovers of that kind are removed at start-up.
* A replica being moved between dirs (AlterReplicaLogDirs) has a future log ``<topic>-<partition>.<uid>-future``
  in the target dir (:meth:`LogManager.create_future`); it is in no checkpoint and no other task touches
  it. :meth:`LogManager.replace_current_with_future` swaps it in by two renames: the current dir to
  ``<topic>-<partition>.<uid>-delete`` (same uid; the parent fsynced: the commit point), then the future
  dir to ``<topic>-<partition>`` (fsynced). At start-up a future dir whose uid names a ``-delete`` dir (a swap
  that committed) becomes the partition's log, and any other future dir of a partition that has a log is
  loaded as its future again (the move goes on); so a crash at any point leaves either the old or the
  new log whole, and never two logs of a partition.
* The log cleaner's ``cleaner-offset-checkpoint`` of every dir is kept here too
  (:class:`~tidelog.storage.cleaner_checkpoint.CleanerCheckpoints`): deleting a partition drops its entry.
* Time comes in as ``now_ms``. Not thread-safe.
* After an unclean shutdown, loading a dir reports :class:`RecoveryProgress` to ``recovery_progress``
  (when given) after each partition: partitions and segments loaded of the dir's totals, and bytes; the
  caller times it (this layer reads no clock).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.storage import layout
from tidelog.storage.checkpoint import (
    atomic_write,
    fsync_dir,
    read_offsets_checkpoint,
    write_offsets_checkpoint,
)
from tidelog.storage.cleaner_checkpoint import CleanerCheckpoints
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import CheckpointError, LogDirError
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.log_dir_failures import LogDirFailures, takes_dir_offline
from tidelog.storage.meta_properties import ensure_meta_properties, new_cluster_id, read_meta_properties
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.partition_metadata import read_topic_id, write_topic_id
from tidelog.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

__all__ = ["LogManager", "RecoveryProgress"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_SEGMENTS: Final = 1000
"""Segments (active or not) kept open across all logs: at most four descriptors and two maps each."""

_CLEAN_SHUTDOWN_CONTENT: Final = json.dumps({"version": 0, "brokerEpoch": -1}).encode()


@dataclass(frozen=True, slots=True)
class RecoveryProgress:
    """Where the recovery of one log dir stands, after one more partition was loaded."""

    log_dir: Path
    partitions_done: int
    partitions_total: int
    segments_done: int
    segments_total: int
    bytes_done: int

    @property
    def done(self) -> bool:
        return self.partitions_done == self.partitions_total


class _ProgressCounter:
    """Totals of one dir's partitions and segments (counted up front), and what was loaded so far."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._partitions = [c for c in log_dir.iterdir() if c.is_dir() and _is_live_partition_dir(c.name)]
        self._segments_total = sum(len(_segment_files(c)) for c in self._partitions)
        self._partitions_done = self._segments_done = self._bytes_done = 0

    def loaded(self, partition_dir: Path) -> RecoveryProgress:
        files = _segment_files(partition_dir)
        self._partitions_done += 1
        self._segments_done += len(files)
        self._bytes_done += sum(f.stat().st_size for f in files)
        return RecoveryProgress(
            self._log_dir,
            min(self._partitions_done, len(self._partitions)),
            len(self._partitions),
            min(self._segments_done, self._segments_total),
            self._segments_total,
            self._bytes_done,
        )


def _segment_files(partition_dir: Path) -> list[Path]:
    return [f for f in partition_dir.iterdir() if f.name.endswith(layout.LOG_FILE_SUFFIX)]


def _is_live_partition_dir(name: str) -> bool:
    try:
        _tp, suffix = layout.parse_partition_dir_name(name)
    except ValueError:
        return False
    return not suffix


class LogManager:
    """Creates, loads, checkpoints and deletes the partition logs under ``log_dirs``."""

    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        default_config: LogConfig,
        *,
        now_ms: int,
        node_id: int = 0,
        cluster_id: str | None = None,
        topic_config: Callable[[str], LogConfig | None] | None = None,
        max_open_segments: int = DEFAULT_MAX_OPEN_SEGMENTS,
        recovery_progress: Callable[[RecoveryProgress], None] | None = None,
        producer_id_expiration_ms: Callable[[], int] = lambda: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        """Lock and check every dir, then load every partition in it (recovering after an unclean stop).

        ``cluster_id`` None takes the one in an existing meta.properties, or makes a new one.
        ``producer_id_expiration_ms`` gives the broker's ``producer.id.expiration.ms`` at each load.
        ``topic_config`` gives a topic's config (None: ``default_config``). ``recovery_progress`` hears how
        the recovery of a dir after an unclean shutdown goes (see the module docstring).
        """
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self._log_dirs = [Path(d) for d in log_dirs]
        if len({d.resolve() for d in self._log_dirs}) != len(self._log_dirs):
            raise LogDirError(f"duplicate log dirs in {[str(d) for d in self._log_dirs]}")
        self._default_config = default_config
        self._topic_config = topic_config
        self._limiter = OpenSegmentLimiter(max_open_segments)
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._flush_watch: dict[PartitionLog, TopicPartition] = {}
        self._checkpointed: dict[Path, dict[TopicPartition, int]] = {}
        """The content this process last wrote to each offsets checkpoint file: an unchanged one is not
        written again (issue 17: an idle broker rewrites and fsyncs nothing)."""
        """The logs the periodic flush visits (:meth:`logs_to_flush`), in the order they changed."""
        self._futures: dict[TopicPartition, PartitionLog] = {}
        self._found_futures: list[tuple[TopicPartition, Path]] = []
        self._committed_swaps: set[str] = set()
        self._logs_per_dir: dict[Path, int] = dict.fromkeys(self._log_dirs, 0)
        self._locks: dict[Path, int] = {}
        self._clock_ms = now_ms
        self.node_id = node_id
        self.had_clean_shutdown: dict[Path, bool] = {}
        self._recovery_progress = recovery_progress
        self._producer_id_expiration_ms = producer_id_expiration_ms
        """The current ``producer.id.expiration.ms`` (a dynamic broker config): a log loaded drops the
        producers of its snapshot idle this long, no others."""
        self.log_dir_failures = LogDirFailures()
        """Dirs an I/O error took offline: checkpoints and the clean stop leave them alone (issue 17)."""
        try:
            for log_dir in self._log_dirs:
                log_dir.mkdir(parents=True, exist_ok=True)
                self._lock(log_dir)
            self.cluster_id = cluster_id if cluster_id is not None else self._existing_cluster_id()
            for log_dir in self._log_dirs:
                ensure_meta_properties(log_dir, node_id=node_id, cluster_id=self.cluster_id)
            for log_dir in self._log_dirs:
                self._load_dir(log_dir, now_ms)
            self._settle_futures(now_ms)
            self.cleaner_checkpoints = CleanerCheckpoints(self._log_dirs)
            for log_dir in self._log_dirs:
                marker = log_dir / layout.CLEAN_SHUTDOWN_FILE
                if marker.exists():
                    marker.unlink()
                    fsync_dir(log_dir)
        except BaseException:
            self.close()
            raise

    @property
    def max_open_segments(self) -> int:
        """Segments whose files may stay open at once (the limiter's bound)."""
        return self._limiter.max_open

    # ---- start-up ---------------------------------------------------------------------------------

    def _lock(self, log_dir: Path) -> None:
        fd = os.open(log_dir / layout.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise LogDirError(f"log dir {log_dir} is in use by another process ({exc})") from exc
        self._locks[log_dir] = fd

    def _existing_cluster_id(self) -> str:
        for log_dir in self._log_dirs:
            meta = read_meta_properties(log_dir)
            if meta is not None and meta.cluster_id is not None:
                return meta.cluster_id
        return new_cluster_id()

    @staticmethod
    def _read_checkpoint(path: Path, consequence: str) -> dict[TopicPartition, int]:
        """The checkpoint's entries; none, with a warning saying ``consequence``, if it is damaged."""
        try:
            return read_offsets_checkpoint(path)
        except CheckpointError as exc:
            logger.warning("%s; ignoring it: %s", exc, consequence)
            return {}

    def _load_dir(self, log_dir: Path, now_ms: int) -> None:
        clean = (log_dir / layout.CLEAN_SHUTDOWN_FILE).exists()
        self.had_clean_shutdown[log_dir] = clean
        recovery_points = self._read_checkpoint(
            log_dir / layout.RECOVERY_POINT_CHECKPOINT_FILE,
            "after an unclean shutdown every log in that dir is recovered from its start",
        )
        start_offsets = self._read_checkpoint(
            log_dir / layout.LOG_START_OFFSET_CHECKPOINT_FILE,
            "each log in that dir starts at its first segment",
        )
        high_watermarks = self._read_checkpoint(
            log_dir / layout.REPLICATION_OFFSET_CHECKPOINT_FILE,
            "the high watermarks of that dir start at the log start offsets",
        )
        if not clean and not recovery_points and any(child.is_dir() for child in log_dir.iterdir()):
            logger.info("%s: no clean shutdown; recovering every log from its start", log_dir)
        progress = None if clean or self._recovery_progress is None else _ProgressCounter(log_dir)
        for child in sorted(log_dir.iterdir()):
            if not child.is_dir():
                continue
            try:
                tp, suffix = layout.parse_partition_dir_name(child.name)
            except ValueError:
                logger.warning("%s: ignoring %s, not a partition directory", log_dir, child.name)
                continue
            if suffix == layout.FUTURE_DIR_SUFFIX:
                self._found_futures.append((tp, child))
                continue
            if suffix == layout.DELETE_DIR_SUFFIX:
                self._committed_swaps.add(layout.special_dir_uid(child.name))
                logger.info("%s: removing %s, a partition deleted earlier", log_dir, child.name)
                shutil.rmtree(child, ignore_errors=True)
                continue
            if suffix == layout.STRAY_DIR_SUFFIX:
                logger.warning(
                    "%s: keeping %s, a stray partition the topic metadata did not name (not loaded; remove it"
                    " once sure its data is not needed)",
                    log_dir,
                    child.name,
                )
                continue
            if suffix:
                logger.warning("%s: ignoring %s (%s logs are not supported yet)", log_dir, child.name, suffix)
                continue
            if tp in self._logs:
                raise LogDirError(f"partition {tp} is in two log dirs: {self._logs[tp].dir} and {child}")
            self._adopt(
                tp,
                self._open_log(
                    child,
                    self._config_for(tp.topic),
                    now_ms=now_ms,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=start_offsets.get(tp, 0),
                    clean_shutdown=clean,
                    high_watermark=high_watermarks.get(tp),
                ),
            )
            self._logs_per_dir[log_dir] += 1
            if progress is not None and self._recovery_progress is not None:
                self._recovery_progress(progress.loaded(child))

    def _settle_futures(self, now_ms: int) -> None:
        """Future dirs found at start-up: a committed swap's becomes the log, the others are futures again."""
        for tp, path in self._found_futures:
            uid = layout.special_dir_uid(path.name)
            if tp not in self._logs and uid in self._committed_swaps:
                target = path.parent / layout.partition_dir_name(tp)
                logger.info(
                    "%s: finishing the move of %s into this dir (its swap had committed)", path.parent, tp
                )
                os.rename(path, target)
                fsync_dir(path.parent)
                self._adopt(
                    tp,
                    self._open_log(
                        target,
                        self._config_for(tp.topic),
                        now_ms=now_ms,
                        clean_shutdown=False,
                    ),
                )
                self._logs_per_dir[path.parent] += 1
            elif tp in self._logs and tp not in self._futures:
                logger.info("%s: resuming the move of %s into this dir", path.parent, tp)
                self._futures[tp] = self._open_log(
                    path,
                    self._config_for(tp.topic),
                    now_ms=now_ms,
                    clean_shutdown=False,
                )
            else:
                logger.warning(
                    "%s: ignoring %s, a future log of a partition without a log", path.parent, path.name
                )
        self._found_futures.clear()
        self._committed_swaps.clear()

    def _open_log(
        self,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: int,
        clean_shutdown: bool,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
    ) -> PartitionLog:
        """:meth:`PartitionLog.open` with what every log of this manager shares: the open-segment limiter
        and the producer id expiration."""
        return PartitionLog.open(
            directory,
            config,
            now_ms=now_ms,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean_shutdown,
            high_watermark=high_watermark,
            limiter=self._limiter,
            producer_id_expiration_ms=self._producer_id_expiration_ms(),
        )

    def _config_for(self, topic: str) -> LogConfig:
        if self._topic_config is not None:
            config = self._topic_config(topic)
            if config is not None:
                return config
        return self._default_config

    # ---- logs -------------------------------------------------------------------------------------

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        return tuple(self._log_dirs)

    @property
    def default_config(self) -> LogConfig:
        return self._default_config

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get(TopicPartition(topic, partition))

    def all_logs(self) -> dict[TopicPartition, PartitionLog]:
        """A snapshot of every log, by topic partition."""
        return dict(self._logs)

    def __iter__(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self._logs.items()))

    def __len__(self) -> int:
        return len(self._logs)

    def _next_log_dir(self) -> Path:
        """The dir holding the fewest logs (first on ties), from counts kept as logs come and go: creating a
        partition costs the same with 10 logs as with 10,000."""
        counts = self._logs_per_dir
        return min(self._log_dirs, key=lambda d: counts[d])

    def create(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        *,
        now_ms: int | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> PartitionLog:
        """The log of ``topic``/``partition``, created (empty, in the dir with fewest logs) if absent
        (Kafka's ``getOrCreateLog``: an existing log is returned unchanged). ``topic_id`` is recorded in its
        ``partition.metadata`` (:class:`~tidelog.storage.partition_metadata.InconsistentTopicIdError` if the
        existing log belongs to another topic id)."""
        layout.validate_topic_name(topic)
        if partition < 0:
            raise ValueError(f"negative partition {partition}")
        tp = TopicPartition(topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            if topic_id is not None:
                write_topic_id(existing.dir, topic_id)
            return existing
        if now_ms is not None:
            self._clock_ms = max(self._clock_ms, now_ms)
        log_dir = self._next_log_dir()
        log = self._open_log(
            log_dir / layout.partition_dir_name(tp),
            config if config is not None else self._config_for(topic),
            now_ms=self._clock_ms,
            clean_shutdown=False,
        )
        if topic_id is not None:
            write_topic_id(log.dir, topic_id)
        fsync_dir(log_dir)
        self._adopt(tp, log)
        self._logs_per_dir[log_dir] += 1
        return log

    # ---- future logs (moving a replica between log dirs) ---------------------------------------------

    def log_dir_of(self, path: str | Path) -> Path | None:
        """The configured log dir that ``path`` names (compared as absolute paths), or None."""
        wanted = Path(path).absolute()
        for log_dir in self._log_dirs:
            if log_dir.absolute() == wanted or log_dir.resolve() == wanted.resolve():
                return log_dir
        return None

    def future(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.get(TopicPartition(topic, partition))

    def all_futures(self) -> dict[TopicPartition, PartitionLog]:
        """A snapshot of every future log, by topic partition."""
        return dict(self._futures)

    def create_future(self, topic: str, partition: int, log_dir: Path, *, now_ms: int) -> PartitionLog:
        """An empty future log of ``topic``/``partition`` in ``log_dir`` (which must not hold its current
        log), starting at the current log's start offset, with its topic id."""
        tp = TopicPartition(topic, partition)
        current = self._logs[tp]
        if current.dir.parent == log_dir:
            raise ValueError(f"{tp} already lives in {log_dir}")
        if tp in self._futures:
            raise ValueError(f"{tp} already has a future log in {self._futures[tp].dir.parent}")
        future = self._open_log(
            log_dir / layout.future_dir_name(tp, uuid.uuid4().hex),
            current.config,
            now_ms=now_ms,
            clean_shutdown=False,
        )
        try:
            if current.log_start_offset != future.log_start_offset:
                future.truncate_fully_and_start_at(current.log_start_offset, now_ms=now_ms)
            topic_id = read_topic_id(current.dir)
            if topic_id is not None:
                write_topic_id(future.dir, topic_id)
            fsync_dir(log_dir)
        except BaseException:
            future.close()
            shutil.rmtree(future.dir, ignore_errors=True)
            raise
        self._futures[tp] = future
        return future

    def abort_future(self, topic: str, partition: int) -> bool:
        """Close and remove the future log of ``topic``/``partition``; whether there was one."""
        future = self._futures.pop(TopicPartition(topic, partition), None)
        if future is None:
            return False
        future.close()
        parent = future.dir.parent
        doomed = parent / layout.delete_dir_name(TopicPartition(topic, partition), uuid.uuid4().hex)
        try:
            os.rename(future.dir, doomed)
            fsync_dir(parent)
        except OSError:
            doomed = future.dir
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def replace_current_with_future(self, topic: str, partition: int, *, now_ms: int) -> PartitionLog:
        """Swap the future log of ``topic``/``partition`` in for its current log, which the future must have
        caught up with (same log end offset; nothing may append in between). The future takes the current's
        log start offset, high watermark and leader epochs, is flushed with its producer snapshot, then the
        two renames of the module docstring; the new log, reopened at its final path, is returned and the old
        dir removed. ``OSError`` from the first rename leaves the current log serving; from anything after,
        the partition has no log here until a restart finishes the swap."""
        tp = TopicPartition(topic, partition)
        current = self._logs[tp]
        future = self._futures[tp]
        if future.log_end_offset != current.log_end_offset:
            raise ValueError(
                f"future log of {tp} ends at {future.log_end_offset}, the current at {current.log_end_offset}"
            )
        future.update_high_watermark(current.high_watermark)
        if future.log_start_offset < current.log_start_offset:
            future.delete_records_before(current.log_start_offset, now_ms=now_ms)
        latest = future.latest_epoch
        for entry in current.leader_epoch_entries:  # an epoch a leader began with no batch yet
            if latest is None or entry.epoch > latest:
                future.maybe_assign_epoch_start_offset(entry.epoch, entry.start_offset)
        high_watermark = current.high_watermark
        log_start = current.log_start_offset
        log_end = future.log_end_offset
        future.flush(now_ms)
        future.take_producer_snapshot()
        current.flush(now_ms)  # so that a failed first rename can reopen it at once
        current.take_producer_snapshot()
        source_parent, target_parent = current.dir.parent, future.dir.parent
        uid = layout.special_dir_uid(future.dir.name)
        doomed = source_parent / layout.delete_dir_name(tp, uid)
        del self._futures[tp]
        del self._logs[tp]
        self._logs_per_dir[source_parent] -= 1
        current.close()  # closing finishes index files by path: before the renames
        future.close()
        try:
            os.rename(current.dir, doomed)
        except OSError:
            self._adopt(tp, self._reopen(current.dir, current.config, current, now_ms))
            self._futures[tp] = self._reopen(future.dir, future.config, future, now_ms)
            self._logs_per_dir[source_parent] += 1
            raise
        fsync_dir(source_parent)  # the commit point: from here a restart finishes the swap
        self.cleaner_checkpoints.remove(tp)
        target = target_parent / layout.partition_dir_name(tp)
        os.rename(future.dir, target)
        fsync_dir(target_parent)
        log = self._open_log(
            target,
            future.config,
            now_ms=now_ms,
            recovery_point=log_end,
            log_start_offset=log_start,
            clean_shutdown=True,
            high_watermark=high_watermark,
        )
        self._adopt(tp, log)
        self._logs_per_dir[target_parent] += 1
        shutil.rmtree(doomed, ignore_errors=True)
        return log

    def _reopen(self, directory: Path, config: LogConfig, closed: PartitionLog, now_ms: int) -> PartitionLog:
        """``closed`` (flushed, snapshotted, closed) opened again at ``directory``."""
        return self._open_log(
            directory,
            config,
            now_ms=now_ms,
            recovery_point=closed.log_end_offset,
            log_start_offset=closed.log_start_offset,
            clean_shutdown=True,
            high_watermark=closed.high_watermark,
        )

    def topic_id(self, topic: str, partition: int) -> uuid.UUID | None:
        """The topic id the log of ``topic``/``partition`` records (None: none recorded, or no such log)."""
        log = self._logs.get(TopicPartition(topic, partition))
        return None if log is None else read_topic_id(log.dir)

    def delete(self, topic: str, partition: int) -> bool:
        """Close the log, rename its dir to ``<topic>-<partition>.<uuid>-delete``, remove it (and its future
        log, if it has one). Returns whether there was such a log."""
        self.abort_future(topic, partition)
        doomed = self._set_aside(TopicPartition(topic, partition), layout.delete_dir_name)
        if doomed is None:
            return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def mark_stray(self, topic: str, partition: int) -> Path | None:
        """Close the log and rename its dir to ``<topic>-<partition>.<uuid>-stray``, keeping its files (Kafka's
        stray logs): it is never loaded again, and nothing deletes it. Returns the new path, or ``None`` if
        there was no such log."""
        self.abort_future(topic, partition)
        return self._set_aside(TopicPartition(topic, partition), layout.stray_dir_name)

    def _set_aside(self, tp: TopicPartition, dir_name: Callable[[TopicPartition, str], str]) -> Path | None:
        """Forget the log, close it and rename its dir to ``dir_name(tp, <uuid>)`` (the parent fsynced), so it
        is never loaded again; the new path, or ``None`` if there was no such log."""
        log = self._logs.pop(tp, None)
        if log is None:
            return None
        log.close()
        self.cleaner_checkpoints.remove(tp)
        parent = log.dir.parent
        self._logs_per_dir[parent] -= 1
        renamed = parent / dir_name(tp, uuid.uuid4().hex)
        os.rename(log.dir, renamed)
        fsync_dir(parent)
        return renamed

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Apply a topic's new config to its logs."""
        for tp, log in self._logs.items():
            if tp.topic == topic:
                log.update_config(config)

    # ---- periodic work ----------------------------------------------------------------------------

    def _adopt(self, tp: TopicPartition, log: PartitionLog) -> None:
        """``log`` becomes the log of ``tp``; the periodic flush visits it until it is idle."""
        self._logs[tp] = log
        self._flush_watch[log] = tp
        watch = self._flush_watch

        def changed() -> None:
            watch[log] = tp

        log.watch_flushes(changed)

    def logs_to_flush(self) -> list[PartitionLog]:
        """The logs the periodic flush must visit (Kafka's ``flushDirtyLogs`` over every log, without the
        idle ones): every log told of a change since it was last found :attr:`PartitionLog.flush_idle`.
        A log idle now is dropped here, and comes back with its next change; one no longer current
        (deleted, replaced) is dropped too. Issue 17: the cost follows the active logs, not all of them."""
        due: list[PartitionLog] = []
        dropped: list[PartitionLog] = []
        for log, tp in self._flush_watch.items():
            if self._logs.get(tp) is not log or log.closed or log.flush_idle:
                dropped.append(log)
            else:
                due.append(log)
        for log in dropped:
            del self._flush_watch[log]
        return due

    def flush_dirty_logs(self, now_ms: int) -> None:
        """``maybe_flush`` every log (Kafka's ``log.flush.scheduler.interval.ms`` task)."""
        for log in self._logs.values():
            log.maybe_flush(now_ms)

    def cleanup_logs(self, now_ms: int) -> int:
        """Retention on every log, then unlink expired ``.deleted`` files; returns segments deleted."""
        deleted = 0
        for log in self._logs.values():
            deleted += log.delete_retention(now_ms)
            log.remove_deleted_files(now_ms)
        return deleted

    def _checkpoint(self, file_name: str, value: Callable[[PartitionLog], int]) -> None:
        per_dir: dict[Path, dict[TopicPartition, int]] = {log_dir: {} for log_dir in self._log_dirs}
        single = self._log_dirs[0] if len(self._log_dirs) == 1 else None
        for tp, log in self._logs.items():
            per_dir[single if single is not None else log.dir.parent][tp] = value(log)
        for log_dir, offsets in per_dir.items():
            if self.log_dir_failures.is_offline(log_dir):
                continue
            path = log_dir / file_name
            if self._checkpointed.get(path) == offsets:
                continue  # this process wrote (and fsynced) exactly this content last: nothing to write
            self._checkpointed.pop(path, None)  # a write that fails leaves the file unknown
            write_offsets_checkpoint(path, offsets)
            self._checkpointed[path] = offsets

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(layout.RECOVERY_POINT_CHECKPOINT_FILE, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(layout.LOG_START_OFFSET_CHECKPOINT_FILE, lambda log: log.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(layout.REPLICATION_OFFSET_CHECKPOINT_FILE, lambda log: log.high_watermark)

    # ---- stop -------------------------------------------------------------------------------------

    def shutdown(self, now_ms: int | None = None) -> None:
        """Clean stop: flush every log and snapshot its producer state, write every checkpoint, close the
        logs, then write
        ``.kafka_cleanshutdown`` in each dir and release the locks."""
        failures = self.log_dir_failures
        for log in self._logs.values():
            if failures.is_offline(log.dir.parent):
                continue  # an offline dir is not written again: the next start recovers it
            try:
                log.flush(now_ms)
                log.take_producer_snapshot()
            except OSError as exc:
                if not takes_dir_offline(exc):
                    raise
                failures.fail(log.dir.parent, str(exc))
                logger.error(
                    "log dir %s is offline after an I/O error on %s: %s", log.dir.parent, log.dir.name, exc
                )
        for future in self._futures.values():
            if not failures.is_offline(future.dir.parent):
                with contextlib.suppress(OSError):  # a future is copied again from its log end if need be
                    future.flush(now_ms)
                    future.take_producer_snapshot()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for log in [*self._logs.values(), *self._futures.values()]:
            with contextlib.suppress(OSError):
                log.close()
        self._futures.clear()
        for log_dir in self._log_dirs:
            if not failures.is_offline(log_dir):
                atomic_write(log_dir / layout.CLEAN_SHUTDOWN_FILE, _CLEAN_SHUTDOWN_CONTENT)
        self._logs.clear()
        self._flush_watch.clear()
        self._logs_per_dir = dict.fromkeys(self._log_dirs, 0)
        self._release_locks()

    def close(self) -> None:
        """Release logs and locks without flush, checkpoints or marker (the next start recovers)."""
        for log in [*self._logs.values(), *self._futures.values()]:
            log.close()
        self._futures.clear()
        self._logs.clear()
        self._flush_watch.clear()
        self._logs_per_dir = dict.fromkeys(self._log_dirs, 0)
        self._release_locks()

    def _release_locks(self) -> None:
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
