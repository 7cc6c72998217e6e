"""LogSegments: ``active`` is the last segment after every change the log makes to the list."""

from __future__ import annotations

from pathlib import Path

from tidelog.storage.config import LogConfig
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.log_segments import LogSegments
from tidelog.storage.segment import LogSegment


def _segments(tmp_path: Path, *bases: int) -> list[LogSegment]:
    config, limiter = LogConfig(), OpenSegmentLimiter(100)
    return [LogSegment.create(tmp_path, base, config, limiter, now_ms=0) for base in bases]


def test_active_is_the_last_segment_through_append_insert_remove_and_reset(tmp_path: Path) -> None:
    s0, s10, s20, s30, s40 = _segments(tmp_path, 0, 10, 20, 30, 40)
    segments = LogSegments([s0, s10])
    assert segments.active is s10
    segments.append(s30)
    assert segments.active is s30
    segments.insert(s20)  # in the middle: the last one stays active
    assert list(segments) == [s0, s10, s20, s30]
    assert segments.active is s30
    segments.insert(s40)  # past the end: the new last one
    assert segments.active is s40
    segments.remove([s0, s40])
    assert list(segments) == [s10, s20, s30]
    assert segments.active is s30
    segments.reset(s0)
    assert list(segments) == [s0]
    assert segments.active is s0


def test_pop_active_leaves_the_previous_one_active_and_a_roll_replaces_an_only_segment(
    tmp_path: Path,
) -> None:
    s0, s10, s20 = _segments(tmp_path, 0, 10, 20)
    segments = LogSegments([s0, s10])
    assert segments.pop_active() is s10
    assert segments.active is s0
    assert segments.pop_active() is s0  # a roll replacing an empty only segment: its successor comes next
    segments.append(s20)
    assert list(segments) == [s20]
    assert segments.active is s20
