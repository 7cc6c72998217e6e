"""Long-poll fetches waiting in the purgatory, and the asyncio task that drives its clock.

Invariants: a delayed fetch's future is resolved exactly once — by an append that makes it completable
(``on_append`` checks the watchers of that partition), by its ``max_wait_ms`` expiring, or by shutdown —
and always with a response built from a fresh read at that moment. A fetch that watches no partition (a
request whose topics list no partitions) is answered at once, as Kafka's ``fetchMessages`` does for an
empty fetch: nothing could ever wake it. The clock task sleeps until the
purgatory's next expiration and is woken early when an operation with an earlier deadline arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable

from tidelog.protocol.messages import FetchResponse

from .clock import Clock
from .delayed_operations import AsyncPurgatory
from .purgatory import DelayedOperation

__all__ = ["DelayedFetch", "FetchPurgatory"]

log = logging.getLogger("tidelog.fetch_purgatory")


class DelayedFetch(DelayedOperation):
    """A fetch that waits for ``min_bytes`` of new data or for ``max_wait_ms``."""

    def __init__(
        self,
        delay_ms: int,
        enough: Callable[[], bool],
        build: Callable[[], FetchResponse],
        future: asyncio.Future[FetchResponse],
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
        self._operations: AsyncPurgatory[DelayedFetch] = AsyncPurgatory("Fetch", clock)

    def delay(
        self,
        keys: Iterable[Hashable],
        max_wait_ms: int,
        enough: Callable[[], bool],
        build: Callable[[], FetchResponse],
    ) -> asyncio.Future[FetchResponse]:
        future: asyncio.Future[FetchResponse] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        if not keys:
            future.set_result(build())
            return future
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
