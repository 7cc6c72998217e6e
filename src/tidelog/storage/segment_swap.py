"""Swapping the log cleaner's output into a log (Kafka's ``LocalLog.replaceSegments``): file renames that
a crash can interrupt anywhere.

The cleaner (:mod:`.cleaner_job`) writes each cleaned segment as ``<base>.log.cleaned`` with its
``.cleaned`` indexes, fsynced, replacing consecutive inactive segments of the log whose first one starts at
``<base>``. :func:`replace_segments` then, in this order:

1. checks every replacement against the log as it is now (retention and truncation go on during a
   cleaning) and removes the ``.cleaned`` files of those it drops or rejects;
2. renames every accepted segment's ``.cleaned`` files to ``.swap``, the ``.log`` last (what recovery looks
   for), then fsyncs the directory;
3. for each replacement in offset order, makes the old segments ``.deleted`` and the ``.swap`` files live
   (the ``.log`` last), opens the new segment in the old ones' place; then fsyncs the directory.

Invariants:

* Every step leaves a directory that recovery (:mod:`.recovery`, steps 1 and 2) completes to either the
  old segments or the new ones: ``.cleaned`` files are leftovers to remove; a ``<base>.log.swap`` at a base
  offset below every ``.cleaned`` file is a finished output that replaces whatever segments its offsets
  cover; its indexes are rebuilt. Offsets never change, so both outcomes read the same keys' last values.
* Replacements were cleaned together: if one does not fit the log any more (a segment gone, now active, not
  consecutive, or its ``.cleaned`` log missing), none is swapped in. Leading replacements whose segments
  all left the log meanwhile (retention) are dropped, and the rest still go in.
* Only the owner of the log calls this (it changes the log's segments); the ``delete`` callback takes
  segments out of the log as the log always does (``.deleted``, unlinked after ``file.delete.delay.ms``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from tidelog.storage import layout
from tidelog.storage.checkpoint import fsync_dir
from tidelog.storage.log_segments import LogSegments
from tidelog.storage.segment import LogSegment

__all__ = ["SWAP_ORDER", "rename_segment_files", "replace_segments"]

SWAP_ORDER: Final = (
    layout.INDEX_FILE_SUFFIX,
    layout.TIME_INDEX_FILE_SUFFIX,
    layout.TXN_INDEX_FILE_SUFFIX,
    layout.LOG_FILE_SUFFIX,
)
"""A segment's files in the order the swap renames them: the ``.log`` (what recovery looks for) last."""

Replacement = tuple[int, Sequence[LogSegment]]
"""``(base_offset, old)``: the cleaned segment at ``base_offset`` and the segments it replaces."""


def rename_segment_files(directory: Path, base_offset: int, from_suffix: str, to_suffix: str) -> None:
    """Rename the files of segment ``base_offset`` that carry the extra suffix ``from_suffix`` (in
    :data:`SWAP_ORDER`; a missing one is skipped)."""
    for suffix in SWAP_ORDER:
        source = directory / layout.file_name(base_offset, suffix + from_suffix)
        if source.exists():
            source.replace(directory / layout.file_name(base_offset, suffix + to_suffix))


def _fitting(
    segments: LogSegments, replacements: Sequence[Replacement], directory: Path
) -> tuple[list[Replacement], list[int], int]:
    """``(accepted, dropped base offsets, rejected count)`` of step 1 (module docstring)."""
    position = segments.positions()
    remaining = list(replacements)
    dropped: list[int] = []
    while remaining and all(id(segment) not in position for segment in remaining[0][1]):
        dropped.append(remaining.pop(0)[0])
    accepted: list[Replacement] = []
    for base, old in remaining:
        places = [position.get(id(segment)) for segment in old]
        first = places[0] if places else None
        if (
            first is None
            or places != list(range(first, first + len(old)))
            or first + len(old) >= len(segments)
            or old[0].base_offset != base
            or not layout.log_file(directory, base, layout.CLEANED_FILE_SUFFIX).exists()
        ):
            break
        accepted.append((base, old))
    if len(accepted) < len(remaining):
        return [], dropped + [base for base, _ in remaining], len(remaining)
    return accepted, dropped, 0


def replace_segments(
    segments: LogSegments,
    replacements: Sequence[Replacement],
    *,
    directory: Path,
    open_segment: Callable[[int], LogSegment],
    delete: Callable[[Sequence[LogSegment]], None],
) -> tuple[int, int]:
    """Swap the finished ``.cleaned`` segments of ``replacements`` (in base offset order) into
    ``segments``, as the module docstring says; returns ``(swapped, rejected)``. ``open_segment(base)``
    opens a live segment; ``delete(old)`` takes old segments out of the log."""
    accepted, dropped, rejected = _fitting(segments, replacements, directory)
    for base in dropped:
        for suffix in SWAP_ORDER:
            (directory / layout.file_name(base, suffix + layout.CLEANED_FILE_SUFFIX)).unlink(missing_ok=True)
    if not accepted:
        return 0, rejected
    for base, _ in accepted:
        rename_segment_files(directory, base, layout.CLEANED_FILE_SUFFIX, layout.SWAP_FILE_SUFFIX)
    fsync_dir(directory)
    for base, old in accepted:
        delete(old)
        rename_segment_files(directory, base, layout.SWAP_FILE_SUFFIX, "")
        segments.insert(open_segment(base))
    fsync_dir(directory)
    return len(accepted), rejected
