"""Hierarchical timing wheel with a delay queue of buckets (Kafka's ``TimingWheel`` / ``SystemTimer``).

A wheel has ``wheel_size`` buckets, each ``tick_ms`` wide, and covers ``interval = tick_ms * wheel_size``
milliseconds from its ``current_time_ms``. A task too far in the future goes to an overflow wheel whose tick
is the lower wheel's interval; overflow wheels are created lazily, so a one-day delay costs a few levels,
not a day of ticks. Every non-empty bucket sits in a heap (the delay queue) keyed by its expiration, so
advancing the clock costs O(expired buckets * log buckets), independent of how much time passed.

Invariants:

- Pure: no asyncio, no wall clock. Time comes in as ``now_ms`` (any monotonic millisecond clock) and
  expired tasks are returned, never run, by :meth:`Timer.advance_clock`.
- A task is in at most one bucket; :meth:`TimerTask.cancel` removes it in O(1), and a cancelled task is
  never returned as expired.
- A task expires no earlier than ``floor(expiration_ms / tick_ms) * tick_ms`` and is returned by the first
  ``advance_clock(now_ms)`` with ``now_ms`` at or past that, and by no later one (exactly once).
- After :meth:`Timer.advance_clock` every bucket left in the delay queue expires after ``now_ms``; only then
  does the wheels' clock move, so a bucket never mixes two rotations of the wheel.
"""

from __future__ import annotations

import heapq
import itertools

__all__ = ["Timer", "TimerTask"]


class TimerTask:
    """Something that fires ``delay_ms`` after it is added to a :class:`Timer` (unless cancelled)."""

    __slots__ = ("_entry", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._entry: _TimerTaskEntry | None = None

    def cancel(self) -> None:
        """Remove the task from its timer, if scheduled; idempotent."""
        entry = self._entry
        if entry is not None:
            entry.remove()
        self._entry = None

    @property
    def is_scheduled(self) -> bool:
        return self._entry is not None and self._entry.bucket is not None

    def _set_entry(self, entry: _TimerTaskEntry) -> None:
        # A task lives in one entry only: re-adding a scheduled task moves it.
        if self._entry is not None and self._entry is not entry:
            self._entry.remove()
        self._entry = entry


class _TimerTaskEntry:
    __slots__ = ("bucket", "expiration_ms", "task")

    def __init__(self, task: TimerTask, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.bucket: _Bucket | None = None
        task._set_entry(self)

    @property
    def cancelled(self) -> bool:
        return self.task._entry is not self

    def remove(self) -> None:
        if self.bucket is not None:
            self.bucket.remove(self)


class _Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class _Bucket:
    """Kafka's ``TimerTaskList``: the entries of one wheel slot for one rotation, with its expiration."""

    __slots__ = ("counter", "entries", "expiration_ms")

    def __init__(self, counter: _Counter) -> None:
        self.counter = counter
        self.entries: dict[_TimerTaskEntry, None] = {}  # insertion-ordered set, O(1) removal
        self.expiration_ms = -1

    def add(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is not None:
            entry.remove()
        self.entries[entry] = None
        entry.bucket = self
        self.counter.value += 1

    def remove(self, entry: _TimerTaskEntry) -> None:
        if entry.bucket is self:
            del self.entries[entry]
            entry.bucket = None
            self.counter.value -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True if it changed (the bucket must then be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> list[_TimerTaskEntry]:
        entries = list(self.entries)
        for entry in entries:
            self.remove(entry)
        self.expiration_ms = -1
        return entries


class _DelayQueue:
    """Min-heap of buckets by expiration. A record whose bucket's expiration moved on is stale and skipped;
    a bucket emptied by cancellations is retired when it reaches the top."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, _Bucket]] = []
        self._seq = itertools.count()

    def offer(self, bucket: _Bucket) -> None:
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._seq), bucket))

    def peek_expiration(self) -> int | None:
        """The earliest expiration of a live, non-empty bucket; drops stale records and emptied buckets."""
        heap = self._heap
        while heap:
            expiration, _, bucket = heap[0]
            if bucket.expiration_ms == expiration and bucket.entries:
                return expiration
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration:  # every entry was cancelled: retire the bucket
                bucket.expiration_ms = -1
        return None

    def poll_expired(self, now_ms: int) -> _Bucket | None:
        expiration = self.peek_expiration()
        if expiration is None or expiration > now_ms:
            return None
        return heapq.heappop(self._heap)[2]

    def __len__(self) -> int:
        return len(self._heap)


class _TimingWheel:
    __slots__ = (
        "buckets",
        "counter",
        "current_time_ms",
        "interval_ms",
        "overflow",
        "queue",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self, tick_ms: int, wheel_size: int, start_ms: int, counter: _Counter, queue: _DelayQueue
    ) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms  # a multiple of tick_ms
        self.counter = counter
        self.queue = queue
        self.buckets = [_Bucket(counter) for _ in range(wheel_size)]
        self.overflow: _TimingWheel | None = None

    def add(self, entry: _TimerTaskEntry) -> bool:
        """Place ``entry``; False if it has already expired (or was cancelled) and so was not placed."""
        expiration = entry.expiration_ms
        if entry.task._entry is not entry:  # cancelled (the property, inline: once per long poll)
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self.queue.offer(bucket)
            return True
        if self.overflow is None:
            self.overflow = _TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self.counter, self.queue
            )
        return self.overflow.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_time_ms)

    @property
    def levels(self) -> int:
        return 1 + (self.overflow.levels if self.overflow is not None else 0)


class Timer:
    """Kafka's ``SystemTimer`` without threads: add tasks, advance the clock, collect what expired.

    ``tick_ms=1, wheel_size=20`` are Kafka's purgatory defaults.
    """

    __slots__ = ("_counter", "_queue", "_wheel")

    def __init__(self, *, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"tick_ms must be >= 1 and wheel_size >= 2, got {tick_ms} and {wheel_size}")
        self._counter = _Counter()
        self._queue = _DelayQueue()
        self._wheel = _TimingWheel(tick_ms, wheel_size, start_ms, self._counter, self._queue)

    def add(self, task: TimerTask, now_ms: int) -> bool:
        """Schedule ``task`` to expire at ``now_ms + task.delay_ms``.

        Returns False, scheduling nothing, if that moment is not in the future (``delay_ms <= 0``, or within
        the current tick): the caller should treat the task as expired now.
        """
        expiration = now_ms + task.delay_ms
        entry = _TimerTaskEntry(task, expiration)
        if expiration <= now_ms or not self._wheel.add(entry):
            task._entry = None
            return False
        return True

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        """Expire every bucket due at ``now_ms``; returns the expired tasks in expiration order."""
        expired: list[TimerTask] = []
        while (bucket := self._queue.poll_expired(now_ms)) is not None:
            self._wheel.advance_clock(bucket.expiration_ms)
            for entry in bucket.flush():
                # Re-inserting cascades an overflow wheel's entries into finer wheels, or expires them.
                if not self._wheel.add(entry) and not entry.cancelled:
                    entry.task._entry = None
                    expired.append(entry.task)
        self._wheel.advance_clock(now_ms)
        return expired

    def next_expiration_ms(self) -> int | None:
        """When the earliest bucket is due (None if nothing is scheduled): the caller's sleep deadline."""
        return self._queue.peek_expiration()

    @property
    def size(self) -> int:
        """Number of scheduled (not cancelled, not expired) tasks."""
        return self._counter.value

    def __len__(self) -> int:
        return self._counter.value

    @property
    def levels(self) -> int:
        """How many wheels exist (1 plus the overflow wheels created so far)."""
        return self._wheel.levels
