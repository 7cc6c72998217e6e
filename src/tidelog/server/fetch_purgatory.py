"""Long-poll fetches waiting in the purgatory, and the asyncio task that drives its clock.

Invariants: a delayed fetch's future is resolved exactly once — by an append that makes it completable
(``on_append`` checks the watchers of that partition), by its ``max_wait_ms`` expiring, or by shutdown —
and always with a response built from a fresh read at that moment. The clock task sleeps until the
purgatory's next expiration and is woken early when an operation with an earlier deadline arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from .clock import Clock
from .delayed_operations import AsyncPurgatory
from .purgatory import DelayedOperation

__all__ = ["DelayedFetch", "FetchPurgatory"]

log = logging.getLogger("tidelog.fetch_purgatory")


R = TypeVar("R")


class DelayedFetch(DelayedOperation, Generic[R]):
    """A fetch that waits for ``min_bytes`` of new data (or, a ShareFetch, for records to acquire) or for
    ``max_wait_ms``."""

    def __init__(
        self,
        delay_ms: int,
        enough: Callable[[], bool],
        build: Callable[[], R],
        future: asyncio.Future[R],
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
    """Delayed fetches (Fetch and ShareFetch) keyed by (topic, partition)."""

    def __init__(self, clock: Clock) -> None:
        self._operations: AsyncPurgatory[DelayedFetch[Any]] = AsyncPurgatory("Fetch", clock)

    def delay(
        self,
        keys: Iterable[Hashable],
        max_wait_ms: int,
        enough: Callable[[], bool],
        build: Callable[[], R],
    ) -> asyncio.Future[R]:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._operations.delay(DelayedFetch(max_wait_ms, enough, build, future), keys)
        return future

    def on_append(self, key: Hashable) -> None:
        """Data or the high watermark or last stable offset of ``key`` moved: check its waiting fetches."""
        self._operations.check(key)

    @property
    def delayed(self) -> int:
        """Fetches waiting now (logs, metrics, tests)."""
        return self._operations.delayed

    def complete_all(self) -> None:
        """Shutdown: answer every waiting fetch now with what is there."""
        self._operations.complete_all()

    async def run(self) -> None:
        await self._operations.run()
