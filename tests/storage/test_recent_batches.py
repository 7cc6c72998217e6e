"""RecentBatches: tail lookups answer exactly what a header scan would, or "unknown"."""

from __future__ import annotations

from tidelog.storage.recent_batches import CAPACITY, RecentBatches


def _filled(n: int, *, size: int = 100, per_batch: int = 2) -> RecentBatches:
    recent = RecentBatches()
    for i in range(n):
        recent.record(i * size, i * per_batch, i * per_batch + per_batch - 1, size)
    return recent


def test_finds_the_batch_holding_an_offset_and_its_extent() -> None:
    recent = _filled(5)  # batches [0,1] [2,3] [4,5] [6,7] [8,9], 100 bytes each
    assert recent.find(0, 500) == (0, 0, 1, 100)
    assert recent.find(5, 500) == (200, 4, 5, 100)
    assert recent.find(9, 500) == (400, 8, 9, 100)
    assert recent.find(10, 500) is False  # past the end: no batch of the segment


def test_unknown_when_the_size_is_not_the_remembered_end_or_the_offset_is_older() -> None:
    recent = _filled(5)
    assert recent.find(4, 600) is None  # something was written that it did not see
    recent.clear()
    assert recent.find(4, 500) is None


def test_a_gap_in_positions_starts_over_and_the_memory_stays_bounded() -> None:
    recent = _filled(5)
    recent.record(1000, 10, 10, 50)  # not where the last batch ended
    assert recent.find(9, 1050) is None
    assert recent.find(10, 1050) == (1000, 10, 10, 50)
    many = _filled(3 * CAPACITY)
    assert many.find(0, 3 * CAPACITY * 100) is None  # forgotten
    last = 3 * CAPACITY - 1
    assert many.find(2 * last, 3 * CAPACITY * 100) == (last * 100, 2 * last, 2 * last + 1, 100)


def test_offsets_in_a_compacted_gap_find_the_next_batch() -> None:
    recent = RecentBatches()
    recent.record(0, 0, 3, 100)
    recent.record(100, 10, 12, 100)
    assert recent.find(5, 200) == (100, 10, 12, 100)
