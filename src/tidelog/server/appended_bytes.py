"""Bytes appended to each partition recently, by offset: what a waiting fetch adds up instead of re-reading.

A waiting fetch (:mod:`tidelog.server.fetch_wait`) needs to know how many bytes became readable when a
partition's visible end (high watermark, last stable offset or log end) moved from ``start`` to ``end``.
Each leader append records ``(base_offset, end_offset, nbytes)``; :meth:`AppendedBytes.between` answers from
a short per-partition history of cumulative sizes at batch boundaries, without touching the log.

Invariants:

- Pure and O(1) per append (a bounded deque per partition: the last :data:`HISTORY` appends); a lookup is
  O(log HISTORY).
- :meth:`AppendedBytes.between` never under-counts silently: when ``start`` is older than the history (or
  the history has a gap there: a truncation, a follower's appends, a restart), it answers None, "unknown",
  and the caller treats the fetch as satisfied (Kafka's delayed fetch completes when the data lies on an
  older segment, for the same reason: a short answer is correct, a missed wake-up is not).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Hashable

__all__ = ["HISTORY", "AppendedBytes"]

HISTORY = 64
"""Appends remembered per partition."""


class _History:
    __slots__ = ("cumulative", "offsets")

    def __init__(self) -> None:
        self.offsets: deque[int] = deque(maxlen=HISTORY + 1)
        """Batch boundaries, ascending (the first is the base offset of the oldest remembered append)."""
        self.cumulative: deque[int] = deque(maxlen=HISTORY + 1)
        """Bytes appended up to the boundary at the same index (relative to the oldest)."""


class AppendedBytes:
    """Per partition key, cumulative appended bytes at recent batch boundaries."""

    def __init__(self) -> None:
        self._histories: dict[Hashable, _History] = {}

    def record(self, key: Hashable, base_offset: int, end_offset: int, nbytes: int) -> None:
        """An append of ``nbytes`` covering ``[base_offset, end_offset)`` to ``key``."""
        history = self._histories.get(key)
        if history is None:
            history = self._histories[key] = _History()
        offsets, cumulative = history.offsets, history.cumulative
        if not offsets or offsets[-1] != base_offset:  # first append, or a gap: start over from here
            offsets.clear()
            cumulative.clear()
            offsets.append(base_offset)
            cumulative.append(0)
        offsets.append(end_offset)
        cumulative.append(cumulative[-1] + nbytes if nbytes > 0 else cumulative[-1])  # max() without its call

    def between(self, key: Hashable, start: int, end: int) -> int | None:
        """Bytes appended in ``[start, end)`` (whole batches ending at or before ``end`` and starting at or
        after ``start``), or None when the history does not reach back to ``start``."""
        if end <= start:
            return 0
        history = self._histories.get(key)
        if history is None or not history.offsets or start < history.offsets[0]:
            return None
        offsets, cumulative = history.offsets, history.cumulative
        lo = bisect_right(offsets, start) - 1
        hi = bisect_right(offsets, end) - 1
        return cumulative[hi] - cumulative[lo]

    def forget(self, key: Hashable) -> None:
        """The partition went away (deleted, or no longer led here)."""
        self._histories.pop(key, None)
