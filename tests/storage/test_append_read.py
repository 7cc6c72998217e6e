"""Appending and reading a partition log: offsets, regions, byte bounds, rolls, indexes, timestamps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, decode_all, headers, open_log, read_everything, record_tuples
from tests.support.small_fs import enospc_on_writes_to

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import (
    RECORD_BATCH_HEADER_SIZE,
    InvalidTimestampError,
    SimpleRecord,
    TimestampType,
    encode_batch,
    iter_batch_headers,
    read_batch_header,
    validate_batches,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import (
    LogCorruptionError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from tidelog.storage.index import OffsetPosition, TimestampOffset
from tidelog.storage.partition_log import OffsetAndTimestamp, PartitionLog

BIG = LogConfig(index_interval_bytes=256)


def fill(log: PartitionLog, count: int, *, start_seq: int = 0, now_ms: int = 0, **kwargs: int) -> list[bytes]:
    """Append ``count`` batches; return what the log holds for each (offsets assigned)."""
    out = []
    for seq in range(start_seq, start_seq + count):
        data = bytearray(batch(seq, **kwargs))
        log.append(data, leader_epoch=7, now_ms=now_ms)
        out.append(bytes(data))
    return out


def test_append_assigns_offsets_and_leader_epoch_in_place(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG, now_ms=5)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    first = batch(0)
    info = log.append(first, leader_epoch=3, now_ms=10)
    assert info.first_offset == 0
    assert info.last_offset == 2
    assert info.max_timestamp == 1_000_002
    assert info.shallow_offset_of_max_timestamp == 2
    assert info.log_append_time == -1
    assert info.log_start_offset == 0
    assert (info.shallow_count, info.records_count, info.valid_bytes) == (1, 3, len(first))
    assert read_batch_header(first).base_offset == 0  # bytes input is copied, not rewritten
    second = bytearray(batch(1, records=5)) + bytearray(batch(2, records=2))
    info = log.append(second, leader_epoch=4, now_ms=11)
    assert (info.first_offset, info.last_offset, info.shallow_count, info.records_count) == (3, 9, 2, 7)
    assert [h.base_offset for h in headers(bytes(second))] == [3, 8]  # a bytearray is rewritten in place
    assert log.log_end_offset == 10
    data = log.read(0, 10**6).read_bytes()
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers(data)] == [
        (0, 2, 3),
        (3, 7, 4),
        (8, 9, 4),
    ]
    assert [r[0] for r in record_tuples(data)] == list(range(10))
    assert record_tuples(data)[3] == (3, 1_000_001, b"k000001-0", bytes([1]) * 20)
    log.close()


def test_log_append_time_stamps_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append(batch(0, timestamp=5), leader_epoch=0, now_ms=777_000)
    assert info.log_append_time == 777_000
    assert info.max_timestamp == 777_000
    header, records = decode_all(log.read(0, 1000).read_bytes())[0]
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in records] == [777_000] * 3
    log.close()


def test_reads_start_at_the_batch_holding_the_offset_mid_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    written = fill(log, 40)  # 40 batches of 3 offsets, several index entries
    positions = [sum(len(w) for w in written[:i]) for i in range(len(written))]
    assert log.active_segment.offset_index.entries > 2
    for fetch in (0, 1, 2, 3, 50, 61, 62, 119):
        want = written[fetch // 3]
        result = log.read(fetch, len(want))  # room for exactly one batch
        assert len(result.regions) == 1
        region = result.regions[0]
        assert region.position == positions[fetch // 3]
        assert result.nbytes == region.nbytes == len(want)
        assert region.read() == want
        assert result.fetch_offset == fetch
    log.close()


def test_max_bytes_bounds_whole_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    written = fill(log, 30)
    size = len(written[0])
    assert {len(w) for w in written} == {size}
    for max_bytes, expected in [
        (size, 1),
        (2 * size - 1, 1),
        (2 * size, 2),
        (10 * size + 5, 10),
        (10**6, 29),
    ]:
        result = log.read(3, max_bytes)
        assert result.read_bytes() == b"".join(written[1 : 1 + expected]), max_bytes
        assert result.next_offset == 3 + 3 * expected
    assert log.read(3, size - 1).read_bytes() == written[1]  # min_one_batch: the first batch whole
    empty = log.read(3, size - 1, min_one_batch=False)
    assert (empty.regions, empty.nbytes, empty.next_offset) == ((), 0, 3)
    assert log.read(3, 0).read_bytes() == written[1]
    log.close()


def test_min_one_batch_returns_a_batch_larger_than_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    small = fill(log, 1)
    big = bytearray(batch(1, records=4, value_size=5000))
    log.append(big, leader_epoch=0, now_ms=0)
    tail = fill(log, 1, start_seq=2)
    result = log.read(3, 100)
    assert result.nbytes == len(big) > 20000
    assert result.read_bytes() == bytes(big)
    assert log.read(3, 100, min_one_batch=False).nbytes == 0
    assert log.read(0, 100).read_bytes() == small[0]  # one small batch, not the big one after it
    assert log.read(0, len(small[0]) + len(big)).read_bytes() == small[0] + bytes(big)
    assert log.read(7, 100).read_bytes() == tail[0]
    log.close()


def test_reads_continue_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    written = fill(log, 60)
    segments = log.segments
    assert len(segments) >= 5
    everything = b"".join(written)
    on_disk = b"".join(Path(s.log_path).read_bytes() for s in segments)
    assert on_disk == everything
    result = log.read(0, 10**9)
    assert len(result.regions) == len(segments)
    assert result.read_bytes() == everything
    assert result.next_offset == log.log_end_offset == 180
    # From the middle of the second segment, through the third, stopping inside the fourth.
    second, fourth = segments[1], segments[3]
    fetch = second.base_offset + 4
    first_batch = (fetch // 3) * 3
    start = sum(len(w) for w in written[: first_batch // 3])
    stop_batch = fourth.base_offset // 3 + 2
    want = b"".join(written[first_batch // 3 : stop_batch])
    result = log.read(fetch, len(want) + 10)
    assert [r.nbytes for r in result.regions][-1] == len(
        b"".join(written[fourth.base_offset // 3 : stop_batch])
    )
    assert len(result.regions) == 3
    assert result.regions[0].position == start - sum(len(w) for w in written[: second.base_offset // 3])
    assert result.read_bytes() == want
    assert read_everything(log) == everything
    log.close()


def test_max_offset_excludes_batches_at_or_above_it(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    written = fill(log, 30)
    assert log.read(0, 10**6, max_offset=0).nbytes == 0
    assert log.read(0, 10**6, max_offset=1).read_bytes() == written[0]  # batch 0-2 straddles 1: included
    assert log.read(0, 10**6, max_offset=3).read_bytes() == written[0]
    assert log.read(0, 10**6, max_offset=4).read_bytes() == b"".join(written[:2])
    assert log.read(0, 10**6, max_offset=4).next_offset == 6
    assert log.read(0, 10**6, max_offset=3).next_offset == 3
    assert log.read(9, 10**6, max_offset=9).nbytes == 0
    for max_offset in (30, 31, 45, 88, 90):
        expected = b"".join(written[: -(-max_offset // 3)])
        assert log.read(0, 10**6, max_offset=max_offset).read_bytes() == expected
    log.update_high_watermark(12)
    assert log.high_watermark == 12
    assert log.read(6, 10**6, max_offset=log.high_watermark).read_bytes() == b"".join(written[2:4])
    log.close()


def test_offsets_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 2)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(7, 100)
    assert info.value.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    end = log.read(6, 100)
    assert (end.regions, end.nbytes) == ((), 0)
    log.update_high_watermark(6)
    log.delete_records_before(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert headers(log.read(3, 100).read_bytes())[0].base_offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_roll_before_the_append_that_would_overflow_segment_bytes(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, index_interval_bytes=100)
    log = open_log(tmp_path / "t-0", config)
    written = fill(log, 25)
    size = len(written[0])
    per_segment = 1000 // size
    segments = log.segments
    assert [s.base_offset for s in segments] == [3 * per_segment * i for i in range(len(segments))]
    assert [s.size for s in segments[:-1]] == [per_segment * size] * (len(segments) - 1)
    assert all(s.size <= 1000 for s in segments)
    assert [s.is_active for s in segments] == [False] * (len(segments) - 1) + [True]
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert names[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    # Rolled segments have trimmed indexes; the active one takes entries up to segment.index.bytes, its
    # file never preallocated (entries are written a page at a time, or on flush, roll and close).
    first = segments[0]
    assert first.offset_index.path.stat().st_size == 8 * first.offset_index.entries
    assert first.time_index.path.stat().st_size == 12 * first.time_index.entries
    active_index = log.active_segment.offset_index
    assert active_index.max_entries == config.segment_index_bytes // 8
    assert active_index.path.stat().st_size == 0
    log.flush(0)
    assert active_index.path.stat().st_size == 8 * active_index.entries > 0
    with pytest.raises(RecordBatchTooLargeError) as info:
        log.append(batch(99, value_size=1000), leader_epoch=0, now_ms=0)
    assert info.value.error_code == ErrorCode.RECORD_LIST_TOO_LARGE
    log.close()


def test_roll_on_segment_ms_with_jitter(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000), now_ms=0)
    log.roll(0)  # rolling an empty active segment changes nothing
    assert len(log.segments) == 1
    log.append(batch(0), leader_epoch=0, now_ms=100)
    log.append(batch(1), leader_epoch=0, now_ms=1100)  # exactly segment.ms after the first batch: no roll
    assert len(log.segments) == 1
    log.append(batch(2), leader_epoch=0, now_ms=1101)
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.close()
    jittered = open_log(tmp_path / "j-0", LogConfig(segment_ms=1000, segment_jitter_ms=500), now_ms=0)
    jittered.append(batch(0), leader_epoch=0, now_ms=0)
    now = 1
    while len(jittered.segments) == 1:
        now += 1
        jittered.append(batch(now), leader_epoch=0, now_ms=now)
    assert 500 < now <= 1001
    jittered.close()


def test_roll_on_full_index(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=0, segment_index_bytes=36)  # 4 offset entries, 3 time entries
    log = open_log(tmp_path / "t-0", config)
    fill(log, 12)
    # Each batch after the first gets entries; the time index (3 slots, one kept for the roll) is full after
    # two, so every segment holds three batches; the roll adds no time entry (the largest is indexed).
    assert [s.base_offset for s in log.segments] == [0, 9, 18, 27]
    assert [s.time_index.entries for s in log.segments[:-1]] == [2, 2, 2]
    assert [s.offset_index.entries for s in log.segments[:-1]] == [2, 2, 2]
    log.close()


def test_index_entries_follow_kafkas_interval_rule(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=300))
    written = fill(log, 50)
    expected: list[OffsetPosition] = []
    since = 0
    position = 0
    for i, data in enumerate(written):
        if since > 300:
            expected.append(OffsetPosition(3 * i + 2, position))
            since = 0
        since += len(data)
        position += len(data)
    index = log.active_segment.offset_index
    assert [index.entry(i) for i in range(index.entries)] == expected
    times = log.active_segment.time_index
    assert [times.entry(i) for i in range(times.entries)] == [
        TimestampOffset(1_000_000 + (e.offset // 3) + 2, e.offset) for e in expected
    ]
    log.close()
    reopened = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=300), clean=True)
    index = reopened.active_segment.offset_index
    assert [index.entry(i) for i in range(index.entries)] == expected
    # The close wrote the final time index entry: the segment's largest timestamp.
    assert reopened.active_segment.time_index.last_entry() == TimestampOffset(1_000_051, 149)
    reopened.close()


def test_lookup_by_timestamp_finds_the_exact_record(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    for seq in range(40):  # batch seq: records at 10*seq, 10*seq+1, 10*seq+2
        log.append(batch(seq, timestamp=10 * seq), leader_epoch=0, now_ms=0)
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == OffsetAndTimestamp(0, 0)
    assert log.offset_for_timestamp(1) == OffsetAndTimestamp(1, 1)
    assert log.offset_for_timestamp(3) == OffsetAndTimestamp(3, 10)
    assert log.offset_for_timestamp(212) == OffsetAndTimestamp(65, 212)
    assert log.offset_for_timestamp(213) == OffsetAndTimestamp(66, 220)
    assert log.offset_for_timestamp(392) == OffsetAndTimestamp(119, 392)
    assert log.offset_for_timestamp(393) is None
    assert log.max_timestamp_offset() == OffsetAndTimestamp(119, 392)
    for seq in range(40):
        for i in range(3):
            assert log.offset_for_timestamp(10 * seq + i) == OffsetAndTimestamp(3 * seq + i, 10 * seq + i)
    log.update_high_watermark(120)
    log.delete_records_before(65)
    assert log.offset_for_timestamp(0) == OffsetAndTimestamp(65, 212)
    log.close()


def test_lookup_by_timestamp_in_a_damaged_batch_raises_instead_of_answering_from_garbage(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    for seq in range(6):
        log.append(batch(seq, timestamp=10 * seq), leader_epoch=0, now_ms=0)
    log.close()
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    position, damaged = list(iter_batch_headers(data))[2]
    data[position + RECORD_BATCH_HEADER_SIZE + 1] ^= 0x01  # a record's attributes: only the CRC can tell
    segment.write_bytes(bytes(data))
    reopened = open_log(tmp_path / "t-0", SMALL, clean=True)  # a trusted segment: not revalidated
    assert reopened.offset_for_timestamp(10) == OffsetAndTimestamp(3, 10)
    with pytest.raises(LogCorruptionError) as info:
        reopened.offset_for_timestamp(20)
    assert str(info.value).startswith(f"{segment}: batch at offsets 6..8 is damaged: ")
    assert info.value.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert damaged.base_offset == 6
    assert reopened.offset_for_timestamp(30) == OffsetAndTimestamp(9, 30)
    reopened.close()


def test_timestamp_lookup_with_out_of_order_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    for seq, ts in enumerate([100, 500, 300, 700, 600]):
        log.append(batch(seq, records=1, timestamp=ts), leader_epoch=0, now_ms=0)
    assert log.offset_for_timestamp(200) == OffsetAndTimestamp(1, 500)
    assert log.offset_for_timestamp(650) == OffsetAndTimestamp(3, 700)
    assert log.max_timestamp_offset() == OffsetAndTimestamp(3, 700)
    times = log.active_segment.time_index
    assert [times.entry(i) for i in range(times.entries)] == [
        TimestampOffset(500, 1),
        TimestampOffset(700, 3),
    ]
    log.close()


def test_follower_appends_keep_offsets_and_a_gap_starts_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    log.append(
        encode_batch([SimpleRecord(value=b"a")], base_offset=0, partition_leader_epoch=2),
        leader_epoch=9,
        now_ms=0,
        assign_offsets=False,
    )
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append(
            encode_batch([SimpleRecord(value=b"b")], base_offset=0),
            leader_epoch=9,
            now_ms=0,
            assign_offsets=False,
        )
    log.append(
        encode_batch([SimpleRecord(value=b"c")] * 2, base_offset=10, partition_leader_epoch=2),
        leader_epoch=9,
        now_ms=0,
        assign_offsets=False,
    )
    assert [s.base_offset for s in log.segments] == [0, 10]
    assert log.log_end_offset == 12
    data = log.read(0, 1000).read_bytes()
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers(data)] == [(0, 2), (10, 2)]
    assert log.read(5, 1000).read_bytes() == log.read(10, 1000).read_bytes()
    with pytest.raises(UnexpectedAppendOffsetError, match="whole batches"):
        log.append(encode_batch([SimpleRecord(value=b"d")])[:-1], leader_epoch=0, now_ms=0)
    log.close()


def test_a_first_append_past_the_start_of_an_empty_log_replaces_its_only_segment(tmp_path: Path) -> None:
    # a compacted follower's first fetch can begin past its empty log's end (the leader cleaned the start)
    log = open_log(tmp_path / "t-0", BIG)
    info = log.append(
        encode_batch([SimpleRecord(value=b"a")] * 2, base_offset=5, partition_leader_epoch=1),
        leader_epoch=1,
        now_ms=0,
        assign_offsets=False,
    )
    assert (info.first_offset, info.last_offset) == (5, 6)
    assert [s.base_offset for s in log.segments] == [5]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000000005.log"]
    assert log.log_end_offset == 7
    assert [h.base_offset for h in headers(log.read(5, 1000).read_bytes())] == [5]
    log.close()


def test_timestamp_bounds(tmp_path: Path) -> None:
    config = LogConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10)
    log = open_log(tmp_path / "t-0", config)
    log.append(batch(0, timestamp=5000), leader_epoch=0, now_ms=5500)
    with pytest.raises(InvalidTimestampError, match=r"before\.max\.ms") as info:
        log.append(batch(1, timestamp=3000), leader_epoch=0, now_ms=5500)
    assert info.value.error_code == ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(InvalidTimestampError, match=r"after\.max\.ms"):
        log.append(batch(2, timestamp=5600), leader_epoch=0, now_ms=5500)
    assert log.log_end_offset == 3
    log.close()


def test_flush_messages_flush_ms_and_roll_flush_move_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(flush_messages=5))
    fill(log, 1)
    assert log.recovery_point == 0
    fill(log, 1)  # 6 unflushed >= 5
    assert log.recovery_point == 6
    log.close()
    timed = open_log(tmp_path / "u-0", LogConfig(flush_ms=1000, segment_bytes=500), now_ms=0)
    fill(timed, 1, now_ms=10)
    assert timed.recovery_point == 0
    assert not timed.maybe_flush(999)
    assert timed.maybe_flush(1000)
    assert timed.recovery_point == 3
    assert timed.last_flush_ms == 1000
    fill(timed, 6, now_ms=1001)  # rolls
    assert len(timed.segments) > 1
    assert timed.recovery_point == 3
    assert timed.maybe_flush(1002)  # the rolled segments
    assert timed.recovery_point == timed.active_segment.base_offset
    timed.flush()
    assert timed.recovery_point == timed.log_end_offset == 21
    timed.close()


def test_high_watermark_is_bounded(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    fill(log, 2)
    assert log.update_high_watermark(100) == 6
    assert log.update_high_watermark(-5) == 0
    assert log.update_high_watermark(4) == 4
    log.close()


def test_regions_go_out_with_sendfile(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    written = fill(log, 20)
    result = log.read(4, 10**6)
    assert len(result.regions) > 1
    out_path = tmp_path / "sent"
    with out_path.open("wb") as out:
        for region in result.regions:
            position, remaining = region.position, region.nbytes
            while remaining:
                sent = os.sendfile(out.fileno(), region.file.fileno(), position, remaining)
                position += sent
                remaining -= sent
    assert out_path.read_bytes() == b"".join(written[1:])
    log.close()


def test_a_full_disk_during_a_roll_refuses_the_batch_and_the_log_carries_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roll's producer snapshot meets ENOSPC (the disk filled between the segment files and the
    snapshot): the batch is refused with the OSError, nothing of it is in the log, no temp file is left
    behind, and once there is space the same batch is appended at the offset it would have had."""
    config = LogConfig(segment_bytes=1000, index_interval_bytes=100)
    log = open_log(tmp_path / "t-0", config)
    written = fill(log, 4)
    per_segment = 1000 // len(written[0])
    written += fill(log, per_segment - 4, start_seq=4)  # the active segment is full: the next append rolls
    end = log.log_end_offset
    enospc_on_writes_to(monkeypatch, ".snapshot.tmp")
    with pytest.raises(OSError, match="No space left"):
        log.append(bytearray(batch(100)), leader_epoch=7, now_ms=0)
    assert [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".tmp")] == []
    assert log.log_end_offset == end
    assert read_everything(log) == b"".join(written)
    monkeypatch.undo()
    again = bytearray(batch(100))
    info = log.append(again, leader_epoch=7, now_ms=0)
    assert (info.first_offset, log.log_end_offset) == (end, end + 3)
    assert read_everything(log) == b"".join(written) + bytes(again)
    log.close()
    reopened = open_log(tmp_path / "t-0", config)
    assert read_everything(reopened) == b"".join(written) + bytes(again)
    reopened.close()


def test_an_append_given_its_validated_headers_writes_indexes_and_answers_as_one_parsing_them(
    tmp_path: Path,
) -> None:
    """The produce path hands the log the headers ``validate_batches`` returned (one batch: a shortcut
    without ``positioned``/``end_txn_markers``); the log, its indexes, its tail reads and every field of
    the answer are those of the same appends parsed by the log itself."""
    config = LogConfig(index_interval_bytes=300)
    given = open_log(tmp_path / "given-0", config)
    parsed = open_log(tmp_path / "parsed-0", config)
    for seq in range(40):
        payload = batch(seq, records=1 + seq % 4) if seq % 5 else batch(seq) + batch(seq + 100, records=2)
        one, other = bytearray(payload), bytearray(payload)
        info = given.append(
            one, leader_epoch=2, now_ms=seq, headers=validate_batches(one, max_batch_bytes=10**6)
        )
        expected = parsed.append(other, leader_epoch=2, now_ms=seq)
        assert info == expected
        assert one == other
    assert (
        given.log_end_offset
        == parsed.log_end_offset
        == 40 // 5 * 2 + sum((1 + seq % 4) if seq % 5 else 3 for seq in range(40))
    )
    for log in (given, parsed):
        assert log.active_segment.offset_index.entries > 5
    indexes = [
        (
            [
                log.active_segment.offset_index.entry(i)
                for i in range(log.active_segment.offset_index.entries)
            ],
            [log.active_segment.time_index.entry(i) for i in range(log.active_segment.time_index.entries)],
        )
        for log in (given, parsed)
    ]
    assert indexes[0] == indexes[1]
    for offset in range(given.log_end_offset):  # tail reads come from the recent batches
        assert given.read(offset, 10**6).read_bytes() == parsed.read(offset, 10**6).read_bytes()
    given.close()
    parsed.close()
