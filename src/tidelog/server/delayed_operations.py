"""A purgatory on the event loop: delayed operations watched by key, and the task that expires them.

Wraps the pure :class:`~tidelog.server.purgatory.DelayedOperationPurgatory` (Kafka's) with the broker's
clock and one asyncio task. The fetch purgatory (long polls) and the produce purgatory (acks=all) are two
of these.

Invariants: an operation handed to :meth:`AsyncPurgatory.delay` is completed exactly once: at once if it
can be, by :meth:`AsyncPurgatory.check` of a key it watches, by its delay expiring, or by
:meth:`AsyncPurgatory.complete_all` at shutdown. The clock task sleeps until the purgatory's next
expiration and is woken early when an operation with an earlier deadline arrives; it never fires an
operation before its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._wakeup = asyncio.Event()
        self._next_deadline: int | None = None

    def delay(self, operation: Op, keys: Iterable[Hashable]) -> bool:
        """Complete ``operation`` now if it can be (True), else watch it under ``keys`` until it can or its
        delay runs out (False)."""
        now = self._clock.now_ms()
        if self._purgatory.try_complete_else_watch(operation, list(keys), now):
            return True
        deadline = now + operation.delay_ms
        if self._next_deadline is None or deadline < self._next_deadline:
            self._wakeup.set()
        return False

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
        """The clock task: expires operations when due."""
        while True:
            self._purgatory.advance_clock(self._clock.now_ms())
            self._next_deadline = self._purgatory.next_expiration_ms()
            timeout = (
                None
                if self._next_deadline is None
                else max(self._next_deadline - self._clock.now_ms(), 0) / 1000
            )
            self._wakeup.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that arrives in the
            # same turn as the wakeup, and the task would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
