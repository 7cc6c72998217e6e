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
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from .clock import Clock
from .purgatory import DelayedOperation, DelayedOperationPurgatory

__all__ = ["AsyncPurgatory"]

Op = TypeVar("Op", bound=DelayedOperation)


class AsyncPurgatory(Generic[Op]):
    """Delayed operations of one kind, watched by key; see the module docstring."""

    def __init__(self, name: str, clock: Clock) -> None:
        self._clock = clock
        self._purgatory: DelayedOperationPurgatory[Hashable, Op] = DelayedOperationPurgatory(
            name, start_ms=clock.now_ms()
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: contextvars.Context | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_ms: int | None = None
        """The expiration the armed timer is for (None: not armed)."""

    def delay(self, operation: Op, keys: Iterable[Hashable]) -> bool:
        """Complete ``operation`` now if it can be (True), else watch it under ``keys`` until it can or its
        delay runs out (False)."""
        now = self._clock.now_ms()
        if self._purgatory.try_complete_else_watch(operation, keys, now):
            return True
        if self._loop is not None and (self._timer_ms is None or now + operation.delay_ms < self._timer_ms):
            self._arm()
        return False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop :meth:`run` runs in (None: not running): a caller's futures belong to it, without asking
        asyncio for the running loop per operation (a ``getpid`` each)."""
        return self._loop

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
        loop = asyncio.get_running_loop()
        self._loop, self._context = loop, contextvars.copy_context()
        try:
            self._expire_due()
            await loop.create_future()  # the timer callbacks do the work
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self._loop = self._context = self._timer = self._timer_ms = None

    def _expire_due(self) -> None:
        """The timer callback: expire what is due, then arm the timer for the next expiration."""
        self._timer = self._timer_ms = None
        try:
            self._purgatory.advance_clock(self._clock.now_ms())
        finally:
            if self._loop is not None:
                self._arm()

    def _arm(self) -> None:
        """(Re)arm the timer for the purgatory's earliest expiration, unless it is armed for that or earlier."""
        loop = self._loop
        assert loop is not None
        due = self._purgatory.next_expiration_ms()
        if due is None:
            return
        if self._timer is not None:
            assert self._timer_ms is not None
            if self._timer_ms <= due:
                return
            self._timer.cancel()
        # Never early: ``due`` is a whole millisecond of the broker clock and ``now_ms`` rounds down; a timer
        # the loop fires a little early finds nothing due and re-arms.
        delay = max(due - self._clock.now_ms(), 0) / 1000
        self._timer = loop.call_later(delay, self._expire_due, context=self._context)
        self._timer_ms = due
