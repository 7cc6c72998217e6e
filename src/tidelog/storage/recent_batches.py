"""Where the last few batches of an active segment lie: tail reads without scanning batch headers.

Consumers that keep up read at (or just behind) the log end: hundreds of them, woken by one append, each
look up an offset among the last few batches. The sparse offset index (an entry every
``index.interval.bytes``) leaves a scan of up to that many bytes of headers per lookup; :class:`RecentBatches`
remembers, for the last :data:`CAPACITY` batches the segment appended, ``(position, base_offset,
last_offset)``, so such a lookup is a bisection over ints.

Invariants:

- The remembered batches are consecutive in the file and the last one ends at the segment's size when the
  segment hands that size to :meth:`RecentBatches.find` (each ``record`` must start where the previous
  batch ended, else the memory starts over at that batch; the segment calls :meth:`RecentBatches.clear` on
  every truncation, recovery and index rebuild). :meth:`find` answers None ("unknown: scan") whenever
  it cannot be sure: an offset before the first remembered batch, a size that is not where the last
  remembered batch ends.
- Bounded: at most ``2 * CAPACITY`` entries of three ints; nothing for a segment that is not appended to.
- Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Literal

__all__ = ["CAPACITY", "RecentBatch", "RecentBatches"]

CAPACITY = 32
"""Batches remembered (at least; trimmed to this many when twice as many accumulated)."""

RecentBatch = tuple[int, int, int, int]
"""``(position, base_offset, last_offset, size_in_bytes)`` of one batch."""


class RecentBatches:
    """The last batches appended to one segment; see the module docstring."""

    __slots__ = ("_bases", "_end", "_lasts", "_positions")

    def __init__(self) -> None:
        self._positions: list[int] = []
        self._bases: list[int] = []
        self._lasts: list[int] = []
        self._end = -1
        """Where the last remembered batch ends (-1: nothing remembered)."""

    def clear(self) -> None:
        self._positions.clear()
        self._bases.clear()
        self._lasts.clear()
        self._end = -1

    def record(self, position: int, base_offset: int, last_offset: int, size: int) -> None:
        """A batch of ``size`` bytes was written at ``position``."""
        if position != self._end or (self._lasts and base_offset <= self._lasts[-1]):
            self.clear()
        elif len(self._positions) >= 2 * CAPACITY:
            del self._positions[:CAPACITY], self._bases[:CAPACITY], self._lasts[:CAPACITY]
        self._positions.append(position)
        self._bases.append(base_offset)
        self._lasts.append(last_offset)
        self._end = position + size

    def find(self, offset: int, segment_size: int) -> RecentBatch | Literal[False] | None:
        """The first batch whose last offset is >= ``offset``; False when no batch of the segment has one
        (``offset`` lies past its end); None when unknown (the caller scans)."""
        lasts = self._lasts
        if not lasts or self._end != segment_size or offset < self._bases[0]:
            return None
        i = bisect_left(lasts, offset)
        if i == len(lasts):
            return False
        position = self._positions[i]
        end = self._positions[i + 1] if i + 1 < len(lasts) else self._end
        return position, self._bases[i], lasts[i], end - position
