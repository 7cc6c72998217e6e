"""The records of a share-partition's window that wait for a deliver-at time, compactly.

A million delayed records must cost a fetch nothing and hold little memory, so they are not ranges: each is
one bit in a bitmap over offsets (is it still waiting?) and one heap entry ``due << 64 | offset`` (when does
it stop?), about 50 bytes a record. The share-partition keeps the runs of window offsets they lie in as
single ranges (see :mod:`.share_partition`).

Invariants: an offset is waiting iff its bit is set; every waiting offset has exactly one heap entry (the
heap may also hold stale entries of offsets no longer waiting: dropped below the window's start, skipped
when they reach its top, and thrown away once they outnumber the live ones); offsets below ``floor`` are
never waiting. Offsets are below ``2**64``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

__all__ = ["DelayedOffsets"]

_MASK = (1 << 64) - 1
_CHUNK = 4096
"""Bits converted to one int at a time when walking runs."""


class DelayedOffsets:
    """Offsets waiting for their due times: a bitmap for membership, a heap for the order of due times."""

    def __init__(self) -> None:
        self._bits = bytearray()
        self._base = 0
        """The offset of bit 0 (a multiple of 8)."""
        self._floor = 0
        self._heap: list[int] = []
        self._max_due = -(1 << 63)
        """No offset waits for a later time."""
        self.live = 0
        """Offsets waiting."""

    def clear(self, floor: int = 0) -> None:
        self._bits = bytearray()
        self._base = floor - floor % 8
        self._floor = floor
        self._heap = []
        self._max_due = -(1 << 63)
        self.live = 0

    def add(self, offset: int, due_ms: int) -> None:
        """``offset`` (not waiting, at or above the floor) waits until ``due_ms``."""
        i = offset - self._base
        byte = i >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(byte + 1 - len(self._bits) + (len(self._bits) >> 3)))
        self._bits[byte] |= 1 << (i & 7)
        heapq.heappush(self._heap, (due_ms << 64) | offset)
        self._max_due = max(self._max_due, due_ms)
        self.live += 1

    def __contains__(self, offset: int) -> bool:
        if offset < self._floor:
            return False
        i = offset - self._base
        byte = i >> 3
        return byte < len(self._bits) and bool(self._bits[byte] >> (i & 7) & 1)

    def _discard(self, offset: int) -> None:
        i = offset - self._base
        self._bits[i >> 3] &= ~(1 << (i & 7)) & 0xFF
        self.live -= 1

    def pop_due(self, now_ms: int) -> list[int]:
        """The entries ``due_ms << 64 | offset`` due at ``now_ms`` (no longer waiting), in no particular
        order (ascending unless every waiting offset is due)."""
        heap = self._heap
        limit = (now_ms + 1) << 64
        if not heap or heap[0] >= limit:
            return []
        if self._max_due <= now_ms:  # all of them: no heap pops (a million records due at once)
            floor = self._floor
            out = [e for e in heap if e & _MASK >= floor]
            self.clear(self._floor)
            return out
        out = []
        while heap and heap[0] < limit:
            entry = heapq.heappop(heap)
            offset = entry & _MASK
            if offset in self:
                self._discard(offset)
                out.append(entry)
        return out

    def next_due(self) -> int | None:
        """The earliest due time of a waiting offset, None if none waits."""
        heap = self._heap
        while heap and (heap[0] & _MASK) not in self:
            heapq.heappop(heap)
        return heap[0] >> 64 if heap else None

    def due_times(self) -> dict[int, int]:
        """offset → due time of every waiting offset (a scan of the heap: for views, not for fetches)."""
        return {e & _MASK: e >> 64 for e in self._heap if (e & _MASK) in self}

    def _window(self, first: int, last: int) -> int:
        """The bits of ``first..last`` as an int (bit 0: ``first``)."""
        first = max(first, self._floor)
        if first > last:
            return 0
        i, j = first - self._base, last - self._base
        chunk = self._bits[i >> 3 : (j >> 3) + 1]
        return (int.from_bytes(chunk, "little") >> (i & 7)) & ((1 << (j - i + 1)) - 1)

    def count(self, first: int, last: int) -> int:
        """Waiting offsets among ``first..last``."""
        count = 0
        for lo in range(first, last + 1, _CHUNK * 64):
            count += self._window(lo, min(lo + _CHUNK * 64 - 1, last)).bit_count()
        return count

    def first_waiting(self, first: int, last: int) -> int | None:
        """The lowest waiting offset among ``first..last``, None if none."""
        if first in self:
            return first
        for lo in range(first, last + 1, _CHUNK * 64):
            bits = self._window(lo, min(lo + _CHUNK * 64 - 1, last))
            if bits:
                return lo + (bits & -bits).bit_length() - 1
        return None

    def settled_behind(self, first: int, last: int) -> int:
        """Among ``first..last``: the offsets not waiting after the first waiting one, less one for each
        run of them (what is not counted of the records settled behind delayed ones)."""
        start = self.first_waiting(first, last)
        if start is None:
            return 0
        out = 0
        carry = 0
        """1 if the offset before the chunk is not waiting."""
        for lo in range(start, last + 1, _CHUNK * 64):
            hi = min(lo + _CHUNK * 64 - 1, last)
            n = hi - lo + 1
            mask = (1 << n) - 1
            settled = ~self._window(lo, hi) & mask
            run_starts = settled & ~((settled << 1) | carry)
            out += settled.bit_count() - run_starts.bit_count()
            carry = settled >> (n - 1) & 1
        return out

    def runs(self, first: int, last: int) -> Iterator[tuple[int, int, bool]]:
        """``first..last`` as maximal runs ``(first, last, waiting)``, in offset order."""
        run_first, run_waiting = first, first in self
        for lo in range(first, last + 1, _CHUNK):
            hi = min(lo + _CHUNK - 1, last)
            bits = self._window(lo, hi)
            pos, n = 0, hi - lo + 1
            while pos < n:
                rest = bits >> pos
                if rest & 1:
                    step = (~rest & (rest + 1)).bit_length() - 1  # trailing ones
                    waiting = True
                else:
                    step = (rest & -rest).bit_length() - 1 if rest else n - pos  # trailing zeros
                    waiting = False
                step = min(step, n - pos)
                if waiting != run_waiting:
                    yield run_first, lo + pos - 1, run_waiting
                    run_first, run_waiting = lo + pos, waiting
                pos += step
        yield run_first, last, run_waiting

    def drop_below(self, offset: int) -> int:
        """Offsets below ``offset`` leave (the window's start moved past them); returns how many waited."""
        if offset <= self._floor:
            return 0
        dropped = self.count(self._floor, offset - 1) if self.live else 0  # no bit set: nothing to count
        self._floor = offset
        self.live -= dropped
        cut = (offset - self._base) >> 3
        if cut >= 4096 and cut * 2 >= len(self._bits):
            del self._bits[:cut]
            self._base += cut * 8
        if len(self._heap) > 2 * self.live + 1024:
            self._heap = [e for e in self._heap if (e & _MASK) in self]
            heapq.heapify(self._heap)
        return dropped
