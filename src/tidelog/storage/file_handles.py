"""Open file handles of segments: the segment file object, and a bound on how many stay open.

Invariants:

* A :class:`SegmentFile` is the one file object of a segment's ``.log``; reads use ``os.pread`` on its
  descriptor and writes ``os.pwrite``, so no shared file position is ever raced.
* A segment *releases* its handles by dropping its reference, not by closing: a
  :class:`~tidelog.storage.fetch_data.FileRegion` already handed to the server keeps the file object, so
  its descriptor stays valid (even after a rename to ``.deleted`` or an unlink) until the region is gone.
  The last reference closes the descriptor, quietly (no ResourceWarning).
* :class:`OpenSegmentLimiter` keeps at most ``max_open`` segments' handles open (log file and index
  mappings: at most four descriptors and two memory maps each) and releases the least recently used beyond
  that. Active segments are in it too, so a broker with 10,000 partitions holds at most ``max_open``
  segments' descriptors and maps (``log.max.open.segments``), not three per partition. A released segment
  reopens on its next use; appends to an active segment reopen its ``.log`` (an index opens its file
  only to write a page of entries), so a bound below the partitions being written costs an ``open`` per append.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import Protocol

__all__ = ["OpenSegmentLimiter", "Releasable", "SegmentFile"]


class SegmentFile(io.FileIO):
    """A segment's log file (binary, unbuffered); closes itself when the last reference goes."""

    def __del__(self) -> None:
        if not self.closed:
            self.close()


class Releasable(Protocol):
    """Something holding open handles it can let go of and reopen later."""

    def release_handles(self) -> None: ...


class OpenSegmentLimiter:
    """An LRU bound on the inactive segments whose handles are open (shared by all logs of a manager)."""

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self.max_open = max_open
        self._lru: OrderedDict[Releasable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, owner: Releasable) -> None:
        """Record a use of ``owner`` (now holding open handles); release the least recently used extras."""
        lru = self._lru
        if owner in lru:
            lru.move_to_end(owner)
            return
        lru[owner] = None
        while len(lru) > self.max_open:
            victim, _ = lru.popitem(last=False)
            victim.release_handles()

    def forget(self, owner: Releasable) -> None:
        """``owner`` was closed or deleted: no longer this limiter's to release."""
        self._lru.pop(owner, None)
