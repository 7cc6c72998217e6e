"""The periodic flush in three steps: plan (owner), execute (any thread), complete (owner).

Each test records which inodes the plan fsyncs (``os.fsync`` wrapped) and checks exact recovery points
after each step: nothing moves before completion, a deleted or replaced file is never confused with the
one that was planned, and a truncation, close or failed fsync in between records nothing.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, open_log

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import ControlRecordType, SimpleRecord, encode_batch
from tidelog.storage import layout
from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.storage.errors import KafkaStorageError
from tidelog.storage.flush_plan import FlushPlan, FlushState
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex

TIMED = dataclasses.replace(SMALL, flush_ms=1000)
"""Rolls every few batches, flushes everything once 1 s passed, deletes files at once."""


def fill(log: PartitionLog, count: int, *, start: int = 0, now_ms: int = 0) -> None:
    for seq in range(start, start + count):
        log.append(batch(seq), leader_epoch=0, now_ms=now_ms)
    log.update_high_watermark(log.log_end_offset)


def inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def segment_files(log: PartitionLog, base_offset: int) -> list[Path]:
    """A segment's files in the order a flush fsyncs them (log, offset index, time index)."""
    return [
        layout.log_file(log.dir, base_offset),
        layout.offset_index_file(log.dir, base_offset),
        layout.time_index_file(log.dir, base_offset),
    ]


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (device, inode) of every fsync from now on, in order."""
    seen: list[tuple[int, int]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        st = os.fstat(fd)
        seen.append((st.st_dev, st.st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def executed(plan: FlushPlan | None) -> FlushPlan:
    assert plan is not None
    with plan:
        plan.execute()
    return plan


def test_recovery_point_and_checkpoint_move_only_on_complete(
    tmp_path: Path, fsynced: list[tuple[int, int]]
) -> None:
    manager = LogManager([tmp_path / "d"], SMALL, now_ms=0)
    log = manager.create("t", 0)
    fill(log, 20)
    rolled = [segment.base_offset for segment in log.segments[:-1]]
    assert len(rolled) >= 2
    target = log.active_segment.base_offset
    expected = [inode(path) for base in rolled for path in segment_files(log, base)] + [inode(log.dir)]
    checkpoint = tmp_path / "d" / layout.RECOVERY_POINT_CHECKPOINT_FILE

    plan = log.plan_flush(1)
    assert plan is not None
    assert plan.target_offset == target
    assert log.recovery_point == 0
    fsynced.clear()  # the producer snapshots written at each roll
    with plan:
        plan.execute()
    assert fsynced == expected
    # a kill -9 now: the checkpoint written meanwhile still has the old recovery point
    assert log.recovery_point == 0
    manager.checkpoint_recovery_points()
    assert read_offsets_checkpoint(checkpoint) == {TopicPartition("t", 0): 0}

    assert log.complete_flush(plan)
    assert log.recovery_point == target
    manager.checkpoint_recovery_points()
    assert read_offsets_checkpoint(checkpoint) == {TopicPartition("t", 0): target}
    assert log.plan_flush(2) is None  # the roll flush is done; flush.ms is never
    manager.shutdown()


def test_files_deleted_and_renamed_between_plan_and_execute_are_harmless(
    tmp_path: Path, fsynced: list[tuple[int, int]]
) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 20)
    rolled = [segment.base_offset for segment in log.segments[:-1]]
    target = log.active_segment.base_offset
    planned = [inode(path) for base in rolled for path in segment_files(log, base)]
    plan = log.plan_flush(1)
    assert plan is not None
    # DeleteRecords removes every planned segment (file.delete.delay.ms=0: unlinked at once) ...
    assert log.delete_records_before(target, now_ms=1) == target
    assert [segment.base_offset for segment in log.segments] == [target]
    assert not any(path.exists() for base in rolled for path in segment_files(log, base))
    # ... and new files take their names: the plan still fsyncs the planned ones
    decoys = []
    for base in rolled:
        for path in segment_files(log, base):
            path.write_bytes(b"decoy")
            decoys.append(inode(path))
    fsynced.clear()
    with plan:
        plan.execute()
    assert fsynced[: len(planned)] == planned
    assert fsynced[len(planned) :] == [inode(log.dir)]
    assert not set(decoys) & set(fsynced)
    assert log.complete_flush(plan)
    assert log.recovery_point == target
    log.close()


def test_appends_and_rolls_after_the_plan_stay_unflushed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 20)
    target = log.active_segment.base_offset
    plan = log.plan_flush(1)
    assert plan is not None
    fill(log, 20, start=20)  # more rolls
    next_roll = log.active_segment.base_offset
    assert next_roll > target
    executed(plan)
    assert log.complete_flush(plan)
    assert log.recovery_point == target
    later = executed(log.plan_flush(2))  # the rolls after the plan are still due, their new files too
    assert (later.target_offset, later.dir_descriptor is not None) == (next_roll, True)
    assert log.complete_flush(later)
    assert log.recovery_point == next_roll
    log.close()


def test_flush_ms_plan_covers_the_log_end_and_restarts_the_clock(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", TIMED)
    fill(log, 2, now_ms=10)
    assert log.plan_flush(999) is None
    plan = executed(log.plan_flush(1000))
    assert (plan.target_offset, plan.flush_time_ms) == (6, 1000)
    assert (log.recovery_point, log.last_flush_ms) == (0, 0)
    assert log.complete_flush(plan)
    assert (log.recovery_point, log.last_flush_ms) == (6, 1000)
    assert log.plan_flush(1999) is None
    fill(log, 1, start=2, now_ms=2500)  # flush.ms passed, but that is the periodic flush's (as in Kafka)
    assert log.recovery_point == 6
    assert executed(log.plan_flush(2500)).target_offset == 9
    log.close()


def _truncate_to_3(log: PartitionLog) -> None:
    assert log.truncate_to(3, now_ms=1)


def _start_over_at_0(log: PartitionLog) -> None:
    log.truncate_fully_and_start_at(0, now_ms=1)


@pytest.mark.parametrize("truncate", [_truncate_to_3, _start_over_at_0])
def test_truncation_between_plan_and_complete_records_nothing(
    tmp_path: Path, truncate: Callable[[PartitionLog], None]
) -> None:
    log = open_log(tmp_path / "t-0", TIMED)
    fill(log, 20)
    plan = log.plan_flush(1000)
    assert plan is not None
    assert plan.target_offset == log.log_end_offset == 60
    truncate(log)
    fill(log, 30, start=100, now_ms=1)  # offsets below 60 again, written after the plan
    assert log.log_end_offset > 60
    unflushed = log.recovery_point
    assert unflushed <= 3
    executed(plan)
    assert not log.complete_flush(plan)
    assert log.recovery_point == unflushed
    assert log.last_flush_ms == 0
    again = executed(log.plan_flush(1001))  # still due: the whole log this time
    assert again.target_offset == log.log_end_offset
    assert log.complete_flush(again)
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_closed_log_drops_the_completion(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 20)
    plan = log.plan_flush(1)
    assert plan is not None
    log.close()
    executed(plan)
    assert not log.complete_flush(plan)
    assert log.recovery_point == 0


def test_failed_fsync_records_nothing_and_stays_due(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    fill(log, 20)
    target = log.active_segment.base_offset
    plan = log.plan_flush(1)
    assert plan is not None

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing)
        with plan, pytest.raises(KafkaStorageError, match="fsync of t-0 failed"):
            plan.execute()
    assert not plan.executed
    with pytest.raises(ValueError, match="did not execute"):
        log.complete_flush(plan)
    assert log.recovery_point == 0
    retry = log.plan_flush(2)
    assert retry is not None
    assert (retry.target_offset, retry.dir_descriptor is not None) == (target, True)
    with retry:
        retry.execute()
    with pytest.raises(ValueError, match="closed"):
        retry.execute()
    assert log.complete_flush(retry)
    assert log.recovery_point == target
    other = open_log(tmp_path / "u-0", SMALL)
    with pytest.raises(ValueError, match="completed on u-0"):
        other.complete_flush(retry)
    other.close()
    log.close()


def test_transaction_index_writes_after_the_plan_stay_unsynced(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", dataclasses.replace(TIMED, segment_bytes=1 << 20))

    def aborted_transaction(pid: int) -> None:
        records = [SimpleRecord(key=b"k", value=b"v", timestamp=1_000_000)]
        data = encode_batch(
            records, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        log.append(data, leader_epoch=0, now_ms=0)
        log.append_control_marker(
            ControlRecordType.ABORT,
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=0,
            leader_epoch=0,
            now_ms=0,
        )

    aborted_transaction(4000)
    plan = log.plan_flush(1000)
    assert plan is not None
    txn_index = log.active_segment.txn_index
    assert [(index, writes) for index, writes in plan.txn_writes] == [(txn_index, 1)]
    assert len(plan.descriptors) == 4  # log, offset index, time index, txn index
    aborted_transaction(4001)  # a second entry, after the plan
    executed(plan)
    assert log.complete_flush(plan)
    again = executed(log.plan_flush(2000))
    assert [(index, writes) for index, writes in again.txn_writes] == [(txn_index, 2)]
    assert log.complete_flush(again)
    log.append(batch(0), leader_epoch=0, now_ms=3000)
    assert executed(log.plan_flush(3000)).txn_writes == ()
    log.close()


def test_transaction_index_counts_writes_until_marked_synced(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    assert index.open_for_fsync() is None
    index.append(AbortedTxn(1, 0, 5, 6))
    first = index.open_for_fsync()
    assert first is not None
    os.close(first[0])
    index.append(AbortedTxn(2, 7, 9, 10))
    index.mark_synced(first[1])
    second = index.open_for_fsync()
    assert second is not None
    os.close(second[0])
    assert (first[1], second[1]) == (1, 2)
    index.mark_synced(second[1])
    index.mark_synced(first[1])  # a late, older completion changes nothing
    assert index.open_for_fsync() is None
    index.append(AbortedTxn(3, 11, 12, 13))
    index.truncate_to(0)  # the file goes: nothing left to sync
    assert not index.path.exists()
    assert index.open_for_fsync() is None


def test_flush_state_says_what_is_due_and_moves_only_with_fsyncs_and_truncations() -> None:
    config = dataclasses.replace(SMALL, flush_ms=1000, flush_messages=50)
    state = FlushState(recovery_point=10, now_ms=0)
    assert state.due(now_ms=999, log_end_offset=59, config=config) is None
    assert state.due(now_ms=999, log_end_offset=60, config=config) == (60, 999)  # flush.messages
    assert state.due(now_ms=1000, log_end_offset=11, config=config) == (11, 1000)  # flush.ms
    state.rolled(30)
    assert state.due(now_ms=1, log_end_offset=40, config=config) == (30, None)  # the rolled segments
    state.record(25, None)
    assert (state.recovery_point, state.roll_flush_offset) == (25, 30)  # the roll is still due
    state.record(30, None)
    assert (state.recovery_point, state.roll_flush_offset, state.last_flush_ms) == (30, None, 0)
    state.record(20, 500)  # an older plan completing late lowers nothing
    assert (state.recovery_point, state.last_flush_ms) == (30, 500)
    state.files_changed()
    generation = state.dir_generation
    state.files_changed()
    state.dir_fsynced(generation)
    assert state.dir_dirty
    state.dir_fsynced()
    assert not state.dir_dirty
    state.rolled(40)
    state.truncated(35)
    assert (state.recovery_point, state.roll_flush_offset, state.truncations) == (30, None, 1)
    state.truncated(12)
    assert state.recovery_point == 12
    state.started_over(100)
    assert (state.recovery_point, state.truncations) == (100, 3)
