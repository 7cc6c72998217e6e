"""The cleaner's parts on their own: offset map, segment grouping, transaction verdicts, failure handling."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.storage.cleaner_support import COMPACT, CompactedLog, random_updates, read_records, with_config

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import ControlRecordType, RecordBatchHeader
from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.storage.cleaner_checkpoint import CLEANER_OFFSET_CHECKPOINT_FILE, CleanerCheckpoints
from tidelog.storage.cleaner_job import SourceSegment, group_segments_by_size
from tidelog.storage.cleaner_transactions import AbortedRange, CleanedTransactionMetadata, TransactionScanner
from tidelog.storage.errors import LogCorruptionError
from tidelog.storage.offset_map import SLOT_BYTES, OffsetMap

NOW = 1_700_000_000_000


def test_offset_map_capacity_follows_kafkas_accounting() -> None:
    offset_map = OffsetMap(SLOT_BYTES * 100)  # 100 slots, 90 usable
    assert (offset_map.slots, offset_map.max_entries) == (100, 90)
    for i in range(90):
        offset_map.put(b"k%d" % i, i)
    assert offset_map.room_for(0)
    assert not offset_map.room_for(1)
    offset_map.put(b"k5", 500)  # an existing key takes no new slot
    assert (len(offset_map), offset_map.get(b"k5"), offset_map.get(b"absent")) == (90, 500, -1)
    assert offset_map.utilization == 0.9
    offset_map.update_latest_offset(7)
    offset_map.update_latest_offset(3)
    assert offset_map.latest_offset == 7
    offset_map.clear()
    assert (len(offset_map), offset_map.latest_offset) == (0, -1)
    assert OffsetMap(0).max_entries == 1


def source(base: int, size: int, index_bytes: int = 8) -> SourceSegment:
    return SourceSegment(base, base + 10, size, index_bytes, index_bytes, 0, str(base), -1)


def test_offset_map_stays_within_its_memory() -> None:
    import tracemalloc

    offset_map = OffsetMap(SLOT_BYTES * 50_000)
    tracemalloc.start()
    try:
        for i in range(offset_map.max_entries):
            offset_map.put(b"key-%d" % i, 2**40 + i)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert used <= SLOT_BYTES * 50_000


def test_grouping_by_log_and_index_size_and_offset_range() -> None:
    sources = [source(0, 400), source(10, 400), source(20, 400), source(30, 900), source(40, 0)]
    assert group_segments_by_size(sources, 1024, 4096, 50) == [[0, 1], [2], [3, 4]]
    assert group_segments_by_size(sources, 10_000, 16, 50) == [[0, 1], [2, 3], [4]]
    huge = [source(0, 10), source(2**31 - 5, 10), source(2**31 + 20, 10)]
    assert group_segments_by_size(huge, 1024, 4096, 2**31 + 40) == [[0], [1, 2]]


def header(
    base: int, *, pid: int = 1, txn: bool = True, control: bool = False, count: int = 1
) -> RecordBatchHeader:
    attributes = (0x10 if txn else 0) | (0x20 if control else 0)
    return RecordBatchHeader(base, 100, 0, 2, 0, attributes, count - 1, 0, 0, pid, 0, 0, count)


def test_scanner_finds_aborted_and_open_transactions() -> None:
    scanner = TransactionScanner()
    scanner.on_batch(header(0, pid=1))
    scanner.on_batch(header(1, pid=2))
    scanner.on_batch(header(2, pid=1))
    scanner.on_batch(header(3, pid=1, control=True), ControlRecordType.ABORT)
    scanner.on_batch(header(4, pid=3, txn=False))
    scanner.on_batch(header(5, pid=2, control=True), ControlRecordType.COMMIT)
    scanner.on_batch(header(6, pid=4))
    scanner.on_batch(header(7, pid=4, control=True), 99)  # not a transaction marker: the txn stays open
    assert scanner.aborted == [AbortedRange(1, 0, 3)]
    assert scanner.first_open_offset == 6


def test_scanner_decides_transactions_open_at_its_end_below_the_stable_offset() -> None:
    scanner = TransactionScanner()
    scanner.on_batch(header(0, pid=1))  # aborted: its marker at 40 is in a later segment's .txnindex
    scanner.on_batch(header(1, pid=2))  # committed: no .txnindex entry of its own
    scanner.on_batch(header(2, pid=3))
    scanner.on_batch(header(3, pid=4))  # at the stable offset: still open
    past_scan = [AbortedRange(2, 30, 35), AbortedRange(3, 0, 1), AbortedRange(1, 0, 40)]
    scanner.decide_open(3, past_scan)
    assert scanner.aborted == [AbortedRange(1, 0, 40)]
    assert scanner.first_open_offset == 3


def test_transaction_metadata_follows_kafkas_marker_rules() -> None:
    meta = CleanedTransactionMetadata()
    meta.add_aborted_transactions([AbortedRange(1, 0, 2), AbortedRange(3, 10, 11)])
    assert meta.on_batch_read(header(0, pid=1))  # aborted: discard
    assert not meta.on_batch_read(header(1, pid=2))  # committed transaction
    assert not meta.on_control_batch_read(header(2, pid=1, control=True), ControlRecordType.ABORT)
    assert meta.retained_aborted == [AbortedRange(1, 0, 2)]
    assert not meta.on_control_batch_read(header(3, pid=2, control=True), ControlRecordType.COMMIT)
    # No batch of these transactions was read: their markers may go.
    assert meta.on_control_batch_read(header(4, pid=2, control=True), ControlRecordType.COMMIT)
    assert meta.on_control_batch_read(header(11, pid=3, control=True), ControlRecordType.ABORT)
    assert meta.on_control_batch_read(header(12, pid=3, control=True), None)  # already emptied
    assert not meta.on_control_batch_read(header(13, pid=5, control=True), 99)
    assert not meta.on_batch_read(header(14, pid=6, txn=False))


def test_a_damaged_batch_makes_the_log_uncleanable_and_nothing_changes(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(1), keys=5, records=100, now_ms=NOW)
    log.settle(NOW, roll=True)
    before = read_records(log.log)
    first = log.log.segments[0].log_path
    data = bytearray(first.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError):
        log.clean(NOW)
    assert log.cleaner.uncleanable_partitions == {TopicPartition("t", 0)}
    assert not log.clean(NOW)
    assert not [p for p in log.partition_dir.iterdir() if ".cleaned" in p.name]
    assert first.read_bytes() == bytes(data)  # untouched, damage included
    assert read_records(log.log, log.log.segments[1].base_offset) == [
        r for r in before if r[0] >= log.log.segments[1].base_offset
    ]
    log.close()


def test_logs_without_compact_are_left_alone(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data", with_config(COMPACT, cleanup_policy="delete"))
    random_updates(log, random.Random(2), keys=5, records=200, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert not log.clean(NOW)
    assert len(read_records(log.log)) == 200
    log.close()


def test_cleaner_checkpoints_per_log_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    a, b = TopicPartition("x", 0), TopicPartition("y", 1)
    checkpoints = CleanerCheckpoints(dirs)
    checkpoints.update(dirs[0], a, 10)
    checkpoints.update(dirs[1], b, 20)
    checkpoints.update(dirs[0], TopicPartition("gone", 0), 5)
    checkpoints.update(dirs[0], a, 11, live=lambda tp: tp != TopicPartition("gone", 0))
    assert read_offsets_checkpoint(dirs[0] / CLEANER_OFFSET_CHECKPOINT_FILE) == {a: 11}
    reloaded = CleanerCheckpoints(dirs)
    assert (reloaded.get(a), reloaded.get(b), reloaded.get(TopicPartition("z", 0))) == (11, 20, None)
    reloaded.truncate(b, 25)
    reloaded.truncate(b, 15)
    reloaded.remove(a)
    assert read_offsets_checkpoint(dirs[0] / CLEANER_OFFSET_CHECKPOINT_FILE) == {}
    assert read_offsets_checkpoint(dirs[1] / CLEANER_OFFSET_CHECKPOINT_FILE) == {b: 15}
    (dirs[1] / CLEANER_OFFSET_CHECKPOINT_FILE).write_text("garbage\n")
    assert CleanerCheckpoints(dirs).get(b) is None  # unreadable: everything is cleaned from its start
