"""Which segments retention deletes (the predicates of Kafka's ``UnifiedLog.deleteOldSegments``).

Three breaches, each a predicate over a segment and the one after it (None for the active segment):

* log start offset: the next segment starts at or below the log start offset (DeleteRecords, or a start
  offset checkpointed above the first segment), so nothing in this one is readable any more. Always.
* ``retention.bytes``: while the log is larger than the limit by at least the oldest segment's size, that
  segment goes. With ``delete`` in ``cleanup.policy`` and a limit >= 0.
* ``retention.ms``: the segment's largest timestamp (else its file's modification time) is more than
  ``retention.ms`` before ``now_ms``. With ``delete`` in ``cleanup.policy`` and a limit >= 0.

Invariants (:func:`deletable_segments`): only a prefix of the log goes, oldest first, stopping at the first
segment the breach spares; only segments entirely below the high watermark; never an empty active segment
(retention that takes every other segment makes the log roll first, so the active one is never deleted in
place: the log's job). Pure: no file is touched here, and time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tidelog.storage.config import LogConfig
from tidelog.storage.segment import LogSegment

__all__ = [
    "Breach",
    "deletable_segments",
    "log_start_offset_breach",
    "retention_ms_breach",
    "retention_size_breach",
]

Breach = Callable[[LogSegment, "LogSegment | None"], bool]
"""Whether a segment (given the one after it, None for the last) breaches a retention rule."""


def log_start_offset_breach(log_start_offset: int) -> Breach:
    """Segments entirely below ``log_start_offset``."""

    def breached(_segment: LogSegment, next_segment: LogSegment | None) -> bool:
        return next_segment is not None and next_segment.base_offset <= log_start_offset

    return breached


def retention_size_breach(config: LogConfig, size_in_bytes: int) -> Breach | None:
    """The oldest segments while the log (``size_in_bytes``) exceeds ``retention.bytes`` by at least their
    size; None when there is no limit or the log is within it. The predicate counts what it spared: ask
    it about the segments in order, once each."""
    retention_bytes = config.retention_bytes
    if retention_bytes < 0 or size_in_bytes < retention_bytes:
        return None
    excess = size_in_bytes - retention_bytes

    def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return breached


def retention_ms_breach(config: LogConfig, now_ms: int) -> Breach | None:
    """Segments whose largest timestamp is more than ``retention.ms`` before ``now_ms``; None without a
    limit."""
    retention_ms = config.retention_ms
    if retention_ms < 0:
        return None

    def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
        return now_ms - segment.largest_timestamp > retention_ms

    return breached


def deletable_segments(
    segments: Sequence[LogSegment], breach: Breach, *, high_watermark: int, log_end_offset: int
) -> list[LogSegment]:
    """The oldest segments, in order, up to the first one that is not entirely below the high watermark,
    is the empty active segment, or does not ``breach``."""
    deletable: list[LogSegment] = []
    for i, segment in enumerate(segments):
        next_segment = segments[i + 1] if i + 1 < len(segments) else None
        upper = next_segment.base_offset if next_segment is not None else log_end_offset
        last_and_empty = next_segment is None and segment.size == 0
        if high_watermark >= upper and not last_and_empty and breach(segment, next_segment):
            deletable.append(segment)
        else:
            break
    return deletable
