"""Segments that left a log, on their way off the disk (Kafka's ``LocalLog.deleteSegmentFiles``).

A segment leaves a log (retention, DeleteRecords, truncation, a cleaner swap) in two steps: at once its
files are renamed ``<name>.deleted`` and its handles released; ``file.delete.delay.ms`` later the files
are unlinked (:meth:`DeletedSegments.remove_due`, the log manager's retention task).

Invariants:

* A ``.deleted`` file is never read by the log again: recovery removes leftovers at start-up. Regions
  already handed out keep their file object, so a fetch that began before the rename reads on.
* With a delay of 0 the files go at once; else the segment waits here until its deadline, or until the
  log closes (:meth:`DeletedSegments.remove_all`), whichever comes first.
* Time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.storage.segment import LogSegment

__all__ = ["DeletedSegments"]


class DeletedSegments:
    """The ``.deleted`` segments of one log that are waiting for their delay."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[tuple[int, LogSegment]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, segments: Sequence[LogSegment], *, now_ms: int, delay_ms: int) -> None:
        """Rename each segment's files ``.deleted``; unlink them now (``delay_ms`` 0) or after the delay."""
        for segment in segments:
            segment.rename_for_deletion()
            if delay_ms == 0:
                segment.delete_files()
            else:
                self._pending.append((now_ms + delay_ms, segment))

    def remove_due(self, now_ms: int) -> int:
        """Unlink the files whose delay has passed; returns how many segments went."""
        due = [segment for deadline, segment in self._pending if deadline <= now_ms]
        self._pending = [(deadline, s) for deadline, s in self._pending if deadline > now_ms]
        for segment in due:
            segment.delete_files()
        return len(due)

    def remove_all(self) -> None:
        """Unlink every pending file now (the log closes)."""
        pending, self._pending = self._pending, []
        for _, segment in pending:
            segment.delete_files()
