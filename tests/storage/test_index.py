"""OffsetIndex and TimeIndex: pending entries, lookups, truncation, trimming, sanity checks, reopening."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tidelog.storage.errors import CorruptIndexError
from tidelog.storage.index import OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset


def test_offset_index_rounds_down_keeps_entries_pending_and_looks_up(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 4099)
    assert index.entries == 0
    assert not path.exists()  # created by the first entry
    assert index.max_entries == 512  # rounded down to whole 8-byte entries
    assert index.lookup(500) is None
    for i in range(10):
        assert index.append(100 + 10 * i + 9, 1000 * (i + 1))
    assert not path.exists()  # pending: written a page at a time, or when flushed, rolled or closed
    assert index.entries == 10
    assert index.lookup(99) is None
    assert index.lookup(108) is None
    assert index.lookup(109) == OffsetPosition(109, 1000)
    assert index.lookup(118) == OffsetPosition(109, 1000)
    assert index.lookup(119) == OffsetPosition(119, 2000)
    assert index.lookup(10**9) == OffsetPosition(199, 10000)
    assert index.lookup_by_position(999) is None
    assert index.lookup_by_position(1000) == OffsetPosition(109, 1000)
    assert index.lookup_by_position(2999) == OffsetPosition(119, 2000)
    assert index.last_offset == 199
    index.flush()
    assert path.stat().st_size == 80  # exactly the entries, never preallocated
    assert index.lookup(118) == OffsetPosition(109, 1000)
    # Big-endian (relative offset int32, position int32).
    assert path.read_bytes()[:8] == struct.pack(">ii", 9, 1000)
    with pytest.raises(ValueError, match="not above the last entry"):
        index.append(199, 11000)


def test_offset_index_truncate_trim_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1024)
    for i in range(1, 6):
        index.append(i * 10, i * 100)
    index.truncate_to(30)  # removes entries with offset >= 30
    assert [index.entry(i) for i in range(index.entries)] == [
        OffsetPosition(10, 100),
        OffsetPosition(20, 200),
    ]
    index.truncate_to(21)
    assert index.entries == 2
    index.trim_to_valid_size()
    assert path.stat().st_size == 16
    assert index.is_full
    assert not index.append(30, 300)
    index.close()
    reopened = OffsetIndex(path, 0, 1024)
    assert reopened.entries == 2
    assert reopened.lookup(25) == OffsetPosition(20, 200)
    reopened.sanity_check(log_size=201)
    reopened.resize(1024)
    assert reopened.entries == 2
    assert reopened.append(30, 300)
    reopened.truncate_to(0)
    assert reopened.entries == 0


def test_released_mapping_maps_again(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 64)
    index.append(5, 50)
    index.close()
    assert index.lookup(7) == OffsetPosition(5, 50)
    index.close()
    assert index.append(6, 60)
    assert index.entries == 2


def _write(path: Path, fmt: str, rows: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(fmt, *row) for row in rows))


@pytest.mark.parametrize(
    ("rows", "extra", "log_size", "message"),
    [
        ([(1, 10), (2, 20)], b"\x00", None, "not a multiple"),
        ([(1, 10), (1, 20)], b"", None, "not strictly increasing"),
        ([(1, 10), (2, 10)], b"", None, "not strictly increasing"),
        ([(5, 50), (0, 0), (0, 0)], b"", None, "not strictly increasing"),  # untrimmed preallocated tail
        ([(-1, 10)], b"", None, "negative"),
        ([(1, 10), (2, 20)], b"", 20, "beyond log size"),
    ],
)
def test_offset_index_sanity_check(
    tmp_path: Path, rows: list[tuple[int, int]], extra: bytes, log_size: int | None, message: str
) -> None:
    path = tmp_path / "00000000000000000000.index"
    _write(path, ">ii", rows)
    with path.open("ab") as f:
        f.write(extra)
    with pytest.raises(CorruptIndexError, match=message):
        OffsetIndex(path, 0, 1024).sanity_check(log_size)


def test_time_index_appends_only_growing_timestamps_and_keeps_a_slot(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 40)  # 3 slots of 12 bytes, one kept for the roll entry
    assert not path.exists()  # created when its first entries are written
    assert index.entries == 0
    assert index.max_entries == 3
    assert not index.maybe_append(-1, 50)
    assert not path.exists()
    assert index.maybe_append(1000, 52)
    assert not path.exists()  # pending
    assert not index.maybe_append(1000, 53)
    assert not index.maybe_append(999, 54)
    assert index.maybe_append(2000, 55)
    assert index.is_full
    assert not index.maybe_append(3000, 56)
    assert index.maybe_append(3000, 56, skip_full_check=True)
    assert index.entries == 3
    assert index.lookup(999) is None
    assert index.lookup(1000) == TimestampOffset(1000, 52)
    assert index.lookup(2999) == TimestampOffset(2000, 55)
    assert index.lookup(10**12) == TimestampOffset(3000, 56)
    assert index.last_entry() == TimestampOffset(3000, 56)
    index.write_pending()
    assert path.stat().st_size == 36
    assert path.read_bytes()[:12] == struct.pack(">qi", 1000, 2)
    with pytest.raises(ValueError, match="below the last entry"):
        index.maybe_append(4000, 55, skip_full_check=True)
    index.truncate_to(55)
    assert index.entries == 1
    assert path.stat().st_size == 12  # cut from the file too
    index.sanity_check()


@pytest.mark.parametrize(
    "rows",
    [
        [(10, 1), (10, 2)],
        [(10, 1), (20, 0)],
        [(30, 1), (0, 0)],  # untrimmed preallocated tail
        [(-5, 1)],
        [(5, -1)],
    ],
)
def test_time_index_sanity_check(tmp_path: Path, rows: list[tuple[int, int]]) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    _write(path, ">qi", rows)
    with pytest.raises(CorruptIndexError):
        TimeIndex(path, 0, 1024).sanity_check()


def test_rename_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 64)
    index.append(3, 30)
    index.flush()
    index.append(4, 40)  # pending across the rename: written to the new name
    index.rename_to(tmp_path / "00000000000000000000.index.deleted")
    assert index.lookup(3) == OffsetPosition(3, 30)
    index.write_pending()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000000.index.deleted"]
    assert (tmp_path / "00000000000000000000.index.deleted").read_bytes() == struct.pack(
        ">iiii", 3, 30, 4, 40
    )
    index.delete_file()
    assert list(tmp_path.iterdir()) == []


def test_index_file_is_written_a_page_at_a_time_up_to_its_capacity(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 20_000)  # capacity 2,500 entries
    sizes: list[int] = []
    for i in range(2_500):
        assert index.append(i, i * 10)
        size = path.stat().st_size if path.exists() else 0
        if not sizes or sizes[-1] != size:
            sizes.append(size)
        if i in (700, 1600):  # lookups map the file as written and read pending entries from memory
            assert index.lookup(i) == OffsetPosition(i, i * 10)
            assert index.lookup(511) == OffsetPosition(511, 5110)
            assert index.lookup(512) == OffsetPosition(512, 5120)
    assert sizes == [0, 4096, 8192, 12288, 16384]
    assert index.is_full
    assert not index.append(2_500, 25_000)
    assert index.lookup(1234) == OffsetPosition(1234, 12340)
    assert index.lookup_by_position(24_995) == OffsetPosition(2_499, 24_990)
    index.trim_to_valid_size()
    assert path.stat().st_size == 20_000
    reopened = OffsetIndex(path, 0, 20_000)
    assert reopened.entries == 2_500
    reopened.sanity_check()


def test_truncation_across_the_written_and_pending_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 10_000)
    for i in range(600):  # 512 written, 88 pending
        index.append(i, i * 10)
    assert path.stat().st_size == 4096
    index.truncate_to(550)  # only pending entries go
    assert (index.entries, path.stat().st_size) == (550, 4096)
    assert index.lookup(10**6) == OffsetPosition(549, 5490)
    index.truncate_to(300)  # into the file: cut there, nothing pending
    assert (index.entries, path.stat().st_size) == (300, 2400)
    assert index.lookup(10**6) == OffsetPosition(299, 2990)
    for i in range(300, 900):  # appended after the cut: the file continues at entry 300
        index.append(i, i * 10 + 1)
    index.flush()
    assert path.stat().st_size == 900 * 8
    reopened = OffsetIndex(path, 0, 10_000)
    assert reopened.lookup(299) == OffsetPosition(299, 2990)
    assert reopened.lookup(300) == OffsetPosition(300, 3001)
    assert reopened.lookup(10**6) == OffsetPosition(899, 8991)
    reopened.sanity_check()
    reopened.reset()  # before a rebuild: the file is emptied
    assert (reopened.entries, path.stat().st_size, reopened.max_entries) == (0, 0, 1250)


def test_process_dying_with_pending_entries_leaves_a_sparser_valid_index(tmp_path: Path) -> None:
    """What another process (the next start) sees between any two appends: the written prefix only, whole
    entries that pass the sanity check; a lookup lands on an earlier entry, still at or below the target."""
    offsets = tmp_path / "00000000000000000000.index"
    times = tmp_path / "00000000000000000000.timeindex"
    index = OffsetIndex(offsets, 0, 10_000)
    time_index = TimeIndex(times, 0, 10_000)
    for i in range(520):
        index.append(i, i * 10)
        time_index.maybe_append(1000 + i, i)
        on_disk = OffsetIndex(offsets, 0, 10_000)  # the file as a restart would find it
        assert on_disk.entries == (512 if i >= 511 else 0)
        on_disk.sanity_check(log_size=i * 10 + 1)
        found = on_disk.lookup(i)
        assert found is None or found.offset <= i
        on_disk_times = TimeIndex(times, 0, 10_000)
        assert on_disk_times.entries == (342 if i >= 341 else 0)  # 4,104 bytes
        on_disk_times.sanity_check()
        on_disk.close()
        on_disk_times.close()
    fd = time_index.open_for_fsync()  # a flush plan writes pending entries before its fsync
    assert fd is not None
    os.close(fd)
    assert TimeIndex(times, 0, 10_000).entries == 520


def test_trimming_an_unwritten_index_creates_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    index = TimeIndex(path, 0, 1200)
    assert index.open_for_fsync() is None
    index.flush()  # nothing to make durable, no file needed
    assert not path.exists()
    index.trim_to_valid_size()
    assert path.stat().st_size == 0
    assert TimeIndex(path, 0, 1200).entries == 0


def test_the_last_entry_an_append_checks_against_follows_every_change_of_the_entries(tmp_path: Path) -> None:
    """The append path's order checks use the last entry as remembered from the append that made it:
    after a truncation, a reset, a deletion or a reopen the entry that is last now is the one checked."""
    offsets = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 10_000)
    times = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 10_000)
    for i in range(1, 6):
        assert offsets.append(i * 10, i * 100)
        assert times.maybe_append(1000 + i, i * 10)
    assert offsets.last_entry() == OffsetPosition(50, 500)
    assert times.last_entry() == TimestampOffset(1005, 50)
    offsets.truncate_to(30)
    times.truncate_to(30)
    assert offsets.last_entry() == OffsetPosition(20, 200)
    assert times.last_entry() == TimestampOffset(1002, 20)
    assert offsets.append(25, 250)  # above 20: accepted (50 was truncated away)
    assert times.maybe_append(1003, 25)  # 1003 > 1002, the last timestamp now
    with pytest.raises(ValueError, match="not above the last entry 25"):
        offsets.append(25, 260)
    assert not times.maybe_append(1003, 26)
    offsets.flush()
    times.flush()
    reopened = OffsetIndex(offsets.path, 0, 10_000)
    assert reopened.last_entry() == OffsetPosition(25, 250)
    with pytest.raises(ValueError, match="not above the last entry 25"):
        reopened.append(25, 300)
    offsets.reset()
    assert offsets.last_entry() is None
    assert offsets.append(5, 50)  # below every entry that was there: the index is empty now
    assert offsets.last_entry() == OffsetPosition(5, 50)
    times.delete_file()
    assert times.last_entry() is None
    assert times.maybe_append(7, 1)
    assert times.last_entry() == TimestampOffset(7, 1)


def test_an_entry_whose_offset_does_not_fit_32_bits_relative_is_refused(tmp_path: Path) -> None:
    """The append paths check the relative offset inline; out of range still raises and adds nothing."""
    offsets = OffsetIndex(tmp_path / "00000000000000001000.index", 1000, 10_000)
    times = TimeIndex(tmp_path / "00000000000000001000.timeindex", 1000, 10_000)
    with pytest.raises(ValueError, match="out of range for base 1000"):
        offsets.append(999, 0)
    with pytest.raises(ValueError, match="out of range for base 1000"):
        offsets.append(1000 + 2**31, 0)
    with pytest.raises(ValueError, match="out of range for base 1000"):
        times.maybe_append(5, 1000 + 2**31)
    assert offsets.entries == 0
    assert times.entries == 0
    assert offsets.append(1000 + 2**31 - 1, 7)  # the largest relative offset fits
    assert offsets.last_entry() == OffsetPosition(1000 + 2**31 - 1, 7)
    assert times.maybe_append(5, 1000 + 2**31 - 1)
    assert times.last_entry() == TimestampOffset(5, 1000 + 2**31 - 1)
