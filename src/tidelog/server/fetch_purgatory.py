"""Long-poll fetches waiting in the purgatory, and the asyncio task that drives its clock.

Invariants: a delayed fetch's future is resolved exactly once — by a change to one of its partitions that
makes it completable (:meth:`FetchPurgatory.appended` / :meth:`FetchPurgatory.on_append` check only the
watchers of that partition, and each asks its :class:`~tidelog.server.fetch_wait.FetchWait` about that
partition alone, O(1), without reading the log), by its ``max_wait_ms`` expiring, or by shutdown — and
always with a response built once, from a fresh read at that moment of the partitions that changed while
it waited (the others answered as they were when it parked; fetches completed by the same change share
their reads of one partition at one offset: read once, not once per consumer; sessionless consumers that
asked the same thing share one answer, :mod:`tidelog.server.shared_reads`). A fetch that watches no
partition (a request whose topics list no partitions) is answered at once, as Kafka's ``fetchMessages`` does
for an empty fetch: nothing could ever wake it. The clock task sleeps until the
purgatory's next expiration and is woken early when an operation with an earlier deadline arrives.

A ShareFetch waits here too, for records it can acquire: its :class:`PredicateWait` asks one predicate on
any change of its partitions (and once when it is parked), so the purgatory is generic over the response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from .appended_bytes import AppendedBytes
from .clock import Clock
from .delayed_operations import AsyncPurgatory
from .purgatory import DelayedOperation
from .shared_reads import SharedReads

__all__ = ["DelayedFetch", "FetchCondition", "FetchPurgatory", "PredicateWait"]

log = logging.getLogger("tidelog.fetch_purgatory")


R = TypeVar("R")


class FetchCondition(Protocol):
    """What a waiting fetch waits for: :class:`~tidelog.server.fetch_wait.FetchWait` (``min_bytes``) or
    :class:`PredicateWait` (records to acquire)."""

    @property
    def keys(self) -> list[Hashable]: ...

    def ready(self) -> bool:
        """Whether the fetch can complete already, when it is parked."""
        ...

    def changed(self, key: Hashable) -> bool:
        """``key`` changed: whether the fetch should complete now."""
        ...


class PredicateWait:
    """A wait decided by one predicate (a ShareFetch: are there records to acquire?), asked when the fetch is
    parked and on every change of one of ``keys``."""

    __slots__ = ("_enough", "_keys")

    def __init__(self, keys: Iterable[Hashable], enough: Callable[[], bool]) -> None:
        self._keys = list(keys)
        self._enough = enough

    @property
    def keys(self) -> list[Hashable]:
        return self._keys

    def ready(self) -> bool:
        return self._enough()

    def changed(self, key: Hashable) -> bool:  # noqa: ARG002 - one predicate over every key
        return self._enough()


class DelayedFetch(DelayedOperation, Generic[R]):
    """A fetch that waits for ``min_bytes`` of new data (or, a ShareFetch, for records to acquire) or for
    ``max_wait_ms``."""

    __slots__ = ("_build", "_future", "_wait")

    def __init__(
        self,
        delay_ms: int,
        wait: FetchCondition,
        build: Callable[[], R],
        future: asyncio.Future[R],
    ) -> None:
        # DelayedOperation.__init__ and TimerTask.__init__, inline (issue 17: one per long poll)
        self.delay_ms = delay_ms
        self._entry = None
        self._completed = False
        self._watch_keys = ()
        self._wait = wait
        self._build = build
        self._future = future

    def try_complete(self) -> bool:
        # A Fetch is parked only after its read found too little (FetchWait.ready is False): nothing to decide
        # before a change, unless the connection went away (nothing to answer).
        if self._future.done() or self._wait.ready():
            return self.force_complete()
        return False

    def try_complete_for(self, key: Hashable) -> bool:
        if self._future.done() or self._wait.changed(key):
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
    """Delayed fetches keyed by (topic, partition), and the recent append sizes they count."""

    def __init__(self, clock: Clock) -> None:
        self._operations: AsyncPurgatory[DelayedFetch[Any]] = AsyncPurgatory("Fetch", clock)
        self.appended_bytes = AppendedBytes()
        self.change_count = 0
        self.last_change: dict[Hashable, int] = {}
        """Per (topic, partition), :attr:`change_count` at its last change (append, high watermark, last
        stable offset, log start, leadership): what lets a fetch session skip partitions that did not move."""
        self.shared_reads: SharedReads | None = None
        """While one change's waiting fetches complete (one synchronous pass, nothing can append meanwhile):
        log reads by (partition, offset, limit, isolation), so hundreds of consumers woken at the same
        offset read the log once (:mod:`tidelog.server.shared_reads`). None outside such a pass."""

    def delay(self, wait: FetchCondition, max_wait_ms: int, build: Callable[[], R]) -> asyncio.Future[R]:
        """Park a fetch watching ``wait.keys`` until ``wait`` says so or ``max_wait_ms``; one that watches
        nothing is answered at once."""
        future: asyncio.Future[R] = (self._operations.loop or asyncio.get_running_loop()).create_future()
        keys = wait.keys
        if not keys:
            future.set_result(build())
            return future
        self._operations.delay(DelayedFetch(max_wait_ms, wait, build, future), keys)
        return future

    def appended(self, key: tuple[str, int], base_offset: int, end_offset: int, nbytes: int) -> None:
        """A leader append of ``nbytes`` covering ``[base_offset, end_offset)``: remember its size, then check
        the fetches waiting on ``key``."""
        self.appended_bytes.record(key, base_offset, end_offset, nbytes)
        self._check(key)

    def on_append(self, key: Hashable) -> None:
        """The high watermark, last stable offset or leadership of ``key`` moved: check its waiting fetches."""
        self._check(key)

    def _check(self, key: Hashable) -> None:
        self.change_count += 1
        self.last_change[key] = self.change_count
        outer = self.shared_reads is None
        if outer:
            self.shared_reads = SharedReads()
        try:
            self._operations.check(key)
        finally:
            if outer:
                self.shared_reads = None

    @property
    def delayed(self) -> int:
        """Fetches waiting now (logs, metrics, tests)."""
        return self._operations.delayed

    def complete_all(self) -> None:
        """Shutdown: answer every waiting fetch now with what is there."""
        self._operations.complete_all()

    async def run(self) -> None:
        await self._operations.run()
