"""Retention by time and size, DeleteRecords (log start offset), truncation, deferred file deletion."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, headers, open_log, read_everything, record_tuples

from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import OffsetOutOfRangeError
from tidelog.storage.partition_log import PartitionLog


def fill(
    log: PartitionLog, count: int, *, timestamp_of: int | None = None, start_seq: int = 0
) -> list[bytes]:
    out = []
    for seq in range(start_seq, start_seq + count):
        data = bytearray(batch(seq, timestamp=(seq * 10 if timestamp_of is None else timestamp_of)))
        log.append(data, leader_epoch=0, now_ms=0)
        out.append(bytes(data))
    return out


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_retention_by_time_deletes_old_segments_after_the_delay(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=1000, file_delete_delay_ms=500)
    log = open_log(tmp_path / "t-0", config)
    written = fill(log, 30)  # batch seq has timestamps 10*seq .. 10*seq+2
    segments = log.segments
    assert len(segments) == 5
    bases = [s.base_offset for s in segments]
    largest = [s.largest_timestamp for s in segments]
    assert largest == [10 * (b // 3 - 1) + 2 for b in bases[1:]] + [292]
    # Nothing above the high watermark is deleted.
    assert log.delete_retention(now_ms=10**9) == 0
    log.update_high_watermark(log.log_end_offset)
    now = largest[1] + 1001  # segments 0 and 1 are more than retention.ms old
    assert log.delete_retention(now_ms=now) == 2
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.log_start_offset == bases[2]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert read_everything(log) == b"".join(written[bases[2] // 3 :])
    deleted = [f"{b:020d}{suffix}.deleted" for b in bases[:2] for suffix in (".index", ".log", ".timeindex")]
    assert set(deleted) <= set(files(tmp_path / "t-0"))
    assert log.remove_deleted_files(now + 499) == 0
    assert set(deleted) <= set(files(tmp_path / "t-0"))
    assert log.remove_deleted_files(now + 500) == 2
    assert not any(name.endswith(".deleted") for name in files(tmp_path / "t-0"))
    log.close()


def test_expired_active_segment_is_rolled_then_deleted(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=1000)
    log = open_log(tmp_path / "t-0", config)
    fill(log, 20)
    end = log.log_end_offset
    log.update_high_watermark(end)
    count = len(log.segments)
    assert log.delete_retention(now_ms=10**6) == count
    assert [(s.base_offset, s.size, s.is_active) for s in log.segments] == [(end, 0, True)]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (end, end, end)
    assert log.read(end, 100).nbytes == 0
    assert log.delete_retention(now_ms=10**7) == 0  # an empty active segment is never deleted
    # the roll snapshotted the producer state at the new base (Kafka's <offset>.snapshot); older ones went
    # with their segments; the leader epoch of the data deleted now starts at the new log start offset
    assert files(tmp_path / "t-0") == [
        f"{end:020d}.index",
        f"{end:020d}.log",
        f"{end:020d}.snapshot",
        f"{end:020d}.timeindex",
        "leader-epoch-checkpoint",
    ]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == f"0\n1\n0 {end}\n"
    info = log.append(batch(99), leader_epoch=0, now_ms=10**7)
    assert info.first_offset == end
    log.close()


def test_retention_by_size_deletes_oldest_while_still_over(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_bytes=2500)
    log = open_log(tmp_path / "t-0", config)
    fill(log, 40)
    log.update_high_watermark(log.log_end_offset)
    sizes = [s.size for s in log.segments]
    total = sum(sizes)
    expected = 0
    excess = total - 2500
    while excess - sizes[expected] >= 0:
        excess -= sizes[expected]
        expected += 1
    assert expected >= 2
    bases = [s.base_offset for s in log.segments]
    assert log.delete_retention(now_ms=0) == expected
    assert [s.base_offset for s in log.segments] == bases[expected:]
    assert log.size_in_bytes >= 2500
    assert log.size_in_bytes - log.segments[0].size < 2500
    assert log.log_start_offset == bases[expected]
    assert log.delete_retention(now_ms=0) == 0
    log.close()


def test_compact_only_topics_keep_old_segments(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=1, retention_bytes=1, cleanup_policy="compact")
    log = open_log(tmp_path / "t-0", config)
    fill(log, 20)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention(now_ms=10**9) == 0
    log.close()


def test_delete_records_before(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    written = fill(log, 30)
    bases = [s.base_offset for s in log.segments]
    log.update_high_watermark(40)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(41)
    target = bases[2] + 4  # inside the third segment, inside a batch
    assert log.delete_records_before(target) == target
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    data = log.read(target, 10**6).read_bytes()
    assert headers(data)[0].base_offset == (target // 3) * 3  # the batch holding the start, whole
    assert data == b"".join(written[target // 3 :])
    assert log.delete_records_before(5) == target  # never moves back
    assert log.high_watermark == 40
    log.close()
    reopened = open_log(tmp_path / "t-0", SMALL, clean=True, log_start_offset=target)
    assert reopened.log_start_offset == target
    reopened.close()


def test_truncate_to_the_middle_of_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", dataclasses.replace(SMALL, file_delete_delay_ms=10))
    written = fill(log, 30)
    bases = [s.base_offset for s in log.segments]
    log.update_high_watermark(80)
    log.flush()
    target = bases[2] + 7  # offset in the middle of a batch of the third segment
    assert log.truncate_to(target)
    kept = target // 3  # batches fully below the target
    assert log.log_end_offset == kept * 3
    assert [s.base_offset for s in log.segments] == bases[:3]
    assert log.active_segment.is_active
    assert (log.high_watermark, log.recovery_point) == (kept * 3, kept * 3)
    assert read_everything(log) == b"".join(written[:kept])
    index = log.active_segment.offset_index
    assert all(index.entry(i).offset < target for i in range(index.entries))
    assert index.max_entries == SMALL.segment_index_bytes // 8  # active again: takes entries up to the max
    more = fill(log, 3, start_seq=100)
    assert headers(more[0])[0].base_offset == kept * 3
    assert read_everything(log) == b"".join(written[:kept] + more)
    assert not log.truncate_to(log.log_end_offset)
    log.close()
    reopened = open_log(tmp_path / "t-0", SMALL, clean=True)
    assert read_everything(reopened) == b"".join(written[:kept] + more)
    assert not any(n.endswith(".deleted") for n in files(tmp_path / "t-0"))
    reopened.close()


def test_truncate_to_a_segment_base_and_below_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    written = fill(log, 20)
    bases = [s.base_offset for s in log.segments]
    assert log.truncate_to(bases[1])
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert (log.segments[-1].size, log.log_end_offset) == (0, bases[1])
    assert read_everything(log) == b"".join(written[: bases[1] // 3])
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(bases[1])
    assert [s.base_offset for s in log.segments] == [bases[1]]
    assert log.truncate_to(3)  # below every segment: start over there
    assert [(s.base_offset, s.size) for s in log.segments] == [(3, 0)]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (3, 3, 3)
    assert record_tuples(read_everything(log)) == []
    assert log.append(batch(5), leader_epoch=0, now_ms=0).first_offset == 3
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 20)
    log.truncate_fully_and_start_at(1000)
    assert [(s.base_offset, s.size) for s in log.segments] == [(1000, 0)]
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1000, 1000, 1000)
    assert files(tmp_path / "t-0") == [
        "00000000000000001000.index",
        "00000000000000001000.log",
        "00000000000000001000.timeindex",
        "leader-epoch-checkpoint",
    ]
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n0\n"  # no epoch left
    log.close()
    reopened = open_log(tmp_path / "t-0", SMALL, clean=True)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1000)
    reopened.close()


def test_regions_stay_readable_after_their_segment_is_deleted(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=0, file_delete_delay_ms=0)
    log = open_log(tmp_path / "t-0", config)
    written = fill(log, 10)
    log.update_high_watermark(log.log_end_offset)
    result = log.read(0, 10**6)
    assert log.delete_retention(now_ms=10**9) > 0
    assert not any(
        n.endswith(".log") and n.startswith("00000000000000000000") for n in files(tmp_path / "t-0")
    )
    assert result.read_bytes() == b"".join(written)  # the region keeps its file open
    log.close()


def test_segment_files_of_a_time_based_retention_without_timestamps_use_mtime(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=1000)
    log = open_log(tmp_path / "t-0", config)
    for _ in range(20):
        log.append(encode_batch([SimpleRecord(value=b"x" * 50)] * 3), leader_epoch=0, now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    first = log.segments[0]
    assert first.max_timestamp == -1
    mtime = first.largest_timestamp
    assert abs(mtime - int(first.log_path.stat().st_mtime * 1000)) <= 1
    count = len(log.segments)
    assert log.delete_retention(now_ms=mtime + 1000) == 0
    assert log.delete_retention(now_ms=mtime + 10**6) == count
    log.close()


def test_retention_config_changes_apply(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 20)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention(now_ms=10**8) == 0  # retention.ms is 7 days
    log.update_config(dataclasses.replace(SMALL, retention_ms=10))
    assert log.delete_retention(now_ms=10**8) == 4
    assert log.config.retention_ms == 10
    log.close()


def test_log_start_below_config_never_goes_above_end(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig())
    fill(log, 2)
    log.close()
    # A log start checkpoint past the end (the files lost data): the log starts over there.
    reopened = open_log(tmp_path / "t-0", LogConfig(), log_start_offset=50)
    assert (
        reopened.log_start_offset,
        reopened.log_end_offset,
        [s.base_offset for s in reopened.segments],
    ) == (
        50,
        50,
        [50],
    )
    reopened.close()
