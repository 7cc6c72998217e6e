"""Delayed operations and their purgatory (Kafka's ``DelayedOperation`` / ``DelayedOperationPurgatory``).

A delayed operation (a long-poll fetch, an ``acks=all`` produce, a session or transaction timeout) waits
until either something it watches makes it completable, or its ``delay_ms`` runs out. The purgatory keeps
a watch list per key (e.g. a topic-partition) and a :class:`~tidelog.server.timing_wheel.Timer` for the
timeouts. Whoever changes what a key's operations wait on calls :meth:`check_and_complete` with that key;
the server's timer task calls :meth:`advance_clock` at :meth:`next_expiration_ms`.

Invariants:

- Pure: no asyncio, no wall clock; time comes in as ``now_ms``. Single-threaded (the event loop's).
- An operation completes exactly once: :meth:`DelayedOperation.force_complete` flips ``is_completed``,
  cancels the timeout and calls ``on_complete`` only the first time, however completion by a watcher and
  expiry interleave. An expired operation gets ``on_complete`` then ``on_expiration``.
- ``try_complete`` (or ``try_complete_for`` the key that changed) decides; if the operation can complete it
  must call ``force_complete()`` and return its result. The purgatory never calls ``on_complete`` itself.
- A completed operation may linger in other keys' watch lists; it is dropped when those keys are checked
  or when the periodic purge runs (after ``purge_interval`` such leftovers), never run again. An operation
  that expires leaves all its watch lists at once (it knows its keys): a long poll that times out, the
  common case, leaves nothing behind for the purge to walk.
- Callbacks may re-enter the purgatory (watch new operations, check other keys): iteration is over snapshots.
  An exception from one operation's callback is logged and does not stop the others.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar, cast

from tidelog.server.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]

_log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
Op = TypeVar("Op", bound="DelayedOperation")


class DelayedOperation(TimerTask):
    """An operation that completes when ``try_complete`` says so, or at the latest after ``delay_ms``.

    Subclasses implement :meth:`try_complete` and :meth:`on_complete`, optionally :meth:`on_expiration`.
    """

    __slots__ = ("_completed", "_watch_keys")

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)  # (DelayedFetch.__init__ repeats these stores inline)
        self._completed = False
        self._watch_keys: Sequence[Hashable] = ()
        """The keys the purgatory watches this operation under (set when it is watched)."""

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now: True the first time (``on_complete`` ran), False if already completed."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        """Check whether the operation can complete; if so ``return self.force_complete()``, else False."""
        raise NotImplementedError

    def try_complete_for(self, key: Hashable) -> bool:  # noqa: ARG002 - the default ignores it
        """``key`` (one this operation watches) changed: like :meth:`try_complete`, but an operation watching
        many keys may look at that one alone (a waiting fetch: O(1), not O(its partitions))."""
        return self.try_complete()

    def on_complete(self) -> None:
        """The completion logic (build and send the response); called exactly once."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Extra work when completion came from the timeout (after ``on_complete``)."""

    def expire(self) -> bool:
        """Kafka's ``run()``: force-complete because time ran out; True if this call completed it."""
        if self.force_complete():
            self.on_expiration()
            return True
        return False


class DelayedOperationPurgatory(Generic[K, Op]):
    """Watch lists by key plus a timing wheel for timeouts (one purgatory per operation kind)."""

    def __init__(
        self,
        name: str,
        *,
        purge_interval: int = 1000,
        tick_ms: int = 1,
        wheel_size: int = 20,
        start_ms: int = 0,
    ) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self._timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=start_ms)
        self._watchers: dict[K, dict[int, Op]] = {}
        """One watch list per key: insertion-ordered, O(1) removal, keyed by the operation's identity."""
        self._estimated_total_operations = 0

    # ---- adding and completing ----

    def try_complete_else_watch(self, op: Op, keys: Iterable[K], now_ms: int) -> bool:
        """Try ``op`` now; if it cannot complete, watch it under every key and start its timeout.

        Returns True iff ``op`` was completed by this call's ``try_complete``. An operation whose
        ``delay_ms`` is not positive and cannot complete now is expired at once (then False is returned,
        as Kafka does, but ``op.is_completed`` is True). A list of ``keys`` is kept as given (the operation
        leaves those watch lists when it expires): the caller must not change it afterwards.
        """
        watch_keys = keys if type(keys) is list else list(keys)
        if not watch_keys:
            raise ValueError("the watch key list must not be empty")
        if op.try_complete():
            return True
        if op._completed:
            return False
        if not self._timer.add(op, now_ms):
            self._expire(op)  # no time left: expire now, nothing to watch
            return False
        op_id = id(op)
        all_watchers = self._watchers
        for key in watch_keys:
            watchers = all_watchers.get(key)
            if watchers is None:
                all_watchers[key] = {op_id: op}
            else:
                watchers[op_id] = op
        op._watch_keys = watch_keys
        self._estimated_total_operations += 1
        return False

    def check_and_complete(self, key: K) -> int:
        """Try to complete the operations watching ``key``; returns how many this call completed."""
        watchers = self._watchers.get(key)
        if watchers is None:
            return 0
        completed = 0
        for op_id, op in list(watchers.items()):
            if op.is_completed:
                watchers.pop(op_id, None)
                continue
            try:
                done = op.try_complete_for(key)
            except Exception:  # noqa: BLE001 - one broken operation must not stall the others
                _log.exception("%s: try_complete of %r failed", self.name, op)
                continue
            if done:
                completed += 1
                watchers.pop(op_id, None)
        if not watchers and self._watchers.get(key) is watchers:
            del self._watchers[key]
        return completed

    def cancel_for_key(self, key: K) -> list[Op]:
        """Stop watching ``key``: its not-yet-completed operations lose their timeout and are returned.

        (Kafka's ``cancelForKey``, used when a partition goes away; the caller answers them.)
        """
        watchers = self._watchers.pop(key, None)
        if watchers is None:
            return []
        cancelled = [op for op in watchers.values() if not op.is_completed]
        for op in cancelled:
            op.cancel()
        return cancelled

    def cancel_all(self) -> list[Op]:
        """Drop every watch list and timeout (shutdown); returns the operations that were still pending."""
        pending: dict[int, Op] = {
            op_id: op
            for watchers in self._watchers.values()
            for op_id, op in watchers.items()
            if not op.is_completed
        }
        self._watchers.clear()
        for op in pending.values():
            op.cancel()
        self._estimated_total_operations = 0
        return list(pending.values())

    # ---- time ----

    def advance_clock(self, now_ms: int) -> list[Op]:
        """Expire operations due at ``now_ms`` (``on_complete`` then ``on_expiration``); returns them.

        Also purges completed operations from the watch lists once more than ``purge_interval`` may linger.
        """
        expired: list[Op] = []
        for task in self._timer.advance_clock(now_ms):
            op = cast("Op", task)  # only operations are ever added to this timer
            if self._expire(op):
                expired.append(op)
            self._unwatch(op)
        if self._estimated_total_operations - self._timer.size > self.purge_interval:
            self.purge_completed()
        return expired

    def next_expiration_ms(self) -> int | None:
        """When :meth:`advance_clock` next has work (None: no pending timeouts)."""
        return self._timer.next_expiration_ms()

    def purge_completed(self) -> int:
        """Remove completed operations from every watch list; returns how many entries were removed."""
        removed = 0
        for key in list(self._watchers):
            watchers = self._watchers[key]
            done = [op_id for op_id, op in watchers.items() if op.is_completed]
            for op_id in done:
                del watchers[op_id]
            removed += len(done)
            if not watchers:
                del self._watchers[key]
        self._estimated_total_operations = self._timer.size
        return removed

    def _unwatch(self, op: Op) -> None:
        """Take an expired operation off its watch lists now, rather than leave it to the purge."""
        op_id = id(op)  # ``op`` is alive, so no other operation on a list can have its id
        watched = False
        for key in op._watch_keys:
            watchers = self._watchers.get(cast("K", key))
            if watchers is not None and watchers.pop(op_id, None) is not None:
                watched = True
                if not watchers:
                    del self._watchers[cast("K", key)]
        op._watch_keys = ()
        if watched and self._estimated_total_operations > 0:
            self._estimated_total_operations -= 1

    def _expire(self, op: Op) -> bool:
        try:
            return op.expire()
        except Exception:  # noqa: BLE001 - one broken operation must not stall the others
            _log.exception("%s: expiring %r failed", self.name, op)
            return True

    # ---- introspection (Kafka's purgatory metrics) ----

    @property
    def watched(self) -> int:
        """Entries across all watch lists (an operation watching 3 keys counts 3; may include completed)."""
        return sum(len(w) for w in self._watchers.values())

    @property
    def delayed(self) -> int:
        """Operations waiting for their timeout."""
        return self._timer.size

    def watched_keys(self) -> list[K]:
        return list(self._watchers)

    @property
    def watch_lists(self) -> Mapping[K, object]:
        """The watch lists by key, live (never replaced, only changed in place): ``key in watch_lists`` is
        whether :meth:`check_and_complete` of ``key`` has anything to look at, without calling it."""
        return self._watchers

    def watchers_for(self, key: K) -> list[Op]:
        watchers = self._watchers.get(key)
        return [] if watchers is None else list(watchers.values())
