"""What a replicated partition needs of its log: follower appends, leader epochs
(``leader-epoch-checkpoint``), truncation after a leader change (producer state, ``.txnindex``, epochs,
high watermark), and the high watermark a follower checkpoints. Real files throughout; restarts clean and
crashed.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from pathlib import Path

import pytest

from tidelog.protocol import TopicPartition
from tidelog.protocol.records import (
    ControlRecordType,
    CorruptRecordError,
    SimpleRecord,
    encode_batch,
    encode_control_batch,
)
from tidelog.storage import layout
from tidelog.storage.checkpoint import read_leader_epoch_checkpoint, write_offsets_checkpoint
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import RecordBatchTooLargeError, UnexpectedAppendOffsetError
from tidelog.storage.leader_epoch_cache import EpochEndOffset, EpochEntry
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.producer_state import InvalidTxnStateError, OutOfOrderSequenceError
from tidelog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTransaction, AbortedTxn

from .helpers import SMALL, batch, open_log

TS = 1_000_000
P1, P2 = 7001, 7002
COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT
BIG = dataclasses.replace(SMALL, segment_bytes=1 << 20)
"""One segment for everything (tests about offsets, not segments)."""
EPOCH_FILE = layout.LEADER_EPOCH_CHECKPOINT_FILE


# ---- helpers --------------------------------------------------------------------------------------


def data_batch(
    *,
    records: int = 2,
    pid: int = -1,
    seq: int = -1,
    producer_epoch: int = -1,
    transactional: bool = False,
    value: bytes = b"v",
) -> bytes:
    return encode_batch(
        [SimpleRecord(key=b"k%d" % i, value=value * 10, timestamp=TS) for i in range(records)],
        producer_id=pid,
        producer_epoch=producer_epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def txn_batch(pid: int, seq: int, *, records: int = 2, value: bytes = b"t") -> bytes:
    return data_batch(records=records, pid=pid, seq=seq, producer_epoch=0, transactional=True, value=value)


def lead(log: PartitionLog, data: bytes, epoch: int) -> tuple[int, int]:
    """Append as leader in ``epoch``; everything is committed at once (one replica in sync)."""
    info = log.append(data, leader_epoch=epoch, now_ms=TS)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset, info.last_offset


def marker(
    log: PartitionLog, kind: ControlRecordType, pid: int, epoch: int, *, coordinator_epoch: int = 0
) -> int:
    info = log.append_control_marker(
        kind,
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=coordinator_epoch,
        leader_epoch=epoch,
        now_ms=TS,
    )
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def fetch(leader: PartitionLog, follower: PartitionLog, *, max_bytes: int = 1 << 20) -> int:
    """One fetch of the follower from the leader (at the follower's log end); returns the bytes appended."""
    data = leader.read(follower.log_end_offset, max_bytes).read_bytes()
    if data:
        follower.append_as_follower(data, now_ms=TS)
    follower.update_high_watermark(min(leader.high_watermark, follower.log_end_offset))
    return len(data)


def catch_up(leader: PartitionLog, follower: PartitionLog, *, max_bytes: int = 1 << 20) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        assert fetch(leader, follower, max_bytes=max_bytes) > 0


def everything(log: PartitionLog) -> bytes:
    return log.read(log.log_start_offset, 1 << 30).read_bytes()


def index_files(log: PartitionLog) -> dict[int, list[AbortedTxn]]:
    """The ``.txnindex`` files on disk, decoded from their bytes."""
    out: dict[int, list[AbortedTxn]] = {}
    for path in sorted(log.dir.glob("*" + layout.TXN_INDEX_FILE_SUFFIX)):
        data = path.read_bytes()
        entries = []
        for pos in range(0, len(data), ABORTED_TXN_SIZE):
            _, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
            entries.append(AbortedTxn(pid, first, last, lso))
        base = layout.offset_from_file_name(path.name)
        assert base is not None
        out[base] = entries
    return out


def producer_view(log: PartitionLog) -> dict[int, tuple[int, int, int, int, int]]:
    """Each producer's (epoch, last sequence, last offset, coordinator epoch, open transaction's first
    offset)."""
    return {
        pid: (
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for pid, e in log.producer_state.producers.items()
    }


def epoch_file(log: PartitionLog) -> list[tuple[int, int]] | None:
    return read_leader_epoch_checkpoint(log.dir / EPOCH_FILE)


def reopen(
    log: PartitionLog, *, clean: bool, recovery_point: int = 0, config: LogConfig | None = None
) -> PartitionLog:
    """Close ``log`` (flushed and snapshotted when ``clean``, as a clean shutdown) and open its dir again."""
    start = log.log_start_offset
    hw = log.high_watermark
    if clean:
        log.flush()
        log.take_producer_snapshot()
    log.close()
    return PartitionLog.open(
        log.dir,
        config if config is not None else log.config,
        now_ms=TS,
        clean_shutdown=clean,
        recovery_point=recovery_point,
        log_start_offset=start,
        high_watermark=hw,
    )


def build_leader(log: PartitionLog) -> None:
    """Plain batches over leader epochs 0, 2 and 5, an idempotent producer, a committed and an aborted
    transaction, and one left open."""
    lead(log, batch(0), 0)
    lead(log, data_batch(pid=P2, seq=0, producer_epoch=0), 0)
    lead(log, txn_batch(P1, 0), 2)
    lead(log, batch(1), 2)
    marker(log, COMMIT, P1, 2)
    lead(log, data_batch(pid=P2, seq=2, producer_epoch=0), 2)
    lead(log, txn_batch(P1, 2), 5)
    marker(log, ABORT, P1, 5)
    lead(log, txn_batch(P1, 4), 5)  # open


# ---- follower appends -----------------------------------------------------------------------------


@pytest.mark.parametrize("max_bytes", [1, 300, 1 << 20])
def test_a_follower_copies_the_leaders_log_and_state(tmp_path: Path, max_bytes: int) -> None:
    leader = open_log(tmp_path / "leader-0", SMALL)
    build_leader(leader)
    follower = open_log(tmp_path / "follower-0", SMALL)
    catch_up(leader, follower, max_bytes=max_bytes)
    assert everything(follower) == everything(leader)
    assert follower.leader_epoch_entries == leader.leader_epoch_entries == ((0, 0), (2, 5), (5, 13))
    assert epoch_file(follower) == epoch_file(leader) == [(0, 0), (2, 5), (5, 13)]
    assert producer_view(follower) == producer_view(leader)
    assert (
        follower.producer_state.ongoing_transactions == leader.producer_state.ongoing_transactions == {P1: 16}
    )
    assert index_files(follower) == index_files(leader) == {0: [AbortedTxn(P1, 13, 15, 16)]}
    assert (follower.high_watermark, follower.last_stable_offset) == (18, 16)
    assert follower.collect_aborted_transactions(0, 18) == [AbortedTransaction(P1, 13)]
    for log in (follower, leader):
        log.close()


def test_follower_appends_start_at_the_log_end(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "t-0", BIG)
    follower.append_as_follower(
        encode_batch([SimpleRecord(value=b"a")] * 3, partition_leader_epoch=1), now_ms=TS
    )
    for base in (2, 4):  # below the log end (3), and above it: nothing of the batch is written
        late = encode_batch([SimpleRecord(value=b"b")] * 2, base_offset=base, partition_leader_epoch=4)
        with pytest.raises(
            UnexpectedAppendOffsetError, match=f"starts at offset {base}, the log ends at 3"
        ) as info:
            follower.append_as_follower(late, now_ms=TS)
        assert (info.value.first_offset, info.value.last_offset, info.value.log_end_offset) == (
            base,
            base + 1,
            3,
        )
    assert (follower.log_end_offset, follower.leader_epoch_entries) == (3, ((1, 0),))
    assert epoch_file(follower) == [(1, 0)]
    # offsets going backwards inside one append
    backwards = encode_batch([SimpleRecord(value=b"c")], base_offset=3) + encode_batch(
        [SimpleRecord(value=b"d")], base_offset=3
    )
    with pytest.raises(UnexpectedAppendOffsetError, match="below the expected 4"):
        follower.append_as_follower(backwards, now_ms=TS)
    with pytest.raises(UnexpectedAppendOffsetError, match="whole batches"):
        follower.append_as_follower(encode_batch([SimpleRecord(value=b"e")], base_offset=3)[:-1], now_ms=TS)
    assert follower.log_end_offset == 3
    follower.close()


def test_a_compacted_follower_takes_the_gap_a_cleaned_leader_leaves(tmp_path: Path) -> None:
    config = dataclasses.replace(BIG, cleanup_policy="compact")
    follower = open_log(tmp_path / "t-0", config)
    follower.append_as_follower(
        encode_batch([SimpleRecord(key=b"a", value=b"1")], partition_leader_epoch=0), now_ms=TS
    )
    later = encode_batch([SimpleRecord(key=b"b", value=b"2")], base_offset=7, partition_leader_epoch=0)
    assert follower.append_as_follower(later, now_ms=TS).first_offset == 7
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(
            encode_batch([SimpleRecord(key=b"c", value=b"3")], base_offset=5), now_ms=TS
        )
    assert follower.log_end_offset == 8
    reopened = reopen(follower, clean=False)  # recovery accepts the gap of a compacted log
    assert reopened.log_end_offset == 8
    reopened.close()


def test_follower_batches_are_checked_whole_before_anything_is_written(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "t-0", dataclasses.replace(BIG, segment_bytes=200))
    good = encode_batch([SimpleRecord(value=b"x" * 20)] * 2, partition_leader_epoch=3)
    damaged = bytearray(good)
    damaged[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        follower.append_as_follower(bytes(damaged), now_ms=TS)
    with pytest.raises(RecordBatchTooLargeError, match=r"exceeds segment\.bytes=200"):
        follower.append_as_follower(
            good + encode_batch([SimpleRecord(value=b"y" * 90)] * 2, base_offset=2), now_ms=TS
        )
    assert (follower.log_end_offset, follower.leader_epoch_entries, epoch_file(follower)) == (0, (), [])
    follower.append_as_follower(good, now_ms=TS)
    assert follower.leader_epoch_entries == ((3, 0),)
    follower.close()


def test_a_follower_starting_inside_the_leaders_first_batch(tmp_path: Path) -> None:
    # The leader's log start offset (DeleteRecords) fell inside a batch: the follower starts its empty log
    # there and is sent the whole batch. Kafka's answer: start the log at the batch instead, and append again.
    follower = open_log(tmp_path / "t-0", BIG)
    follower.truncate_fully_and_start_at(5)
    first = encode_batch([SimpleRecord(value=b"a")] * 4, base_offset=3, partition_leader_epoch=2)
    with pytest.raises(UnexpectedAppendOffsetError) as info:
        follower.append_as_follower(first, now_ms=TS)
    error = info.value
    assert error.first_offset is not None
    assert error.last_offset is not None
    assert error.log_end_offset == follower.log_start_offset == 5
    assert error.first_offset < 5 <= error.last_offset
    follower.truncate_fully_and_start_at(error.first_offset)
    assert follower.append_as_follower(first, now_ms=TS).last_offset == 6
    assert (follower.log_start_offset, follower.log_end_offset, follower.leader_epoch_entries) == (
        3,
        7,
        ((2, 3),),
    )
    follower.close()


def test_a_follower_refuses_a_plain_batch_inside_an_open_transaction(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "t-0", BIG)
    follower.append_as_follower(
        encode_batch(
            [SimpleRecord(value=b"t")],
            producer_id=P1,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        ),
        now_ms=TS,
    )
    plain = encode_batch(
        [SimpleRecord(value=b"p")], base_offset=1, producer_id=P1, producer_epoch=0, base_sequence=1
    )
    with pytest.raises(InvalidTxnStateError):
        follower.append_as_follower(plain, now_ms=TS)
    assert follower.log_end_offset == 1
    follower.close()


def test_replicated_markers_from_an_older_coordinator_or_producer_epoch_are_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    follower = open_log(tmp_path / "t-0", BIG)
    follower.append_as_follower(
        encode_batch(
            [SimpleRecord(value=b"t")],
            producer_id=P1,
            producer_epoch=3,
            base_sequence=0,
            is_transactional=True,
        ),
        now_ms=TS,
    )
    follower.append_as_follower(
        encode_control_batch(
            COMMIT, producer_id=P1, producer_epoch=3, coordinator_epoch=9, base_offset=1, timestamp_ms=TS
        ),
        now_ms=TS,
    )
    with caplog.at_level(logging.INFO, logger="tidelog.storage.producer_state"):
        follower.append_as_follower(
            encode_control_batch(
                ABORT, producer_id=P1, producer_epoch=2, coordinator_epoch=4, base_offset=2, timestamp_ms=TS
            ),
            now_ms=TS,
        )
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert producer_view(follower)[P1] == (2, -1, -1, 4, -1)
    assert follower.log_end_offset == 3
    follower.close()


def test_a_promoted_follower_keeps_idempotence_and_transactions(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader-0", BIG)
    lead(leader, data_batch(pid=P2, seq=0, producer_epoch=0), 0)  # 0-1
    lead(leader, data_batch(pid=P2, seq=2, producer_epoch=0), 0)  # 2-3
    lead(leader, txn_batch(P1, 0), 0)  # 4-5, open
    follower = open_log(tmp_path / "follower-0", BIG)
    catch_up(leader, follower)
    leader.close()
    # the follower becomes leader in epoch 1
    follower.maybe_assign_epoch_start_offset(1, follower.log_end_offset)
    assert follower.leader_epoch_entries == ((0, 0), (1, 6))
    assert follower.end_offset_for_epoch(0) == (0, 6)
    retry = follower.append(data_batch(pid=P2, seq=2, producer_epoch=0), leader_epoch=1, now_ms=TS)
    assert (retry.duplicate, retry.first_offset, retry.last_offset) == (True, 2, 3)
    with pytest.raises(OutOfOrderSequenceError):
        follower.append(data_batch(pid=P2, seq=9, producer_epoch=0), leader_epoch=1, now_ms=TS)
    with pytest.raises(InvalidTxnStateError):
        follower.append(data_batch(pid=P1, seq=2, producer_epoch=0), leader_epoch=1, now_ms=TS)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 4
    assert marker(follower, COMMIT, P1, 1) == 6
    assert (follower.last_stable_offset, follower.leader_epoch_entries) == (7, ((0, 0), (1, 6)))
    follower.close()


# ---- leader epochs --------------------------------------------------------------------------------


def test_epochs_follow_appends_and_answer_offset_for_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    assert (log.latest_epoch, log.leader_epoch_entries, epoch_file(log)) == (None, (), [])
    assert log.end_offset_for_epoch(0) == EpochEndOffset(-1, -1)
    for epoch in (0, 0, 3, 3, 3, 7):
        lead(log, batch(epoch), epoch)  # 3 records each
    assert log.leader_epoch_entries == (EpochEntry(0, 0), EpochEntry(3, 6), EpochEntry(7, 15))
    assert (log.dir / EPOCH_FILE).read_text() == "0\n3\n0 0\n3 6\n7 15\n"
    assert log.latest_epoch == 7
    assert [log.end_offset_for_epoch(e) for e in (-1, 0, 1, 3, 5, 7, 8)] == [
        (-1, -1),
        (0, 6),
        (0, 6),
        (3, 15),
        (3, 15),
        (7, 18),
        (-1, -1),
    ]
    assert [log.epoch_for_offset(o) for o in (0, 5, 6, 14, 15, 17)] == [0, 0, 3, 3, 7, 7]
    log.close()


def test_epochs_go_with_truncation_at_and_beyond_the_log_end(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    for epoch in (0, 2, 2, 4):
        lead(log, batch(epoch), epoch)
    assert log.leader_epoch_entries == ((0, 0), (2, 3), (4, 9))
    assert log.truncate_to(7)  # inside the batch 6-8: it goes whole
    assert (log.log_end_offset, log.leader_epoch_entries, epoch_file(log)) == (
        6,
        ((0, 0), (2, 3)),
        [(0, 0), (2, 3)],
    )
    # a leader that began epoch 5 without writing, truncated at its log end by the next leader (Kafka)
    log.maybe_assign_epoch_start_offset(5, 6)
    assert epoch_file(log) == [(0, 0), (2, 3), (5, 6)]
    assert not log.truncate_to(6)
    assert (log.leader_epoch_entries, epoch_file(log)) == (((0, 0), (2, 3)), [(0, 0), (2, 3)])
    assert log.truncate_to(3)
    assert log.leader_epoch_entries == ((0, 0),)
    assert log.truncate_to(2)  # the batch 0-2 goes whole: no epoch is left
    assert (log.log_end_offset, log.leader_epoch_entries, epoch_file(log)) == (0, (), [])
    log.truncate_fully_and_start_at(40)
    assert (log.leader_epoch_entries, epoch_file(log)) == ((), [])
    log.close()


def test_the_log_start_offset_moves_the_first_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", dataclasses.replace(SMALL, retention_bytes=1))
    for epoch in (0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2):
        lead(log, batch(epoch), epoch)
    assert log.leader_epoch_entries == ((0, 0), (1, 9), (2, 30))
    log.delete_records_before(4)
    assert (log.log_start_offset, log.leader_epoch_entries) == (4, ((0, 4), (1, 9), (2, 30)))
    assert epoch_file(log) == [(0, 4), (1, 9), (2, 30)]
    log.delete_retention(TS)  # retention.bytes=1: every segment but the active one
    start = log.log_start_offset
    assert start == log.active_segment.base_offset > 9
    assert log.leader_epoch_entries == (((1, start), (2, 30)) if start < 30 else ((2, start),))
    assert epoch_file(log) == [tuple(e) for e in log.leader_epoch_entries]
    log.close()


# ---- loading the leader epoch checkpoint ----------------------------------------------------------


def test_a_missing_or_damaged_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    for epoch in (1, 1, 4, 4, 6):
        lead(log, batch(epoch), epoch)
    log.delete_records_before(2)
    expected = ((1, 2), (4, 6), (6, 12))
    assert log.leader_epoch_entries == expected
    (log.dir / EPOCH_FILE).unlink()  # a log written before tidelog kept the file
    log = reopen(log, clean=True)
    assert (log.leader_epoch_entries, epoch_file(log)) == (expected, [tuple(e) for e in expected])
    (log.dir / EPOCH_FILE).write_text("0\n2\n4 6\n1 2\n")  # damaged: epochs go down
    with caplog.at_level(logging.WARNING, logger="tidelog.storage.recovery"):
        log = reopen(log, clean=True)
    warning = (
        f"leader epoch checkpoint {log.dir / EPOCH_FILE}: leader epoch entry "
        "EpochEntry(epoch=1, start_offset=2) does not follow EpochEntry(epoch=4, start_offset=6); "
        "rebuilding leader-epoch-checkpoint from the log's batches"
    )
    assert [r.getMessage() for r in caplog.records] == [warning]
    assert (log.leader_epoch_entries, epoch_file(log)) == (expected, [tuple(e) for e in expected])
    log.close()


def test_a_torn_temp_file_of_the_checkpoint_is_ignored_and_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)
    lead(log, batch(0), 3)
    lead(log, batch(1), 8)
    torn = log.dir / (EPOCH_FILE + layout.TMP_FILE_SUFFIX)
    log.close()
    torn.write_text("0\n3\n3 0\n8 3\n9")  # the process died while writing the next one
    reopened = open_log(tmp_path / "t-0", SMALL, clean=False)
    assert reopened.leader_epoch_entries == ((3, 0), (8, 3))
    assert not torn.exists()
    reopened.close()


def test_a_checkpoint_naming_offsets_beyond_the_log_after_a_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    lead(log, batch(0), 0)  # 0-2
    lead(log, batch(1), 0)  # 3-5
    lead(log, batch(2), 4)  # 6-8 in epoch 4, then a crash tears it
    assert epoch_file(log) == [(0, 0), (4, 6)]  # written before the batch
    segment = log.active_segment.log_path
    log.close()
    with segment.open("r+b") as handle:
        handle.truncate(segment.stat().st_size - 5)
    # and the file names an epoch far beyond the log (a truncation's write lost in the crash)
    (log.dir / EPOCH_FILE).write_text("0\n3\n0 0\n4 6\n9 900\n")
    reopened = open_log(tmp_path / "t-0", BIG, clean=False)
    assert reopened.log_end_offset == 6
    assert (reopened.leader_epoch_entries, epoch_file(reopened)) == (((0, 0),), [(0, 0)])
    assert reopened.end_offset_for_epoch(0) == (0, 6)
    lead(reopened, batch(3), 5)
    assert reopened.leader_epoch_entries == ((0, 0), (5, 6))
    reopened.close()


def test_recovery_adds_the_epochs_of_revalidated_batches_the_file_lacks(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    lead(log, batch(0), 0)
    lead(log, batch(1), 2)
    log.close()
    (log.dir / EPOCH_FILE).write_text("0\n1\n0 0\n")  # a stale copy
    reopened = open_log(tmp_path / "t-0", BIG, clean=False)  # revalidates from offset 0
    assert reopened.leader_epoch_entries == ((0, 0), (2, 3))
    reopened.close()


# ---- the high watermark ---------------------------------------------------------------------------


def test_a_followers_lagging_high_watermark_is_checkpointed_and_loaded(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], SMALL, now_ms=TS)
    log = manager.create("t", 0)
    for seq in range(5):
        log.append_as_follower(encode_batch([SimpleRecord(value=b"%d" % seq)], base_offset=seq), now_ms=TS)
    assert log.update_high_watermark(3) == 3  # the leader's high watermark lags this follower's log end
    manager.shutdown(TS)
    again = LogManager([tmp_path], SMALL, now_ms=TS)
    reloaded = again.get("t", 0)
    assert reloaded is not None
    assert (reloaded.high_watermark, reloaded.log_end_offset) == (3, 5)
    again.shutdown(TS)


def test_a_high_watermark_checkpoint_beyond_the_recovered_log_is_capped(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], BIG, now_ms=TS)
    log = manager.create("t", 0)
    for seq in range(4):
        lead(log, batch(seq), 0)  # 0-11
    segment = log.active_segment.log_path
    manager.checkpoint_high_watermarks()
    manager.close()  # killed: no clean shutdown
    with segment.open("r+b") as handle:
        handle.truncate(segment.stat().st_size - 10)  # the last batch torn
    write_offsets_checkpoint(
        tmp_path / layout.REPLICATION_OFFSET_CHECKPOINT_FILE, {TopicPartition("t", 0): 12}
    )
    again = LogManager([tmp_path], BIG, now_ms=TS)
    reloaded = again.get("t", 0)
    assert reloaded is not None
    assert (reloaded.log_end_offset, reloaded.high_watermark) == (9, 9)
    again.close()


def test_a_leaders_high_watermark_only_rises(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    log.append(batch(0), leader_epoch=0, now_ms=TS)
    assert log.maybe_increment_high_watermark(2)
    assert not log.maybe_increment_high_watermark(1)
    assert log.high_watermark == 2
    assert log.maybe_increment_high_watermark(3)
    with pytest.raises(ValueError, match="above the log end offset 3"):
        log.maybe_increment_high_watermark(4)
    log.close()


# ---- truncation after a leader change -------------------------------------------------------------


def diverged_pair(tmp_path: Path) -> tuple[PartitionLog, PartitionLog, PartitionLog]:
    """Leader A wrote in epoch 0; follower F copied all of it; B copied the first batches, then became leader
    in epoch 1 and wrote something else. Returns (A, F, B)."""
    a = open_log(tmp_path / "a-0", BIG)
    lead(a, batch(0), 0)  # 0-2
    lead(a, txn_batch(P1, 0), 0)  # 3-4
    marker(a, ABORT, P1, 0)  # 5: aborted, indexed
    lead(a, txn_batch(P2, 0), 0)  # 6-7, open
    lead(a, batch(1), 0)  # 8-10
    f = open_log(tmp_path / "f-0", BIG)
    catch_up(a, f)
    b = open_log(tmp_path / "b-0", BIG)
    b.append_as_follower(a.read(0, 1 << 20, max_offset=3).read_bytes(), now_ms=TS)  # batch 0-2 only
    b.maybe_assign_epoch_start_offset(1, b.log_end_offset)
    lead(b, txn_batch(P1, 0, value=b"B"), 1)  # 3-4
    marker(b, COMMIT, P1, 1)  # 5
    lead(b, batch(7), 1)  # 6-8
    return a, f, b


def test_a_diverged_follower_truncates_by_leader_epoch_and_follows_the_new_leader(tmp_path: Path) -> None:
    a, f, b = diverged_pair(tmp_path)
    assert index_files(f) == {0: [AbortedTxn(P1, 3, 5, 6)]}
    assert f.producer_state.ongoing_transactions == {P2: 6}
    assert (f.high_watermark, f.last_stable_offset) == (11, 6)
    # KIP-101: the follower asks the new leader where its latest epoch ends
    answer = b.end_offset_for_epoch(f.latest_epoch or 0)
    assert answer == (0, 3)
    state = f.offset_truncation_state(answer, fetch_offset=f.high_watermark)
    assert state == (3, True)
    assert f.truncate_to(state.offset)
    # below the aborted transaction's marker and the open transaction: both gone with their batches
    assert (f.log_end_offset, f.high_watermark, f.last_stable_offset) == (3, 3, 3)
    assert index_files(f) == {}
    assert f.producer_state.ongoing_transactions == {}
    assert f.collect_aborted_transactions(0, 3) == []
    assert (f.leader_epoch_entries, epoch_file(f)) == (((0, 0),), [(0, 0)])
    catch_up(b, f)
    assert everything(f) == everything(b)
    assert (f.leader_epoch_entries, producer_view(f)) == (b.leader_epoch_entries, producer_view(b))
    assert (index_files(f), f.last_stable_offset) == ({}, 9)
    for clean in (True, False):
        f = reopen(f, clean=clean)
        assert everything(f) == everything(b)
        assert (f.leader_epoch_entries, producer_view(f), index_files(f)) == (
            b.leader_epoch_entries,
            producer_view(b),
            {},
        )
        assert (f.high_watermark, f.last_stable_offset) == (9, 9)
    for log in (a, f, b):
        log.close()


def test_truncation_below_a_commit_marker_reopens_the_transaction_until_the_abort_comes(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    lead(log, batch(0), 0)  # 0-2
    lead(log, txn_batch(P1, 0), 0)  # 3-4
    commit = marker(log, COMMIT, P1, 0)  # 5
    lead(log, batch(1), 0)  # 6-8
    assert log.truncate_to(commit)
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (5, 5, 3)
    assert log.producer_state.ongoing_transactions == {P1: 3}
    # the new leader's log has an ABORT there
    log.append_as_follower(
        encode_control_batch(
            ABORT,
            producer_id=P1,
            producer_epoch=0,
            coordinator_epoch=0,
            base_offset=5,
            timestamp_ms=TS,
            partition_leader_epoch=1,
        ),
        now_ms=TS,
    )
    log.update_high_watermark(6)
    assert index_files(log) == {0: [AbortedTxn(P1, 3, 5, 6)]}
    assert (log.last_stable_offset, log.leader_epoch_entries) == (6, ((0, 0), (1, 5)))
    log = reopen(log, clean=False)
    assert index_files(log) == {0: [AbortedTxn(P1, 3, 5, 6)]}
    assert log.collect_aborted_transactions(0, 6) == [AbortedTransaction(P1, 3)]
    log.close()


def test_truncation_below_an_aborted_transactions_entry_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", SMALL)  # 1 KiB segments
    lead(log, txn_batch(P1, 0, records=8, value=b"x" * 10), 0)
    while len(log.segments) < 3:
        lead(log, batch(len(log.segments)), 0)
    abort = marker(log, ABORT, P1, 0)
    lead(log, batch(9), 0)
    marker_segment = log.segments[-1].base_offset
    assert index_files(log) == {marker_segment: [AbortedTxn(P1, 0, abort, abort + 1)]}
    snapshots = log.producer_state.snapshot_offsets()
    assert log.truncate_to(abort)
    assert index_files(log) == {}
    assert log.producer_state.ongoing_transactions == {P1: 0}
    assert log.producer_state.snapshot_offsets() == [o for o in snapshots if o <= abort]
    assert (log.high_watermark, log.last_stable_offset) == (abort, 0)
    # re-appended: this time the transaction commits
    log.append_as_follower(
        encode_control_batch(
            COMMIT,
            producer_id=P1,
            producer_epoch=0,
            coordinator_epoch=0,
            base_offset=abort,
            timestamp_ms=TS,
            partition_leader_epoch=2,
        ),
        now_ms=TS,
    )
    log.update_high_watermark(log.log_end_offset)
    assert (index_files(log), log.last_stable_offset) == ({}, abort + 1)
    for clean in (False, True):
        log = reopen(log, clean=clean)
        assert (index_files(log), log.producer_state.ongoing_transactions) == ({}, {})
        assert log.collect_aborted_transactions(0, log.log_end_offset) == []
        assert log.leader_epoch_entries == ((0, 0), (2, abort))
    log.close()
