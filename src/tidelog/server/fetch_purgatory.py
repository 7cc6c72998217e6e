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
Every change is counted (:attr:`FetchPurgatory.change_count` and :attr:`FetchPurgatory.last_change`, what
fetch sessions look at; an append's size goes to :attr:`FetchPurgatory.appended_bytes`) whether or not a
fetch waits; a change of a partition that no fetch waits on (in neither watch list) starts no pass, as the
pass would find nothing to check (issue 17: most appends at 1,000 partitions). Parking and changes run on
the event loop only, so a fetch parked after a change is checked by the next change, as it always was.

The common long poll, a consumer fetch of one partition parked caught up (the Fetch handler's one-step
park), waits as a :class:`ParkedFetch` instead of a ``DelayedFetch`` in the generic purgatory (issue 17: an
empty long poll's park and expiry are most of its cost): one object that is its own wait (one partition:
:func:`~tidelog.server.fetch_wait.progress`, as a ``FetchWait`` decides for each of its partitions), in a
first-in-first-out queue per ``max_wait_ms`` (its deadline is the clock when parked plus ``max_wait_ms``,
so each queue is in deadline order: park and expiry are O(1), no timing wheel) and in a watch list of its
partition; one loop timer is armed for the earliest deadline at the heads of the queues. The same rules
hold: completed exactly once (by a change of its partition that :func:`~tidelog.server.fetch_wait.progress`
says completes it, by expiry no earlier than its deadline, or by shutdown), taken off its watch list when
it completes (left in its queue, skipped when its deadline comes), and counted in :attr:`FetchPurgatory.delayed`
while it waits. A park whose deadline would come before the last one in its queue (the wall clock went back)
is declined: the handler takes the general path.

A ShareFetch waits here too, for records it can acquire: its :class:`PredicateWait` asks one predicate on
any change of its partitions (and once when it is parked), so the purgatory is generic over the response.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from tidelog.protocol.codec import thaw_response

from .appended_bytes import AppendedBytes
from .clock import Clock
from .delayed_operations import AsyncPurgatory, DeadlineTimer
from .purgatory import DelayedOperation
from .shared_reads import SharedReads

__all__ = ["DelayedFetch", "FetchCondition", "FetchPurgatory", "ParkedFetch", "PredicateWait"]

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


_COMPACT_AFTER = 1024
"""Completed fetches the queues may hold before more than the waiting ones compact them."""


class ParkedFetch(Generic[R]):
    """A long poll of one partition parked in one step (see the module docstring): a subclass says whether a
    change of its partition completes it (:meth:`changed`) and builds its answer (:meth:`answer`); the
    purgatory sets the rest when it parks it. Built without ``__init__`` (``object.__new__`` and its fields:
    one per empty long poll)."""

    __slots__ = ("completed", "deadline_ms", "future", "key")

    key: Hashable
    """The partition it watches."""
    deadline_ms: int
    future: asyncio.Future[R] | None
    """Where its answer goes (None once completed: a completed fetch left in its queue holds no answer)."""
    completed: bool

    def changed(self, key: Hashable) -> bool:
        """``key`` (its partition) changed: whether it completes now."""
        raise NotImplementedError

    def answer(self) -> R:
        """Its answer, built once when it completes (expired: outside a change's pass, ``shared_reads`` None)."""
        raise NotImplementedError


class FetchPurgatory:
    """Delayed fetches keyed by (topic, partition), and the recent append sizes they count."""

    def __init__(self, clock: Clock) -> None:
        self._operations: AsyncPurgatory[DelayedFetch[Any]] = AsyncPurgatory("Fetch", clock)
        self._watch_lists = self._operations.watch_lists
        """The generic purgatory's watch lists (live): a key in neither it nor :attr:`_parked_watchers` has
        no fetch to check."""
        self.appended_bytes = AppendedBytes()
        self.change_count = 0
        self.last_change: dict[Hashable, int] = {}
        """Per (topic, partition), :attr:`change_count` at its last change (append, high watermark, last
        stable offset, log start, leadership): what lets a fetch session skip partitions that did not move."""
        self.shared_reads: SharedReads | None = None
        """While one change's waiting fetches complete (one synchronous pass, nothing can append meanwhile):
        log reads by (partition, offset, limit, isolation), so hundreds of consumers woken at the same
        offset read the log once (:mod:`tidelog.server.shared_reads`). None outside such a pass."""
        self._frozen_answers: collections.deque[Any] = collections.deque()
        """Shared answers frozen by the passes (:mod:`tidelog.server.shared_reads`), oldest first."""
        self._clock = clock
        self._parked_queues: dict[int, collections.deque[ParkedFetch[Any]]] = {}
        """Parked fetches by ``max_wait_ms``, each queue in deadline order (completed ones skipped)."""
        self._parked_watchers: dict[Hashable, dict[ParkedFetch[Any], None]] = {}
        """The parked fetches waiting on each partition (only those not completed)."""
        self._parked = 0
        """Parked fetches not completed yet."""
        self._completed_queued = 0
        """Completed fetches still in the queues (their deadline has not come)."""
        self._timer = DeadlineTimer(clock, self._expire_parked)
        """Armed for the earliest deadline at the heads of the parked queues."""

    def delay(self, wait: FetchCondition, max_wait_ms: int, build: Callable[[], R]) -> asyncio.Future[R]:
        """Park a fetch watching ``wait.keys`` until ``wait`` says so or ``max_wait_ms``; one that watches
        nothing is answered at once."""
        future: asyncio.Future[R] = (self._timer.loop or asyncio.get_running_loop()).create_future()
        keys = wait.keys
        if not keys:
            future.set_result(build())
            return future
        self._operations.delay(DelayedFetch(max_wait_ms, wait, build, future), keys)
        return future

    def park(self, fetch: ParkedFetch[R], key: Hashable, max_wait_ms: int) -> asyncio.Future[R] | None:
        """Park ``fetch`` (``max_wait_ms`` > 0) watching ``key`` until a change completes it or its deadline
        passes; None (nothing parked) if the clock went back since the last park with this ``max_wait_ms``."""
        deadline = self._clock.now_ms() + max_wait_ms
        queue = self._parked_queues.get(max_wait_ms)
        if queue is None:
            queue = self._parked_queues[max_wait_ms] = collections.deque()
        if queue:
            if queue[-1].deadline_ms > deadline:
                return None
            arm = False  # its queue's head is due first, and the timer is armed for it or earlier
        else:
            timer = self._timer
            arm = timer.loop is not None and (timer.due_ms is None or deadline < timer.due_ms)
        future: asyncio.Future[R] = (self._timer.loop or asyncio.get_running_loop()).create_future()
        fetch.key = key
        fetch.deadline_ms = deadline
        fetch.future = future
        fetch.completed = False
        queue.append(fetch)
        watchers = self._parked_watchers.get(key)
        if watchers is None:
            self._parked_watchers[key] = {fetch: None}
        else:
            watchers[fetch] = None
        self._parked += 1
        if arm:
            self._arm()
        return future

    def _complete(self, fetch: ParkedFetch[Any], *, queued: bool) -> None:
        """Complete ``fetch`` (not completed yet): off its watch list, its answer built and handed over.
        ``queued``: it stays in its queue until its deadline (then more than half the queued fetches being
        completed ones compacts the queues: memory stays bounded by the waiting fetches)."""
        fetch.completed = True
        self._parked -= 1
        watchers = self._parked_watchers.get(fetch.key)
        if watchers is not None:
            watchers.pop(fetch, None)
            if not watchers:
                del self._parked_watchers[fetch.key]
        if queued:
            self._completed_queued += 1
            if self._completed_queued > _COMPACT_AFTER and self._completed_queued > self._parked:
                self._compact()
        future = fetch.future
        fetch.future = None
        if future is None or future.done():
            return
        try:
            future.set_result(fetch.answer())
        except Exception as exc:  # noqa: BLE001 - a broker bug: the connection logs and closes
            future.set_exception(exc)

    def _compact(self) -> None:
        """Drop the completed fetches from the queues (each stays in deadline order)."""
        for queue in self._parked_queues.values():
            kept = [fetch for fetch in queue if not fetch.completed]
            queue.clear()  # in place: an expiry pass may be walking it (an answer that changed a partition)
            queue.extend(kept)
        self._completed_queued = 0

    def _check_parked(self, key: Hashable, watchers: dict[ParkedFetch[Any], None]) -> None:
        for fetch in list(watchers):
            if fetch.completed:
                continue
            try:
                done = fetch.changed(key)
            except Exception:  # one broken fetch must not stall the others
                log.exception("checking parked fetch %r failed", fetch)
                continue
            if done:
                self._complete(fetch, queued=True)

    def _expire_parked(self) -> None:
        """The timer callback: complete the parked fetches whose deadline passed, then re-arm."""
        self._timer.fired()
        try:
            now = self._clock.now_ms()
            queues = self._parked_queues
            for max_wait_ms, queue in list(queues.items()):
                while queue and queue[0].deadline_ms <= now:
                    fetch = queue.popleft()
                    if fetch.completed:
                        self._completed_queued -= 1
                    else:
                        self._complete(fetch, queued=False)
                if not queue and queues.get(max_wait_ms) is queue:
                    del queues[max_wait_ms]
        finally:
            self._arm()

    def _arm(self) -> None:
        """(Re)arm the timer for the earliest deadline at the heads of the queues."""
        self._timer.arm(
            min((queue[0].deadline_ms for queue in self._parked_queues.values() if queue), default=None)
        )

    def appended(self, key: tuple[str, int], base_offset: int, end_offset: int, nbytes: int) -> None:
        """A leader append of ``nbytes`` covering ``[base_offset, end_offset)``: remember its size, then check
        the fetches waiting on ``key``."""
        self.appended_bytes.record(key, base_offset, end_offset, nbytes)
        # _check, inline up to its early exit (issue 17: once per produced partition)
        self.change_count = count = self.change_count + 1
        self.last_change[key] = count
        if key in self._watch_lists or key in self._parked_watchers:
            self._check_waiting(key)

    def on_append(self, key: Hashable) -> None:
        """The high watermark, last stable offset or leadership of ``key`` moved: check its waiting fetches."""
        self._check(key)

    def _check(self, key: Hashable) -> None:
        """Count the change of ``key`` (what fetch sessions look at), then check its waiting fetches, if any:
        a key no operation watches and no parked fetch waits on has nothing to check (the pass would read
        nothing and complete nothing), so none is started."""
        self.change_count = count = self.change_count + 1
        self.last_change[key] = count
        if key in self._watch_lists or key in self._parked_watchers:
            self._check_waiting(key)

    def _check_waiting(self, key: Hashable) -> None:
        """One pass over the fetches waiting on ``key`` (sharing its reads, see :attr:`shared_reads`)."""
        outer = self.shared_reads is None
        if outer:
            self.shared_reads = SharedReads(self._frozen_answers)
        try:
            self._operations.check(key)
            parked = self._parked_watchers.get(key)
            if parked is not None:
                self._check_parked(key, parked)
        finally:
            if outer:
                self.shared_reads = None

    @property
    def delayed(self) -> int:
        """Fetches waiting now (logs, metrics, tests)."""
        return self._operations.delayed + self._parked

    def complete_all(self) -> None:
        """Shutdown: answer every waiting fetch now with what is there."""
        self._operations.complete_all()
        queues = list(self._parked_queues.values())
        self._parked_queues.clear()
        self._completed_queued = 0
        for queue in queues:
            for fetch in queue:
                if not fetch.completed:
                    self._complete(fetch, queued=False)
        frozen = self._frozen_answers
        while frozen:  # a thawed answer still encodes as it did: this only lets them go
            thaw_response(frozen.popleft())

    async def run(self) -> None:
        """The clock: expires waiting fetches when due, until cancelled."""
        self._timer.start()
        try:
            self._expire_parked()
            await self._operations.run()
        finally:
            self._timer.stop()
