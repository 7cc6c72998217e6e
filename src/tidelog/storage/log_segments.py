"""The segments of one partition log in base-offset order (Kafka's ``LogSegments``).

Invariants:

* Never empty once built: the last segment is the *active* one, the only one appended to.
* :attr:`LogSegments.active` is the last segment (a plain attribute, set by every change here: the log
  reads it on every append, where a property or ``[-1]`` through ``__getitem__`` is a Python call).
  Between :meth:`~LogSegments.pop_active` of the only segment and the :meth:`~LogSegments.append` of its
  successor (one synchronous step of a roll) it still names the popped one.
* Base offsets strictly increase; the base offsets are kept beside the segments (one list each, changed
  together only here) so that :meth:`LogSegments.index_of` is one ``bisect``.
* This is bookkeeping only: nothing here opens, renames or deletes a file; the log does that and then
  records the change here.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from tidelog.storage.segment import LogSegment

__all__ = ["LogSegments"]


class LogSegments(Sequence[LogSegment]):
    """An ordered, mutable list of segments, looked up by offset."""

    __slots__ = ("_bases", "_segments", "active")

    def __init__(self, segments: Iterable[LogSegment]) -> None:
        self._segments = list(segments)
        self._bases = [segment.base_offset for segment in self._segments]
        if not self._segments:
            raise ValueError("a log has at least one segment")
        if any(a >= b for a, b in zip(self._bases, self._bases[1:], strict=False)):
            raise ValueError(f"segment base offsets are not increasing: {self._bases}")
        self.active: LogSegment = self._segments[-1]
        """The last segment, the only one appended to."""

    def __repr__(self) -> str:
        return f"LogSegments({self._bases})"

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    @overload
    def __getitem__(self, index: int) -> LogSegment: ...

    @overload
    def __getitem__(self, index: slice) -> list[LogSegment]: ...

    def __getitem__(self, index: int | slice) -> LogSegment | list[LogSegment]:
        return self._segments[index]

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    def index_of(self, offset: int) -> int:
        """Index of the segment that would hold ``offset``: the last one whose base offset is at most
        ``offset`` (the first segment for an offset below every base)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def upper_bound(self, index: int, log_end_offset: int) -> int:
        """Where the offsets of segment ``index`` end: the next segment's base offset, or the log end."""
        return self._bases[index + 1] if index + 1 < len(self._bases) else log_end_offset

    def append(self, segment: LogSegment) -> None:
        """Add a new active segment after the last one."""
        if self._bases and segment.base_offset <= self._bases[-1]:  # empty: a roll replaced the only one
            raise ValueError(f"segment {segment.base_offset} does not follow {self._bases[-1]}")
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self.active = segment

    def pop_active(self) -> LogSegment:
        """Remove the active segment (an empty one about to be replaced); the log adds its successor."""
        self._bases.pop()
        popped = self._segments.pop()
        if self._segments:  # else the successor the log appends next becomes it
            self.active = self._segments[-1]
        return popped

    def insert(self, segment: LogSegment) -> None:
        """Put ``segment`` in its place by base offset (a cleaned segment swapped in)."""
        index = bisect.bisect_left(self._bases, segment.base_offset)
        if index < len(self._bases) and self._bases[index] == segment.base_offset:
            raise ValueError(f"a segment at base offset {segment.base_offset} is in the log already")
        self._segments.insert(index, segment)
        self._bases.insert(index, segment.base_offset)
        self.active = self._segments[-1]

    def remove(self, doomed: Sequence[LogSegment]) -> None:
        """Take ``doomed`` out (by identity)."""
        gone = {id(segment) for segment in doomed}
        self._segments = [segment for segment in self._segments if id(segment) not in gone]
        self._bases = [segment.base_offset for segment in self._segments]
        if self._segments:
            self.active = self._segments[-1]

    def reset(self, segment: LogSegment) -> None:
        """The log starts over with ``segment`` alone."""
        self._segments = [segment]
        self._bases = [segment.base_offset]
        self.active = segment

    def positions(self) -> dict[int, int]:
        """Index of each segment by ``id`` (to check that segments held elsewhere are still here, in
        order)."""
        return {id(segment): i for i, segment in enumerate(self._segments)}
