"""What a cleaning reports to its throttle: the byte count of every read of a source segment and of every
write of a ``.cleaned`` log, right after each, with the abort flag polled after each."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from tests.storage.cleaner_support import COMPACT, CompactedLog, compacted, random_updates, read_records

from tidelog.protocol.records import ControlRecordType
from tidelog.storage import cleaner_job, layout
from tidelog.storage.cleaner import CleanerConfig
from tidelog.storage.cleaner_job import LogCleaningAbortedError, cleaned_file

NOW = 1_700_000_000_000


def dirty_log(directory: Path, cleaner_config: CleanerConfig | None = None) -> CompactedLog:
    """A few segments of updates to 20 keys, an aborted and a committed transaction among them, rolled."""
    log = CompactedLog(directory, COMPACT, cleaner_config)
    rng = random.Random(11)
    random_updates(log, rng, keys=20, records=200, now_ms=NOW)
    log.append_transactional([(b"key-001", b"aborted")], producer_id=7, base_sequence=0, now_ms=NOW)
    log.append_marker(ControlRecordType.ABORT, producer_id=7, now_ms=NOW)
    log.written.pop()  # the aborted record is not read back
    log.append_transactional([(b"key-002", b"committed")], producer_id=8, base_sequence=0, now_ms=NOW)
    log.append_marker(ControlRecordType.COMMIT, producer_id=8, now_ms=NOW)
    random_updates(log, rng, keys=20, records=200, now_ms=NOW)
    log.settle(NOW, roll=True)
    return log


def test_a_first_cleaning_reports_each_segment_three_times_and_each_cleaned_log_once(tmp_path: Path) -> None:
    log = dirty_log(tmp_path)
    try:
        # Every segment but the empty active one, each read whole (the I/O buffer holds a segment).
        sizes = [path.stat().st_size for path in sorted(log.partition_dir.glob("*.log"))[:-1]]
        cleaning = log.cleaner.grab_filthiest_log(NOW)
        assert cleaning is not None
        assert [source.size for source in cleaning.job.sources] == sizes
        reported: list[int] = []
        result = cleaning.job.run(throttle=reported.append)
        assert sum(group.source_count for group in result.groups) == len(sizes) > 3
        expected = sizes + sizes  # the transaction scan, then the offset map (the whole log is dirty)
        cleaned_sizes = []
        for group in result.groups:
            cleaned_size = (
                cleaned_file(log.partition_dir, group.base_offset, layout.LOG_FILE_SUFFIX).stat().st_size
            )
            cleaned_sizes.append(cleaned_size)
            expected += sizes[group.first_source : group.first_source + group.source_count]
            expected += [cleaned_size] if cleaned_size else []  # nothing kept: nothing written
        assert reported == expected
        assert sum(reported) == 3 * sum(sizes) + sum(cleaned_sizes)
        assert 0 < sum(cleaned_sizes) < sum(sizes)
        assert log.cleaner.complete(cleaning, result, NOW)
        assert read_records(log.log) == compacted(log.written, result.end_offset)
    finally:
        log.close()


class RecordingOs:
    """``os`` for the cleaner job's module, recording the byte count of every ``pread`` and ``write``."""

    def __init__(self, events: list[tuple[str, int]]) -> None:
        self.events = events

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def pread(self, fd: int, length: int, position: int) -> bytes:
        data = os.pread(fd, length, position)
        self.events.append(("read", len(data)))
        return data

    def write(self, fd: int, data: memoryview) -> int:
        written = os.write(fd, data)
        self.events.append(("write", written))
        return written


def test_with_a_small_buffer_every_read_and_write_is_reported_right_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A buffer smaller than most batches: windows cut batches, oversized batches are read again whole.
    log = dirty_log(tmp_path, CleanerConfig(io_buffer_size=100))
    try:
        cleaning = log.cleaner.grab_filthiest_log(NOW)
        assert cleaning is not None
        events: list[tuple[str, int]] = []
        monkeypatch.setattr(cleaner_job, "os", RecordingOs(events))
        result = cleaning.job.run(throttle=lambda nbytes: events.append(("throttle", nbytes)))
        monkeypatch.undo()
        io = [event for event in events if event[0] != "throttle"]
        assert events == [e for kind, nbytes in io for e in ((kind, nbytes), ("throttle", nbytes))]
        reads = [nbytes for kind, nbytes in io if kind == "read"]
        writes = [nbytes for kind, nbytes in io if kind == "write"]
        cleaned_sizes = [
            cleaned_file(log.partition_dir, group.base_offset, layout.LOG_FILE_SUFFIX).stat().st_size
            for group in result.groups
        ]
        assert sum(writes) == sum(cleaned_sizes)
        assert len(writes) > len(
            [size for size in cleaned_sizes if size]
        )  # flushed whenever the buffer fills
        assert len(reads) > 3 * len(cleaning.job.sources)
        assert log.cleaner.complete(cleaning, result, NOW)
        assert read_records(log.log) == compacted(log.written, result.end_offset)
    finally:
        log.close()


def test_the_abort_flag_is_polled_right_after_each_report(tmp_path: Path) -> None:
    # Reads of 100 bytes: without a poll after each read the first segment's scan would go on.
    log = dirty_log(tmp_path, CleanerConfig(io_buffer_size=100))
    try:
        before = sorted(path.name for path in log.partition_dir.iterdir())
        cleaning = log.cleaner.grab_filthiest_log(NOW)
        assert cleaning is not None
        assert cleaning.job.sources[0].size > 400
        reported: list[int] = []
        with pytest.raises(LogCleaningAbortedError):
            cleaning.job.run(lambda: len(reported) == 3, reported.append)
        assert reported == [100, 100, 100]
        log.cleaner.abandon(cleaning)
        assert sorted(path.name for path in log.partition_dir.iterdir()) == before
    finally:
        log.close()
