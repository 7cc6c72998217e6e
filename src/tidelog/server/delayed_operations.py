"""A purgatory on the event loop: delayed operations watched by key, and the task that expires them.

Wraps the pure :class:`~tidelog.server.purgatory.DelayedOperationPurgatory` (Kafka's) with the broker's
clock and one asyncio task. The fetch purgatory (long polls) and the produce purgatory (acks=all) are two
of these.

Invariants: an operation handed to :meth:`AsyncPurgatory.delay` is completed exactly once: at once if it
can be, by :meth:`AsyncPurgatory.check` of a key it watches, by its delay expiring, or by
:meth:`AsyncPurgatory.complete_all` at shutdown. The clock task sleeps until the purgatory's next
expiration and is woken early when an operation with an earlier deadline arrives; it never fires an
operation before its deadline.

The clock is one timer handle of the event loop (``call_later``), not a task waiting on an event under a
timeout: an empty fetch costs one timer callback, with no task switches, futures or cancellations (issue 17,
per-request cost). The handle is armed only while :meth:`AsyncPurgatory.run` runs, for the earliest pending
expiration, in the context :meth:`run` was called in (never in the request's that happened to arm it).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from .clock import Clock
from .purgatory import DelayedOperation, DelayedOperationPurgatory

__all__ = ["AsyncPurgatory", "DeadlineTimer"]

Op = TypeVar("Op", bound=DelayedOperation)


class AsyncPurgatory(Generic[Op]):
    """Delayed operations of one kind, watched by key; see the module docstring."""

    def __init__(self, name: str, clock: Clock) -> None:
        self._clock = clock
        self._purgatory: DelayedOperationPurgatory[Hashable, Op] = DelayedOperationPurgatory(
            name, start_ms=clock.now_ms()
        )
        self._timer = DeadlineTimer(clock, self._expire_due)
        """Armed for the purgatory's earliest expiration."""

    def delay(self, operation: Op, keys: Iterable[Hashable]) -> bool:
        """Complete ``operation`` now if it can be (True), else watch it under ``keys`` until it can or its
        delay runs out (False)."""
        now = self._clock.now_ms()
        if self._purgatory.try_complete_else_watch(operation, keys, now):
            return True
        timer = self._timer
        if timer.loop is not None and (timer.due_ms is None or now + operation.delay_ms < timer.due_ms):
            timer.arm(self._purgatory.next_expiration_ms())
        return False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop :meth:`run` runs in (None: not running): a caller's futures belong to it, without asking
        asyncio for the running loop per operation (a ``getpid`` each)."""
        return self._timer.loop

    @property
    def watch_lists(self) -> Mapping[Hashable, object]:
        """The purgatory's watch lists by key, live: a key not in it has nothing for :meth:`check` to do."""
        return self._purgatory.watch_lists

    def check(self, key: Hashable) -> int:
        """Something the operations watching ``key`` wait on changed; returns how many completed."""
        return self._purgatory.check_and_complete(key)

    def complete_all(self) -> None:
        """Shutdown: complete every waiting operation now."""
        for operation in self._purgatory.cancel_all():
            operation.force_complete()

    @property
    def delayed(self) -> int:
        return self._purgatory.delayed

    async def run(self) -> None:
        """The clock: expires operations when due, until cancelled."""
        self._timer.start()
        try:
            self._expire_due()
            await asyncio.get_running_loop().create_future()  # the timer callbacks do the work
        finally:
            self._timer.stop()

    def _expire_due(self) -> None:
        """The timer callback: expire what is due, then arm the timer for the next expiration."""
        self._timer.fired()
        try:
            self._purgatory.advance_clock(self._clock.now_ms())
        finally:
            self._timer.arm(self._purgatory.next_expiration_ms())


class DeadlineTimer:
    """One event-loop timer for the earliest of some deadlines in broker-clock milliseconds: what the
    purgatory's clock and the fetch purgatory's parked long polls each keep. Armed only between
    :meth:`start` and :meth:`stop`, in the context :meth:`start` was called in; never fires before the
    deadline it was armed for (a callback that fires a little early finds nothing due and arms again)."""

    __slots__ = ("_callback", "_clock", "_context", "_handle", "due_ms", "loop")

    def __init__(self, clock: Clock, callback: Callable[[], None]) -> None:
        self._clock = clock
        self._callback = callback
        self.loop: asyncio.AbstractEventLoop | None = None
        """The running loop between :meth:`start` and :meth:`stop` (None: not running)."""
        self._context: contextvars.Context | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.due_ms: int | None = None
        """The deadline the armed timer is for (None: not armed)."""

    def start(self) -> None:
        """Take the running loop and the caller's context."""
        self.loop, self._context = asyncio.get_running_loop(), contextvars.copy_context()

    def stop(self) -> None:
        """Disarm and forget the loop."""
        if self._handle is not None:
            self._handle.cancel()
        self.loop = self._context = self._handle = self.due_ms = None

    def fired(self) -> None:
        """The callback runs: the timer is no longer armed."""
        self._handle = self.due_ms = None

    def arm(self, due: int | None) -> None:
        """Fire the callback at ``due`` (None: nothing due) unless the timer is armed for that or earlier, or
        not running."""
        loop = self.loop
        if due is None or loop is None:
            return
        if self._handle is not None:
            assert self.due_ms is not None
            if self.due_ms <= due:
                return
            self._handle.cancel()
        # Never early: ``due`` is a whole millisecond of the broker clock and ``now_ms`` rounds down.
        delay = max(due - self._clock.now_ms(), 0) / 1000
        self._handle = loop.call_later(delay, self._callback, context=self._context)
        self.due_ms = due
