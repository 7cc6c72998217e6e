"""What a long-poll fetch waits for, partition by partition: deciding a wake-up without re-reading.

A fetch that found fewer than ``min_bytes`` parks in the fetch purgatory with one :class:`FetchWait`. It
remembers, per partition it watches, the fetch offset, the leader epoch it was read at and the visible end
it has already counted (the high watermark, the last stable offset under read_committed, the log end for a
follower); ``accumulated`` starts at the bytes the first read found. When a partition changes (an append, a
high-watermark or last-stable-offset move, a leadership change), :meth:`FetchWait.changed` looks at that
partition alone: O(1) per wake-up, whatever the number of partitions the fetch has.

Invariants:

- ``changed`` says True (complete now, the response is then built once from a fresh read) when the
  partition is no longer led here, its leader epoch changed or fences the request's epoch, its visible end
  went backwards (truncation), the bytes newly visible are unknown (:class:`AppendedBytes` answers None, or 0 for a visible end
  that moved),
  or the bytes counted reach ``min_bytes``. Otherwise it only counts, and says False.
- Every byte is counted once: each partition's counted end only moves forward, and bytes are taken between
  the previous counted end (or the fetch offset, if later) and the new one.
- Pure: no asyncio, no clock, no log reads.
- What it keeps per partition is made cheap for a wide fetch: the fields a watch starts from, as a tuple,
  until the partition's first change makes them a ``_Watched`` (the Fetch handler's first read stores them
  directly, :meth:`FetchWait.watch_led`'s tuple, from the lookup it reads with).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from tidelog.protocol.errors import ErrorCode
from tidelog.replication.partition import FetchIsolation, Partition

from .appended_bytes import AppendedBytes

__all__ = ["COMPLETE", "UNCHANGED", "FetchWait", "PartitionLookup", "WatchedPartition", "progress"]

PartitionLookup = Callable[[str, int], "Partition | ErrorCode"]
"""The replica manager's ``leader_partition``: the led partition or the error a client gets."""


class WatchedPartition(Protocol):
    """What :func:`progress` reads and moves of one watched partition."""

    topic: str
    index: int
    fetch_offset: int
    current_leader_epoch: int
    leader_epoch: int
    counted_end: int


@dataclass(slots=True)
class _Watched:
    topic: str
    index: int
    fetch_offset: int
    current_leader_epoch: int
    """The request's CurrentLeaderEpoch (-1: none)."""
    leader_epoch: int
    """The partition's leader epoch when the fetch began waiting."""
    counted_end: int
    """The visible end up to which bytes were counted."""


class FetchWait:
    """One waiting fetch's progress towards ``min_bytes``; see the module docstring."""

    __slots__ = ("_appended", "_isolation", "_lookup", "_watched", "accumulated", "changed_keys", "min_bytes")

    def __init__(
        self,
        *,
        min_bytes: int,
        accumulated: int,
        isolation: FetchIsolation,
        lookup: PartitionLookup,
        appended: AppendedBytes,
    ) -> None:
        self.min_bytes = min_bytes
        self.accumulated = accumulated
        self._isolation = isolation
        self._lookup = lookup
        self._appended = appended
        self._watched: dict[Hashable, _Watched | tuple[str, int, int, int, int, int]] = {}
        """Per watched partition its :class:`_Watched`, or until its first change the same fields as a tuple
        (issue 17: a consumer's full fetch watches each of its partitions, each poll)."""
        self.changed_keys: dict[Hashable, None] = {}
        """The watched partitions that changed while the fetch waited, in order (what a session's answer
        rereads besides what the fetch read when it began)."""

    def watch(self, topic: str, index: int, fetch_offset: int, current_leader_epoch: int) -> bool:
        """Start watching ``topic-index`` from its state now; False if it is not led here (the fetch should
        be answered at once)."""
        partition = self._lookup(topic, index)
        if isinstance(partition, ErrorCode):
            return False
        self.watch_led(
            topic,
            index,
            fetch_offset,
            current_leader_epoch,
            partition,
            partition.fetchable_offset(self._isolation),
        )
        return True

    def watch_led(
        self,
        topic: str,
        index: int,
        fetch_offset: int,
        current_leader_epoch: int,
        partition: Partition,
        end: int,
    ) -> None:
        """:meth:`watch` of a partition the caller just looked up (led here), whose fetchable end is ``end``."""
        self._watched[(topic, index)] = (
            topic,
            index,
            fetch_offset,
            current_leader_epoch,
            partition.leader_epoch,
            end,
        )

    @property
    def keys(self) -> list[Hashable]:
        return list(self._watched)

    @property
    def watching(self) -> int:
        """How many partitions it watches."""
        return len(self._watched)

    def ready(self) -> bool:
        """Never when parked: the handler parks a fetch only after its read found too little."""
        return False

    def changed(self, key: Hashable) -> bool:
        """``key`` changed: True if the fetch should complete now (see the module docstring)."""
        watched = self._watched.get(key)
        if watched is None:
            return False
        if isinstance(watched, tuple):  # its first change: the fields it was watched with, as a _Watched
            watched = self._watched[key] = _Watched(*watched)
        self.changed_keys[key] = None
        added = progress(
            watched, self._lookup(watched.topic, watched.index), self._isolation, self._appended, key
        )
        if added < 0:
            return added == COMPLETE
        self.accumulated += added
        return self.accumulated >= self.min_bytes


COMPLETE = -1
"""What :func:`progress` says when the fetch must complete now."""
UNCHANGED = -2
"""What :func:`progress` says when the partition's visible end did not move (nothing to count)."""


def progress(
    watched: WatchedPartition,
    partition: Partition | ErrorCode,
    isolation: FetchIsolation,
    appended: AppendedBytes,
    key: Hashable,
) -> int:
    """One watched partition (``partition``: what the lookup answers for it now) changed: :data:`COMPLETE`,
    :data:`UNCHANGED`, or the bytes newly visible to count (0 included), its counted end moved to the new
    visible end (see the module docstring). A :class:`FetchWait` asks it per partition; a fetch parked in one
    step (:class:`~tidelog.server.fetch_purgatory.ParkedFetch`) for its one partition."""
    if isinstance(partition, ErrorCode):
        return COMPLETE
    if (
        partition.leader_epoch != watched.leader_epoch
        or partition.check_leader_epoch(watched.current_leader_epoch) is not ErrorCode.NONE
    ):
        return COMPLETE
    end = partition.fetchable_offset(isolation)
    counted_end = watched.counted_end
    if end == counted_end:
        return UNCHANGED
    if end < counted_end:
        return COMPLETE
    start = max(counted_end, watched.fetch_offset)
    watched.counted_end = end
    if end > start:
        added = appended.between(key, start, end)
        if not added:  # unknown, or a boundary the history does not hold: answer rather than miss it
            return COMPLETE
        return added
    return 0
