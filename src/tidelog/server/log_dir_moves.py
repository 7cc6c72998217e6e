"""This broker's log dirs as DescribeLogDirs shows them, and moving a replica between them
(AlterReplicaLogDirs): Kafka's ``ReplicaManager.describeLogDirs`` / ``alterReplicaLogDirs`` and its
``ReplicaAlterLogDirsManager``.

Invariants:

- A move is a future log in the target dir (:meth:`LogManager.create_future`) and one copy task on the event
  loop (everything that touches a ``PartitionLog`` runs there, as the cleaner's rule says). Each step copies
  at most ``chunk_bytes`` of whole batches (:func:`~tidelog.storage.future_log_copy.copy_step`) and then
  yields, so a move never holds the loop for more than one chunk and requests are served meanwhile. The step
  that finds the future caught up swaps it in within the same loop turn (nothing can append in between):
  :meth:`LogManager.replace_current_with_future`, then the partition serves the new log and the dirs'
  checkpoints are written.
- A move to the dir the replica is in is accepted and cancels a move elsewhere; a move to another dir
  replaces a move in progress (Kafka's ``futureReplicaDirChanged``). Future logs found at start-up are moved
  on (:meth:`start`).
- Errors as Kafka answers them: LOG_DIR_NOT_FOUND for a path that is not one of ``log.dirs``,
  KAFKA_STORAGE_ERROR while any log dir is offline (no future log is created then) or for an offline
  replica, REPLICA_NOT_AVAILABLE for a partition this broker does not host.
- All moves together copy at most ``rate()`` bytes per second on average (Kafka's
  ``replica.alter.log.dirs.io.max.bytes.per.second``, read before each step so a dynamic change applies at
  once): a :class:`Throttler` counts the bytes copied and the task sleeps (on the loop, never blocking it)
  when a check period ran too fast.
- An I/O error during a move takes the dir it happened in offline (:meth:`ReplicaManager.log_dir_failed`);
  a failed target dir ends the move, the replica stays where it was.
- Offset lag as Kafka reports it: a current log's is ``max(high watermark - log end, 0)`` (0 here), a future
  log's is how far its log end is behind the current log's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.storage.errors import StorageError
from tidelog.storage.future_log_copy import copy_step
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog

from .clock import Clock
from .replica_manager import ReplicaManager
from .throttler import Throttler

__all__ = ["LogDirDescription", "LogDirMoves", "ReplicaDescription"]

log = logging.getLogger("tidelog.log_dir_moves")

DEFAULT_CHUNK_BYTES: Final = 1 << 20
"""Bytes copied per step of a move before the loop is yielded (the broker passes ``replica.fetch.max.bytes``,
what Kafka's alter-log-dirs fetcher reads at a time)."""


_UNLIMITED: Final = float(2**63 - 1)
"""Kafka's default rate (Long.MaxValue): no throttle."""


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error: ErrorCode
    total_bytes: int
    usable_bytes: int
    replicas: tuple[ReplicaDescription, ...]


class LogDirMoves:
    """DescribeLogDirs' facts and AlterReplicaLogDirs' moves; see the module docstring."""

    def __init__(
        self,
        replicas: ReplicaManager,
        logs: LogManager,
        clock: Clock,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        rate: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        """``rate``: the bytes per second all moves may copy (None: unlimited); ``sleep`` and ``clock_ns``
        are the throttle's (tests)."""
        self._replicas = replicas
        self._logs = logs
        self._clock = clock
        self.chunk_bytes = chunk_bytes
        self._rate = rate
        self._sleep = sleep
        self._clock_ns = clock_ns
        self._throttler: Throttler | None = None
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        self.moves_completed = 0

    # -- describing -------------------------------------------------------------------------------------

    def describe(self, wanted: Mapping[str, Collection[int]] | None = None) -> list[LogDirDescription]:
        """Every log dir in ``log.dirs`` order: offline ones with KAFKA_STORAGE_ERROR and nothing else, online
        ones with their volume's size and free space and the replicas (current and future) in them that
        ``wanted`` names (None: all)."""
        failures = self._logs.log_dir_failures
        logs = self._logs.all_logs()
        futures = self._logs.all_futures()
        per_dir: dict[Path, list[ReplicaDescription]] = {d: [] for d in self._logs.log_dirs}
        for tp, plog in sorted(logs.items()):
            if wanted is None or tp.partition in wanted.get(tp.topic, ()):
                lag = max(plog.high_watermark - plog.log_end_offset, 0)
                per_dir.setdefault(plog.dir.parent, []).append(
                    ReplicaDescription(tp.topic, tp.partition, plog.size_in_bytes, lag, False)
                )
        for tp, future in sorted(futures.items()):
            current = logs.get(tp)
            if current is not None and (wanted is None or tp.partition in wanted.get(tp.topic, ())):
                lag = max(current.log_end_offset - future.log_end_offset, 0)
                per_dir.setdefault(future.dir.parent, []).append(
                    ReplicaDescription(tp.topic, tp.partition, future.size_in_bytes, lag, True)
                )
        out = []
        for log_dir in self._logs.log_dirs:
            path = str(log_dir.absolute())
            if failures.is_offline(log_dir):
                out.append(LogDirDescription(path, ErrorCode.KAFKA_STORAGE_ERROR, -1, -1, ()))
                continue
            try:
                stat = os.statvfs(log_dir)
                total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
            except OSError:
                total = usable = -1
            out.append(LogDirDescription(path, ErrorCode.NONE, total, usable, tuple(per_dir[log_dir])))
        return out

    # -- moving -----------------------------------------------------------------------------------------

    def alter(self, topic: str, index: int, path: str) -> ErrorCode:
        """Move the replica of ``topic-index`` into the log dir ``path`` (see the module docstring)."""
        target = self._logs.log_dir_of(path)
        if target is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        failures = self._logs.log_dir_failures
        if failures.is_offline(target):
            return ErrorCode.KAFKA_STORAGE_ERROR
        current = self._logs.get(topic, index)
        if current is None or self._replicas.get(topic, index) is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if failures.is_offline(current.dir.parent):
            return ErrorCode.KAFKA_STORAGE_ERROR
        tp = TopicPartition(topic, index)
        future = self._logs.future(topic, index)
        if future is not None and future.dir.parent != target:
            self._cancel(tp)
            future = None
        if current.dir.parent == target or future is not None:
            return ErrorCode.NONE
        if failures:
            return ErrorCode.KAFKA_STORAGE_ERROR  # no future log while a dir is offline (Kafka's rule)
        try:
            self._logs.create_future(topic, index, target, now_ms=self._clock.now_ms())
        except OSError as exc:
            self._replicas.log_dir_failed(target, f"the future log of {tp.topic}-{tp.partition}", exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        log.info("%s-%d: moving from %s to %s", topic, index, current.dir.parent, target)
        self._start(tp)
        return ErrorCode.NONE

    def start(self) -> None:
        """Move on the future logs the log manager found at start-up."""
        for tp in self._logs.all_futures():
            self._start(tp)

    def _start(self, tp: TopicPartition) -> None:
        if tp not in self._tasks:
            self._tasks[tp] = asyncio.get_running_loop().create_task(self._move(tp))

    def _cancel(self, tp: TopicPartition) -> None:
        task = self._tasks.pop(tp, None)
        if task is not None:
            task.cancel()
        self._logs.abort_future(tp.topic, tp.partition)

    async def _move(self, tp: TopicPartition) -> None:
        future = self._logs.future(tp.topic, tp.partition)
        try:
            while future is not None:
                current = self._logs.get(tp.topic, tp.partition)
                if current is None or self._logs.future(tp.topic, tp.partition) is not future:
                    return  # deleted, or replaced by another move
                failures = self._logs.log_dir_failures
                if failures.is_offline(current.dir.parent) or failures.is_offline(future.dir.parent):
                    return
                try:
                    copied = copy_step(
                        current, future, max_bytes=self.chunk_bytes, now_ms=self._clock.now_ms()
                    )
                    if not copied:
                        self._swap(tp)
                        return
                except (OSError, StorageError, ValueError) as exc:
                    self._failed(tp, current, future, exc)
                    return
                await self._throttle(copied)
        finally:
            if self._tasks.get(tp) is asyncio.current_task():
                del self._tasks[tp]

    async def _throttle(self, copied: int) -> None:
        """Yield the loop; sleep if the moves copied faster than the rate allows."""
        rate = self._rate() if self._rate is not None else None
        if rate is None or rate >= _UNLIMITED:
            self._throttler = None
            await asyncio.sleep(0)
            return
        if self._throttler is None or self._throttler.desired_rate_per_sec != rate:
            self._throttler = Throttler(rate, clock_ns=self._clock_ns)
        pauses: list[float] = []
        self._throttler.maybe_throttle(copied, pauses.append)
        await (self._sleep(pauses[0]) if pauses else asyncio.sleep(0))

    def _swap(self, tp: TopicPartition) -> None:
        partition = self._replicas.get(tp.topic, tp.partition)
        source = self._logs.get(tp.topic, tp.partition)
        moved = self._logs.replace_current_with_future(tp.topic, tp.partition, now_ms=self._clock.now_ms())
        if partition is not None:
            partition.replace_log(moved)
        with contextlib.suppress(OSError):
            self._logs.checkpoint_recovery_points()
            self._logs.checkpoint_log_start_offsets()
            self._logs.checkpoint_high_watermarks()
        self.moves_completed += 1
        log.info(
            "%s-%d: moved from %s to %s (log end offset %d)",
            tp.topic,
            tp.partition,
            source.dir.parent if source is not None else "?",
            moved.dir.parent,
            moved.log_end_offset,
        )

    def _failed(
        self, tp: TopicPartition, current: PartitionLog, future: PartitionLog, exc: Exception
    ) -> None:
        """An error while moving ``tp``: the dir it happened in goes offline (an I/O error), the move ends."""
        where = future.dir.parent
        seen: BaseException | None = exc
        while seen is not None:
            name = getattr(seen, "filename", None)
            if isinstance(name, str | os.PathLike) and Path(name).is_relative_to(current.dir.parent):
                where = current.dir.parent
            seen = seen.__cause__
        log.error("%s-%d: moving to %s failed", tp.topic, tp.partition, future.dir.parent, exc_info=exc)
        self._replicas.log_dir_failed(where, f"{tp.topic}-{tp.partition}", exc)
        if where == future.dir.parent:
            with contextlib.suppress(OSError):
                self._logs.abort_future(tp.topic, tp.partition)

    def moving(self) -> set[TopicPartition]:
        """The partitions with a move under way."""
        return set(self._tasks)

    def tasks(self) -> list[asyncio.Task[None]]:
        """The copy tasks under way (tests await them)."""
        return list(self._tasks.values())

    def shutdown(self) -> None:
        """Broker stop: the copies stop where they are (their future logs are moved on after a restart)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
