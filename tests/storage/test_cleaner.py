"""The log cleaner on a real log: what survives, offsets, batches, indexes, sections and thresholds.

Every case writes a compacted log with small segments and many updates per key, cleans it with
:class:`LogCleaner`, and reads it back from the start through ``PartitionLog.read`` (every batch
CRC-checked). The expected content is computed from what was written: below the cleaned boundary each key's
last record, from it on everything (:func:`compacted`).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.storage.cleaner_support import (
    COMPACT,
    CompactedLog,
    compacted,
    latest_values,
    random_updates,
    read_batches,
    read_records,
    record_at,
    with_config,
)

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import Compression, SimpleRecord, encode_batch
from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.storage.cleaner import CleanerConfig
from tidelog.storage.cleaner_checkpoint import CLEANER_OFFSET_CHECKPOINT_FILE
from tidelog.storage.index import _SparseIndex
from tidelog.storage.log_manager import LogManager
from tidelog.storage.offset_map import SLOT_BYTES

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _no_fsync() -> Iterator[None]:
    """fsync and msync only matter for power loss; these cases model process crashes: skip their cost."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        patch.setattr(_SparseIndex, "flush", lambda self: None)
        yield


TP = TopicPartition("t", 0)


def checkpoint(log: CompactedLog) -> int | None:
    return read_offsets_checkpoint(log.directory / CLEANER_OFFSET_CHECKPOINT_FILE).get(TP)


@pytest.mark.parametrize(
    "codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_cleaning_keeps_each_keys_last_record_at_its_offset(tmp_path: Path, codec: Compression) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(codec), keys=25, records=600, now_ms=NOW, compression=codec)
    log.settle(NOW)
    before = read_records(log.log)
    boundary = log.log.active_segment.base_offset
    segments_before = len(log.log.segments)
    assert log.clean(NOW)

    expected = compacted(log.written, boundary)
    assert read_records(log.log) == expected
    assert latest_values(expected) == latest_values(before)
    assert len(expected) < len(before) / 3
    assert checkpoint(log) == boundary
    for header, _ in read_batches(log.log):
        assert header.compression == codec  # rewritten batches keep their codec
    assert not any(p.name.endswith((".cleaned", ".swap")) for p in log.partition_dir.iterdir())
    # Every surviving offset is found through the indexes.
    for offset, key, value in expected:
        assert record_at(log.log, offset) == (offset, key, value)

    # A second round with more updates merges the now small segments.
    random_updates(log, random.Random(1), keys=25, records=300, now_ms=NOW + 1, compression=codec)
    log.settle(NOW + 1, roll=True)
    assert log.clean(NOW + 1)
    assert read_records(log.log) == compacted(log.written, log.log.active_segment.base_offset)
    # The ~30 small segments the first round left below its boundary are merged into a few.
    assert segments_before >= 20
    assert len([s for s in log.log.segments if s.base_offset < boundary]) <= 3
    log.close()


def test_cleaned_log_reloads_after_clean_and_unclean_shutdown(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(7), keys=10, records=400, now_ms=NOW, compression=Compression.ZSTD)
    log.settle(NOW)
    assert log.clean(NOW)
    expected = read_records(log.log)
    end = log.log.log_end_offset
    log.manager.shutdown(NOW)
    manager = LogManager([tmp_path / "data"], COMPACT, now_ms=NOW)
    reopened = manager.get("t", 0)
    assert reopened is not None
    assert read_records(reopened) == expected
    assert manager.cleaner_checkpoints.get(TP) == checkpoint(log)
    manager.close()  # no shutdown: the next start recovers from the checkpointed recovery point
    manager = LogManager([tmp_path / "data"], COMPACT, now_ms=NOW)
    reopened = manager.get("t", 0)
    assert reopened is not None
    assert read_records(reopened) == expected
    assert reopened.log_end_offset == end
    manager.close()


def test_tombstones_go_after_delete_retention_ms(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    for round_ in range(5):
        log.append([(b"a", b"a%d" % round_), (b"b", b"b%d" % round_), (b"c", b"c%d" % round_)], now_ms=NOW)
    tombstones = log.append([(b"a", None), (b"b", None)], now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    # First cleaning: the tombstones stay, with the delete horizon in their batch header.
    assert read_records(log.log) == [
        (14, b"c", b"c4"),
        (tombstones, b"a", None),
        (tombstones + 1, b"b", None),
    ]
    horizon_batches = [h for h, records in read_batches(log.log) if any(v is None for _, _, v in records)]
    assert [(h.has_delete_horizon, h.base_timestamp) for h in horizon_batches] == [
        (True, NOW + COMPACT.delete_retention_ms)
    ]
    # Nothing is dirty: no cleaning before the horizon, one after it (no new write needed).
    assert not log.clean(NOW + COMPACT.delete_retention_ms - 1)
    assert read_records(log.log)[-2:] == [(tombstones, b"a", None), (tombstones + 1, b"b", None)]
    assert log.clean(NOW + COMPACT.delete_retention_ms)
    assert read_records(log.log) == [(14, b"c", b"c4")]
    assert not log.clean(NOW + 10 * COMPACT.delete_retention_ms)
    log.close()


def test_a_batch_keeping_values_after_its_tombstones_went_is_not_cleaned_again(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    log.append([(b"gone", b"1")], now_ms=NOW)
    log.append([(b"keep", b"2"), (b"gone", None)], now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    assert log.clean(NOW + COMPACT.delete_retention_ms)  # the tombstone goes, "keep" stays in its batch
    assert read_records(log.log) == [(1, b"keep", b"2")]
    # The batch still carries its (past) delete horizon, but holds nothing it would let go.
    assert read_batches(log.log)[0][0].has_delete_horizon
    assert not log.clean(NOW + 2 * COMPACT.delete_retention_ms)
    log.close()


def test_a_key_rewritten_after_its_tombstone_keeps_the_new_value(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    log.append([(b"k", b"1"), (b"k", None)], now_ms=NOW)
    log.append([(b"k", b"2")], now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    assert read_records(log.log) == [(2, b"k", b"2")]
    log.close()


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data", with_config(COMPACT, min_cleanable_dirty_ratio=0.5))
    random_updates(log, random.Random(3), keys=5, records=300, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    # A little new dirt on a clean log: ratio well below 0.5.
    log.append([(b"key-000", b"x")], now_ms=NOW)
    log.settle(NOW, roll=True)
    assert not log.clean(NOW)
    assert 0 < log.cleaner.dirtiest_log_cleanable_ratio < 0.5
    # Enough dirt: above the ratio.
    random_updates(log, random.Random(4), keys=5, records=300, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    assert read_records(log.log) == compacted(log.written, log.log.active_segment.base_offset)
    log.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data", with_config(COMPACT, min_compaction_lag_ms=60_000))
    random_updates(log, random.Random(5), keys=5, records=200, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert not log.clean(NOW + 59_999)
    assert len(read_records(log.log)) == 200
    assert log.clean(NOW + 60_001)
    assert read_records(log.log) == compacted(log.written, log.log.active_segment.base_offset)
    log.close()


def test_max_compaction_lag_forces_a_cleaning_below_the_ratio(tmp_path: Path) -> None:
    config = with_config(COMPACT, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    log = CompactedLog(tmp_path / "data", config)
    random_updates(log, random.Random(6), keys=5, records=300, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)  # everything dirty: ratio 1.0
    log.append([(b"key-001", b"late")], now_ms=NOW + 1000)
    log.settle(NOW + 1000, roll=True)
    assert not log.clean(NOW + 1000)
    assert not log.clean(NOW + 61_000)  # not yet max.compaction.lag.ms after the dirty batch
    assert log.clean(NOW + 61_001)
    assert checkpoint(log) == log.log.active_segment.base_offset
    log.close()


def test_only_inactive_segments_below_the_high_watermark_are_cleaned_and_flushed_first(
    tmp_path: Path,
) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(8), keys=5, records=300, now_ms=NOW)
    assert not log.clean(NOW)  # nothing committed: high watermark 0
    log.log.update_high_watermark(log.log.log_end_offset)
    assert log.log.recovery_point == 0
    active = log.log.active_segment
    active_bytes = active.log_path.read_bytes()
    assert log.clean(NOW)
    # The replaced segments were fsynced before the swap: the cleaned ones lie below the recovery point.
    assert log.log.recovery_point == active.base_offset == checkpoint(log)
    assert log.log.active_segment is active
    assert active.log_path.read_bytes() == active_bytes
    log.close()


def test_a_full_offset_map_cleans_in_several_rounds(tmp_path: Path) -> None:
    # 10 slots, 90% usable: 9 keys a round, 40 keys in the log.
    log = CompactedLog(tmp_path / "data", cleaner_config=CleanerConfig(dedupe_buffer_size=10 * SLOT_BYTES))
    random_updates(log, random.Random(9), keys=40, records=300, now_ms=NOW)
    log.settle(NOW, roll=True)
    boundary = log.log.active_segment.base_offset
    latest = latest_values(log.written)
    checkpoints = []
    while log.clean(NOW):
        checkpoints.append(checkpoint(log))
        records = read_records(log.log)
        assert latest_values(records) == latest
        assert set(records) <= set(log.written)
    assert len(checkpoints) > 3
    assert checkpoints == sorted(checkpoints)
    assert checkpoints[-1] == boundary
    assert read_records(log.log) == compacted(log.written, boundary)
    log.close()


def test_records_without_key_are_dropped(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data", with_config(COMPACT, cleanup_policy="delete"))
    log.append([(None, b"no key"), (b"k", b"1")], now_ms=NOW)
    log.append([(b"k", b"2"), (None, b"no key either")], now_ms=NOW)
    log.log.update_config(COMPACT)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    assert read_records(log.log) == [(2, b"k", b"2")]
    log.close()


def test_compact_and_delete_retention_and_cleaning_together(tmp_path: Path) -> None:
    config = with_config(COMPACT, cleanup_policy="compact,delete", retention_ms=10_000)
    log = CompactedLog(tmp_path / "data", config)
    random_updates(log, random.Random(10), keys=5, records=200, now_ms=NOW)
    log.settle(NOW, roll=True)
    random_updates(log, random.Random(11), keys=5, records=200, now_ms=NOW + 20_000)
    log.settle(NOW + 20_000, roll=True)
    assert log.log.delete_retention(NOW + 20_000) > 0
    start = log.log.log_start_offset
    assert log.clean(NOW + 20_000)
    survivors = [w for w in log.written if w[0] >= start]
    assert read_records(log.log) == compacted(survivors, log.log.active_segment.base_offset)
    log.close()


def test_batch_fields_survive_a_rewrite(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    headers = ((("h1", b"v"), ("h2", None)),)
    first = bytearray(
        encode_batch(
            [
                SimpleRecord(key=b"x", value=b"old", timestamp=NOW, headers=headers[0]),
                SimpleRecord(key=b"y", value=b"keep", timestamp=NOW + 5, headers=headers[0]),
                SimpleRecord(key=b"x", value=b"old2", timestamp=NOW + 9),
            ],
            compression=Compression.LZ4,
            producer_id=7,
            producer_epoch=3,
            base_sequence=0,
        )
    )
    log.log.append(first, leader_epoch=4, now_ms=NOW)
    log.append([(b"x", b"new")], now_ms=NOW + 10)
    log.settle(NOW + 10, roll=True)
    original = read_batches(log.log)[0][0]
    assert log.clean(NOW + 10)
    header, records = read_batches(log.log)[0]
    assert records == [(1, b"y", b"keep")]
    assert (header.base_offset, header.last_offset, header.records_count) == (0, 2, 1)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 0)
    assert header.partition_leader_epoch == original.partition_leader_epoch == 4
    assert header.compression == Compression.LZ4
    assert header.max_timestamp == NOW + 5
    log.close()


def test_deleting_the_partition_forgets_its_checkpoint(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(12), keys=5, records=200, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    assert checkpoint(log) is not None
    log.manager.delete("t", 0)
    assert checkpoint(log) is None
    recreated = log.manager.create("t", 0)
    assert log.manager.cleaner_checkpoints.get(TP) is None
    assert recreated.log_end_offset == 0
    log.close()


def test_checkpoint_beyond_the_log_end_resets_to_the_start(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(13), keys=5, records=200, now_ms=NOW)
    log.settle(NOW, roll=True)
    log.manager.cleaner_checkpoints.update(log.directory, TP, 10**9)
    assert log.clean(NOW)
    assert read_records(log.log) == compacted(log.written, log.log.active_segment.base_offset)
    log.close()
