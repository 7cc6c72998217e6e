"""Long-poll fetches waiting in the purgatory, and the asyncio task that drives its clock.

Invariants: a delayed fetch's future is resolved exactly once — by an append that makes it completable
(``on_append`` checks the watchers of that partition), by its ``max_wait_ms`` expiring, or by shutdown —
and always with a response built from a fresh read at that moment. The clock task sleeps until the
purgatory's next expiration and is woken early when an operation with an earlier deadline arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .clock import Clock
from .purgatory import DelayedOperation, DelayedOperationPurgatory

__all__ = ["DelayedFetch", "FetchPurgatory"]

log = logging.getLogger("tidelog.fetch_purgatory")


class DelayedFetch(DelayedOperation):
    """A fetch that waits for ``min_bytes`` of new data or for ``max_wait_ms``."""

    def __init__(
        self,
        delay_ms: int,
        enough: Callable[[], bool],
        build: Callable[[], Any],
        future: asyncio.Future[Any],
    ) -> None:
        super().__init__(delay_ms)
        self._enough = enough
        self._build = build
        self._future = future

    def try_complete(self) -> bool:
        if self._future.done():  # the connection went away: nothing to answer
            return self.force_complete()
        if self._enough():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self._future.done():
            return
        try:
            self._future.set_result(self._build())
        except Exception as exc:  # noqa: BLE001 - a broker bug: the connection logs and closes
            self._future.set_exception(exc)

    def on_expiration(self) -> None:
        pass


class FetchPurgatory:
    """Delayed fetches keyed by (topic, partition)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._purgatory: DelayedOperationPurgatory[Hashable, DelayedFetch] = DelayedOperationPurgatory(
            "Fetch", start_ms=clock.now_ms()
        )
        self._wakeup = asyncio.Event()
        self._next_deadline: int | None = None

    def delay(
        self, keys: Iterable[Hashable], max_wait_ms: int, enough: Callable[[], bool], build: Callable[[], Any]
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        operation = DelayedFetch(max_wait_ms, enough, build, future)
        now = self._clock.now_ms()
        if not self._purgatory.try_complete_else_watch(operation, list(keys), now):
            deadline = now + max_wait_ms
            if self._next_deadline is None or deadline < self._next_deadline:
                self._wakeup.set()
        return future

    def on_append(self, key: Hashable) -> None:
        self._purgatory.check_and_complete(key)

    def complete_all(self) -> None:
        """Shutdown: answer every waiting fetch now with what is there."""
        for operation in self._purgatory.cancel_all():
            operation.force_complete()

    async def run(self) -> None:
        while True:
            self._purgatory.advance_clock(self._clock.now_ms())
            self._next_deadline = self._purgatory.next_expiration_ms()
            timeout = (
                None
                if self._next_deadline is None
                else max(self._next_deadline - self._clock.now_ms(), 0) / 1000
            )
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
