"""What a read of the log returns: file regions to send with ``os.sendfile``, never bytes pulled through Python.

Invariants:

* A :class:`FileRegion` is ``nbytes`` bytes of one segment file starting at ``position``; it always covers
  whole record batches. It holds the segment's file object itself, so the descriptor stays open (even if
  the segment is deleted or released meanwhile) for as long as the region lives.
* A :class:`FetchDataInfo` lists regions of consecutive segments in offset order; ``nbytes`` is their sum.
  No region is empty. ``next_offset`` is one past the last batch returned (``fetch_offset`` when none):
  where the next read continues.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tidelog.storage.file_handles import SegmentFile

__all__ = ["FetchDataInfo", "FileRegion"]


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Bytes ``[position, position + nbytes)`` of ``file``; send with
    ``os.sendfile(socket_fd, region.file.fileno(), region.position, region.nbytes)``."""

    file: SegmentFile
    position: int
    nbytes: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """The region's bytes (for tools and tests; the server sends regions with sendfile)."""
        chunks: list[bytes] = []
        fd = self.file.fileno()
        done = 0
        while done < self.nbytes:
            chunk = os.pread(fd, self.nbytes - done, self.position + done)
            if not chunk:
                raise EOFError(f"region {self.position}+{self.nbytes} ends past the end of its file")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of :meth:`~tidelog.storage.partition_log.PartitionLog.read`."""

    fetch_offset: int
    regions: tuple[FileRegion, ...]
    nbytes: int
    next_offset: int

    def read_bytes(self) -> bytes:
        """All regions' bytes concatenated (tools and tests)."""
        return b"".join(region.read() for region in self.regions)
