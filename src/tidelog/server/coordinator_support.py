"""What the coordinator runtimes (transactions; the group runtime's pattern) share: keyed timers on the
timing wheel driven by one clock task, and reading a coordinator partition's log to load it.

Invariants:

- :class:`KeyedTimers`: scheduling a key replaces its earlier timer; a cancelled or replaced timer never
  fires; a timer fires in :meth:`KeyedTimers.run` only (never inside the call that scheduled it), never
  before its deadline, and at most once; the callback gets ``max(now, deadline)``. An exception in the
  callback is logged and does not stop the clock.
- :func:`read_records`: yields the batches of a partition from its log start up to its log end offset *as
  it is when the reader gets there* (records appended while a load is under way, such as transaction
  markers, are read too), in log order, one read of ``buffer_bytes`` at a time. The log end, not the high
  watermark: a new leader's whole log becomes committed (its followers truncate to it), and a record an
  old leader acknowledged may be above the high watermark a follower knew when it was elected (Kafka's
  loaders read to the log end too). On a single node the two are the same. Each batch is checked
  whole (CRC32C included) before its records are decoded: a damaged one (bit rot in a segment that start-up
  trusted, being below the recovery point) is skipped with a warning naming its offsets, so the state it
  held is lost but the partition's other keys load; it never fails the load, nor replays garbage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Generic, TypeVar

from tidelog.protocol.records import (
    Record,
    RecordBatchHeader,
    RecordError,
    decode_batch,
    iter_batch_headers,
    validate_batch,
)
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.timing_wheel import Timer, TimerTask

__all__ = ["KeyedTimers", "read_records"]

log = logging.getLogger("tidelog.coordinator_support")

K = TypeVar("K", bound=Hashable)


class _KeyedTask(TimerTask, Generic[K]):
    __slots__ = ("deadline_ms", "key")

    def __init__(self, key: K, deadline_ms: int, now_ms: int) -> None:
        super().__init__(deadline_ms - now_ms)
        self.key = key
        self.deadline_ms = deadline_ms


class KeyedTimers(Generic[K]):
    """Timers identified by a key, firing ``on_fire(key, now_ms)`` from :meth:`run`."""

    def __init__(
        self, on_fire: Callable[[K, int], None], *, clock: Callable[[], int], name: str = ""
    ) -> None:
        self._on_fire = on_fire
        self._clock = clock
        self._name = name
        self._timer = Timer(start_ms=clock())
        self._timers: dict[K, _KeyedTask[K]] = {}
        self._due: list[_KeyedTask[K]] = []
        self._wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._timers)

    def __contains__(self, key: object) -> bool:
        return key in self._timers

    def deadline(self, key: K) -> int | None:
        task = self._timers.get(key)
        return None if task is None else task.deadline_ms

    def schedule(self, key: K, deadline_ms: int) -> None:
        now = self._clock()
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        task = _KeyedTask(key, deadline_ms, now)
        self._timers[key] = task
        if not self._timer.add(task, now):
            self._due.append(task)
        self._wakeup.set()

    def cancel(self, key: K) -> None:
        task = self._timers.pop(key, None)
        if task is not None:
            task.cancel()

    def clear(self) -> None:
        for task in self._timers.values():
            task.cancel()
        self._timers.clear()
        self._due.clear()

    async def run(self) -> None:
        """The clock task: fires due timers; sleeps until the next deadline or a new timer."""
        while True:
            now = self._clock()
            expired: list[TimerTask] = self._timer.advance_clock(now)
            if self._due:
                expired.extend(self._due)
                self._due = []
            for task in expired:
                assert isinstance(task, _KeyedTask)
                if self._timers.get(task.key) is not task:
                    continue  # replaced or cancelled
                if task.deadline_ms > now:  # never early: put it back
                    task.delay_ms = task.deadline_ms - now
                    if self._timer.add(task, now):
                        continue
                del self._timers[task.key]
                try:
                    self._on_fire(task.key, max(now, task.deadline_ms))
                except Exception:
                    log.exception("%s timer %s failed", self._name, task.key)
            if self._due:
                continue
            deadline = self._timer.next_expiration_ms()
            timeout = None if deadline is None else max(deadline - self._clock(), 0) / 1000
            self._wakeup.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that arrives in the
            # same turn as the wakeup, and the task would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()


def read_records(
    partition: Partition, buffer_bytes: int
) -> Iterator[list[tuple[RecordBatchHeader, list[Record]]]]:
    """The partition's batches (header and decoded records) from its log start to its current log end
    offset, one list per read of ``buffer_bytes``; records below a read's start offset (the head of a
    batch that straddles it) are left out."""
    offset = partition.log_start_offset
    while offset < partition.log_end_offset:
        data = partition.read(offset, buffer_bytes, isolation=FetchIsolation.LOG_END, min_one_batch=True)
        if not data.regions:
            break
        buf = data.read_bytes()
        chunk: list[tuple[RecordBatchHeader, list[Record]]] = []
        for pos, header in iter_batch_headers(buf):
            try:
                validate_batch(buf, pos)
                _, records = decode_batch(buf, pos)
            except RecordError as exc:
                log.warning(
                    "%s-%d: skipping the damaged batch at offsets %d..%d (%s); the coordinator state it held "
                    "is lost",
                    partition.topic,
                    partition.index,
                    header.base_offset,
                    header.last_offset,
                    exc,
                )
                continue
            chunk.append((header, [r for r in records if r.offset >= offset]))
        offset = data.next_offset
        yield chunk


async def run_partition_loader(
    queue: list[int],
    wakeup: asyncio.Event,
    *,
    is_loading: Callable[[int], bool],
    load: Callable[[int], Awaitable[None]],
    stopped: Callable[[], bool],
    topic: str,
    what: str,
) -> None:
    """Load the coordinator partitions queued in ``queue`` (at start and after failed appends), one at a
    time, each time ``wakeup`` is set; a partition no longer loading is skipped, a failed load is logged
    and leaves that partition's keys (``what``) unavailable."""
    while True:
        await wakeup.wait()
        wakeup.clear()
        while queue and not stopped():
            partition = queue.pop(0)
            if not is_loading(partition):
                continue
            try:
                await load(partition)
            except Exception:
                log.exception("loading %s-%d failed; its %s stay unavailable", topic, partition, what)
