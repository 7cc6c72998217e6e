"""Idempotent-producer state: sequence/epoch rules, duplicates, wraparound, snapshots, rebuild, expiry."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import (
    ControlRecordType,
    RecordBatchHeader,
    SimpleRecord,
    encode_batch,
    encode_control_batch,
    iter_batch_headers,
    read_batch_header,
)
from tidelog.storage.config import LogConfig
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_file,
)
from tidelog.storage.producer_state import (
    AppendOrigin,
    AppendStatus,
    CompletedTxn,
    EndTxnMarker,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    in_sequence,
)

from .helpers import SMALL, batch, open_log

INT32_MAX = 2**31 - 1
ABORT = ControlRecordType.ABORT
PID = 1000
TS = 1_000_000


def idem_batch(seq: int, *, records: int = 2, pid: int = PID, epoch: int = 0, ts: int = TS) -> bytes:
    return encode_batch(
        [SimpleRecord(key=b"k%d" % i, value=b"v" * 10, timestamp=ts) for i in range(records)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def hdr(seq: int, *, records: int = 2, pid: int = PID, epoch: int = 0, ts: int = TS) -> RecordBatchHeader:
    return read_batch_header(idem_batch(seq, records=records, pid=pid, epoch=epoch, ts=ts))


def build(tmp_path: Path, history: list[tuple[int, int, int]]) -> ProducerStateManager:
    """A manager that has committed ``history`` = [(epoch, base_seq, records)] back to back from offset 0."""
    manager = ProducerStateManager(tmp_path)
    offset = 0
    for epoch, seq, records in history:
        info = manager.prepare([hdr(seq, records=records, epoch=epoch)])
        assert info.status is AppendStatus.OK, info
        manager.commit(info, offset)
        offset += records
    return manager


SIX = [(0, 2 * i, 2) for i in range(6)]  # seqs 0-1, 2-3, ... 10-11 at offsets 0-1, 2-3, ... 10-11

CASES = [
    # (name, history, candidate (epoch, seq, records), status, duplicate first offset)
    ("first batch at 0", [], (0, 0, 2), AppendStatus.OK, None),
    ("unknown producer at any sequence (KIP-360)", [], (3, 17, 2), AppendStatus.OK, None),
    ("in order", [(0, 0, 3)], (0, 3, 2), AppendStatus.OK, None),
    ("gap", [(0, 0, 3)], (0, 4, 2), AppendStatus.OUT_OF_ORDER_SEQUENCE, None),
    ("sequence from the past not retained", SIX, (0, 0, 2), AppendStatus.OUT_OF_ORDER_SEQUENCE, None),
    ("duplicate of 5th newest", SIX, (0, 2, 2), AppendStatus.DUPLICATE, 2),
    ("duplicate of 4th newest", SIX, (0, 4, 2), AppendStatus.DUPLICATE, 4),
    ("duplicate of 3rd newest", SIX, (0, 6, 2), AppendStatus.DUPLICATE, 6),
    ("duplicate of 2nd newest", SIX, (0, 8, 2), AppendStatus.DUPLICATE, 8),
    ("duplicate of newest", SIX, (0, 10, 2), AppendStatus.DUPLICATE, 10),
    ("same first sequence, other length", SIX, (0, 10, 3), AppendStatus.OUT_OF_ORDER_SEQUENCE, None),
    ("stale epoch", [(1, 0, 2)], (0, 2, 2), AppendStatus.INVALID_PRODUCER_EPOCH, None),
    ("stale epoch even as a would-be duplicate", [(0, 0, 2), (1, 0, 2)], (0, 0, 2),
     AppendStatus.INVALID_PRODUCER_EPOCH, None),
    ("epoch bump starts at 0", [(0, 0, 2)], (1, 0, 2), AppendStatus.OK, None),
    ("epoch bump not at 0", [(0, 0, 2)], (1, 2, 2), AppendStatus.OUT_OF_ORDER_SEQUENCE, None),
    ("old epoch's batches are no duplicates after a bump", [(0, 0, 2), (1, 0, 2)], (1, 0, 2),
     AppendStatus.DUPLICATE, 2),
    ("wraparound: 0 follows INT32_MAX", [(0, INT32_MAX - 1, 2)], (0, 0, 2), AppendStatus.OK, None),
    ("wraparound: duplicate before the wrap", [(0, INT32_MAX - 1, 2)], (0, INT32_MAX - 1, 2),
     AppendStatus.DUPLICATE, 0),
    ("wraparound: a batch spanning the wrap", [(0, INT32_MAX - 1, 4)], (0, 2, 1), AppendStatus.OK, None),
    ("wraparound: duplicate spanning the wrap", [(0, INT32_MAX - 1, 4)], (0, INT32_MAX - 1, 4),
     AppendStatus.DUPLICATE, 0),
    ("wraparound: INT32_MAX+1 is not a sequence", [(0, INT32_MAX - 1, 2)], (0, 1, 2),
     AppendStatus.OUT_OF_ORDER_SEQUENCE, None),
]  # fmt: skip


@pytest.mark.parametrize(("history", "candidate", "status", "dup_offset"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_prepare_rules(
    tmp_path: Path,
    history: list[tuple[int, int, int]],
    candidate: tuple[int, int, int],
    status: AppendStatus,
    dup_offset: int | None,
) -> None:
    manager = build(tmp_path, history)
    before = {pid: (e.producer_epoch, list(e.batches)) for pid, e in manager.producers.items()}
    epoch, seq, records = candidate
    info = manager.prepare([hdr(seq, records=records, epoch=epoch)])
    assert info.status is status, info.message
    assert (
        info.error_code
        == {
            AppendStatus.OK: ErrorCode.NONE,
            AppendStatus.DUPLICATE: ErrorCode.NONE,
            AppendStatus.OUT_OF_ORDER_SEQUENCE: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            AppendStatus.INVALID_PRODUCER_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
        }[status]
    )
    if dup_offset is None:
        assert info.duplicate is None
    else:
        assert info.duplicate is not None
        assert (info.duplicate.first_offset, info.duplicate.last_offset) == (
            dup_offset,
            dup_offset + records - 1,
        )
        assert (info.duplicate.first_sequence, info.duplicate.last_sequence) == (
            seq,
            hdr(seq, records=records).last_sequence,
        )
    # prepare never changes the state
    assert {pid: (e.producer_epoch, list(e.batches)) for pid, e in manager.producers.items()} == before


def test_in_sequence_wraps() -> None:
    assert in_sequence(-1, 0)
    assert in_sequence(4, 5)
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 6)
    assert not in_sequence(4, 4)
    assert not in_sequence(INT32_MAX, 1)


def test_commit_keeps_last_five_and_assigns_offsets(tmp_path: Path) -> None:
    manager = build(tmp_path, [(0, 2 * i, 2) for i in range(7)])
    entry = manager.producers[PID]
    assert [(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset) for b in entry.batches] == [
        (2 * i, 2 * i + 1, 2 * i, 2 * i + 1) for i in range(2, 7)
    ]
    assert manager.map_end_offset == 14
    info = manager.prepare([hdr(0, epoch=1)])
    manager.commit(info, 14)
    assert manager.producers[PID].producer_epoch == 1
    assert [(b.first_sequence, b.first_offset) for b in manager.producers[PID].batches] == [(0, 14)]


def test_several_batches_in_one_append_are_checked_in_order(tmp_path: Path) -> None:
    manager = build(tmp_path, [(0, 0, 2)])
    ok = manager.prepare([hdr(2, records=3), hdr(5, records=1), hdr(0, pid=7)])
    assert ok.status is AppendStatus.OK
    manager.commit(ok, 2)
    assert [(b.first_offset, b.last_offset) for b in manager.producers[PID].batches] == [
        (0, 1),
        (2, 4),
        (5, 5),
    ]
    assert manager.producers[7].batches[0].first_offset == 6
    gap = manager.prepare([hdr(6), hdr(9)])
    assert gap.status is AppendStatus.OUT_OF_ORDER_SEQUENCE
    with pytest.raises(ValueError, match="OUT_OF_ORDER"):
        manager.commit(gap, 7)


def test_batches_without_producer_id_are_not_tracked(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    info = manager.prepare([read_batch_header(batch(1))])
    assert info.status is AppendStatus.OK
    assert info.pending == ()
    manager.commit(info, 0)
    assert dict(manager.producers) == {}


def test_expiry_by_last_batch_timestamp(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    for pid, ts in ((1, 5000), (2, 5500)):
        info = manager.prepare([hdr(0, pid=pid, ts=ts)])
        manager.commit(info, 0)
    assert manager.remove_expired_producers(5999) == 0
    assert manager.remove_expired_producers(6000) == 1
    assert sorted(manager.producers) == [2]
    assert manager.remove_expired_producers(6000, expiration_ms=100) == 1
    assert dict(manager.producers) == {}
    # an expired producer is unknown again: any sequence is accepted
    assert manager.prepare([hdr(40, pid=1)]).status is AppendStatus.OK


# ---- snapshot format -------------------------------------------------------------------------------


def test_snapshot_round_trip_and_kafka_layout() -> None:
    entries = [SnapshotEntry(5, 2, 41, 1000, 3, 1234, -1, -1), SnapshotEntry(9, 0, -1, -1, 0, -1)]
    data = encode_snapshot(entries)
    assert len(data) == 2 + 4 + 4 + 2 * 46
    assert data[:2] == b"\x00\x01"
    assert decode_snapshot(data) == entries


@pytest.mark.parametrize("damage", ["flip", "truncate", "version", "extra"])
def test_corrupt_snapshot_is_refused(damage: str) -> None:
    data = bytearray(encode_snapshot([SnapshotEntry(5, 2, 41, 1000, 3, 1234)]))
    if damage == "flip":
        data[20] ^= 1
    elif damage == "truncate":
        del data[-1]
    elif damage == "version":
        data[1] = 9
    else:
        data += b"\x00"
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


# ---- in the partition log --------------------------------------------------------------------------


def state(log: PartitionLog) -> dict[int, tuple[int, list[tuple[int, int, int, int]]]]:
    return {
        pid: (
            e.producer_epoch,
            [(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset) for b in e.batches],
        )
        for pid, e in log.producer_state.producers.items()
    }


def test_duplicate_append_writes_nothing_and_returns_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(0), leader_epoch=0, now_ms=TS)
    first = log.append(idem_batch(0), leader_epoch=0, now_ms=TS)
    log.append(idem_batch(2), leader_epoch=0, now_ms=TS)
    end, size = log.log_end_offset, log.size_in_bytes
    again = log.append(idem_batch(0), leader_epoch=0, now_ms=TS)
    assert again.duplicate
    assert not first.duplicate
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (3, 4)
    assert (log.log_end_offset, log.size_in_bytes) == (end, size)
    with pytest.raises(OutOfOrderSequenceError) as gap:
        log.append(idem_batch(7), leader_epoch=0, now_ms=TS)
    assert gap.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append(idem_batch(0, epoch=1), leader_epoch=0, now_ms=TS)
    with pytest.raises(InvalidProducerEpochError) as stale:
        log.append(idem_batch(4, epoch=0), leader_epoch=0, now_ms=TS)
    assert stale.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == end + 2
    log.close()


def test_log_append_time_duplicate_answers_the_original_append_time(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, message_timestamp_type="LogAppendTime")
    log = open_log(tmp_path / "t-0", config)
    first = log.append(idem_batch(0), leader_epoch=0, now_ms=TS + 5)
    again = log.append(idem_batch(0), leader_epoch=0, now_ms=TS + 9)
    assert again.duplicate
    assert (
        (again.first_offset, again.log_append_time)
        == (0, first.log_append_time)
        == (
            0,
            TS + 5,
        )
    )
    log.close()


def fill_idempotent(log: PartitionLog, count: int, *, pid: int = PID, start_seq: int = 0) -> None:
    for i in range(count):
        log.append(idem_batch(start_seq + 2 * i, pid=pid), leader_epoch=0, now_ms=TS)


def test_snapshot_at_roll_and_clean_shutdown_then_reload(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    fill_idempotent(log, 30)
    fill_idempotent(log, 5, pid=7)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert log.producer_state.snapshot_offsets() == bases[1:]  # one per roll, at the new segment's base
    expected = state(log)
    end = log.log_end_offset
    log.flush()
    log.take_producer_snapshot()
    log.close()
    assert snapshot_file(directory, end).exists()
    reopened = open_log(directory, clean=True, recovery_point=end, now_ms=TS)
    # the snapshot keeps only each producer's last batch (Kafka's format)
    assert state(reopened) == {pid: (epoch, batches[-1:]) for pid, (epoch, batches) in expected.items()}
    assert reopened.append(idem_batch(58), leader_epoch=0, now_ms=TS).duplicate
    assert not reopened.append(idem_batch(60), leader_epoch=0, now_ms=TS).duplicate
    reopened.close()


def test_rebuild_after_crash_replays_headers_from_the_latest_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = dataclasses.replace(SMALL, segment_bytes=2048)
    log = open_log(directory, config)
    fill_idempotent(log, 40)  # PID's batch i holds offsets and sequences 2i, 2i+1
    snapshot = log.producer_state.snapshot_offsets()[-1]
    assert snapshot == log.active_segment.base_offset
    cut_offset = log.log_end_offset - 4  # lose the last two batches (a torn tail)
    assert cut_offset - snapshot >= 8
    active = log.active_segment
    log.close()
    # the crash: no clean-shutdown snapshot; the tail of the last segment is gone, garbage after it
    data = active.log_path.read_bytes()
    position = next(pos for pos, h in iter_batch_headers(data) if h.base_offset == cut_offset)
    with open(active.log_path, "r+b") as f:
        f.truncate(position + 7)
    reopened = open_log(directory, config, clean=False, now_ms=TS)
    assert reopened.log_end_offset == cut_offset
    # the snapshot's last batch, then every batch replayed from the log after the snapshot
    last_five = [(o, o + 1, o, o + 1) for o in range(cut_offset - 10, cut_offset, 2)]
    assert state(reopened) == {PID: (0, last_five)}
    assert reopened.append(idem_batch(cut_offset - 10), leader_epoch=0, now_ms=TS).duplicate
    # the lost batch is not a duplicate: its retry is accepted at the log end
    info = reopened.append(idem_batch(cut_offset), leader_epoch=0, now_ms=TS)
    assert not info.duplicate
    assert info.first_offset == cut_offset
    reopened.close()


def test_corrupt_latest_snapshot_falls_back_to_an_older_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    fill_idempotent(log, 30)
    expected = state(log)
    latest = log.producer_state.snapshot_offsets()[-1]
    log.close()
    path = snapshot_file(directory, latest)
    path.write_bytes(path.read_bytes()[:-3])
    with caplog.at_level(logging.WARNING, logger="tidelog.storage.producer_state"):
        # recovery from the last segment on, which keeps its snapshot: the damaged file is read, and refused
        reopened = open_log(directory, clean=False, now_ms=TS, recovery_point=latest)
    (record,) = caplog.records
    assert record.getMessage().startswith(f"t-0: deleting {path.name}, an unreadable producer snapshot (")
    assert record.getMessage().endswith("); the state comes from an older snapshot or the log")
    assert latest not in reopened.producer_state.snapshot_offsets()
    assert state(reopened) == expected
    reopened.close()


def test_truncation_reloads_state_and_removes_later_snapshots(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill_idempotent(log, 30)
    bases = [s.base_offset for s in log.segments]
    target = bases[2] + 2
    log.truncate_to(target)
    assert log.producer_state.snapshot_offsets() == [b for b in bases[1:] if b <= target]
    assert state(log)[PID][1][-1][3] == target - 1
    next_seq = state(log)[PID][1][-1][1] + 1
    assert log.append(idem_batch(next_seq), leader_epoch=0, now_ms=TS).first_offset == target
    log.truncate_fully_and_start_at(500)
    assert log.producer_state.snapshot_offsets() == []
    assert dict(log.producer_state.producers) == {}
    log.close()


def test_snapshots_are_deleted_with_their_segments(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_bytes=2048)
    log = open_log(tmp_path / "t-0", config)
    fill_idempotent(log, 40)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention(now_ms=TS) > 0
    first = log.segments[0].base_offset
    assert min(log.producer_state.snapshot_offsets()) >= first
    # the producer's state survives retention (Kafka 3.x): its next batch is still checked
    last = state(log)[PID][1][-1][1]
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem_batch(last + 3), leader_epoch=0, now_ms=TS)
    log.close()


def test_expiry_through_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig())
    log.append(idem_batch(0, ts=TS), leader_epoch=0, now_ms=TS)
    assert log.remove_expired_producers(TS + 10, 10) == 1
    assert dict(log.producer_state.producers) == {}
    log.close()


def test_a_reload_drops_only_producers_idle_longer_than_the_configured_expiry(tmp_path: Path) -> None:
    """producer.id.expiration.ms reaches the load of a snapshot: a producer idle for two days survives a
    reload with a week's expiry and is dropped with Kafka's default of a day."""
    directory = tmp_path / "t-0"
    log = open_log(directory, LogConfig())
    log.append(idem_batch(0, ts=TS), leader_epoch=0, now_ms=TS)
    end = log.log_end_offset
    log.flush()
    log.take_producer_snapshot()
    log.close()
    two_days_later, week = TS + 2 * 86_400_000, 7 * 86_400_000
    kept = open_log(
        directory,
        LogConfig(),
        clean=True,
        recovery_point=end,
        now_ms=two_days_later,
        producer_id_expiration_ms=week,
    )
    assert kept.producer_state.producer_id_expiration_ms == week
    assert state(kept) == {PID: (0, [(0, 1, 0, 1)])}
    kept.close()
    dropped = open_log(directory, LogConfig(), clean=True, recovery_point=end, now_ms=two_days_later)
    assert state(dropped) == {}
    dropped.close()


# ---- replication (a follower's append) --------------------------------------------------------------


def at(data: bytes, base_offset: int) -> RecordBatchHeader:
    """The header of ``data`` as the leader's log holds it: at ``base_offset``."""
    return dataclasses.replace(read_batch_header(data), base_offset=base_offset)


def test_replication_takes_what_the_leader_wrote_without_sequence_or_duplicate_checks(tmp_path: Path) -> None:
    manager = build(tmp_path, [(0, 0, 2), (0, 2, 2)])  # offsets 0-3, sequences 0-3
    # a batch equal to one kept, then a sequence gap (the leader's cleaner removed batches): both taken
    again, gap = at(idem_batch(2), 10), at(idem_batch(9), 20)
    assert manager.prepare([again]).status is AppendStatus.DUPLICATE
    assert manager.prepare([gap]).status is AppendStatus.OUT_OF_ORDER_SEQUENCE
    info = manager.prepare([again, gap], origin=AppendOrigin.REPLICATION)
    assert info.status is AppendStatus.OK
    manager.commit(info, 10)  # placed by the batches' own offsets: 10-11 and 20-21
    entry = manager.last_entry(PID)
    assert entry is not None
    assert [(b.first_sequence, b.last_sequence, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 1, 0, 1),
        (2, 3, 2, 3),
        (2, 3, 10, 11),
        (9, 10, 20, 21),
    ]
    assert manager.map_end_offset == 22
    # once this replica leads, the state it kept checks clients as a leader's does
    assert manager.prepare([hdr(12)]).status is AppendStatus.OUT_OF_ORDER_SEQUENCE
    duplicate = manager.prepare([hdr(9)]).duplicate
    assert duplicate is not None
    assert (duplicate.first_offset, duplicate.last_offset) == (20, 21)
    assert manager.prepare([hdr(11)]).status is AppendStatus.OK


def test_replication_applies_an_older_producer_epoch_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = build(tmp_path, [(5, 0, 2)])
    older = at(idem_batch(0, epoch=4), 2)
    assert manager.prepare([older]).status is AppendStatus.INVALID_PRODUCER_EPOCH
    with caplog.at_level(logging.WARNING, logger="tidelog.storage.producer_state"):
        info = manager.prepare([older], origin=AppendOrigin.REPLICATION)
    assert info.status is AppendStatus.OK
    warning = (
        f"{tmp_path.name}: epoch 4 of producer {PID} is smaller than the last seen epoch 5 at offset 2 "
        "(replicated as is)"
    )
    assert [r.getMessage() for r in caplog.records] == [warning]
    manager.commit(info, 2)
    entry = manager.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.last_sequence, entry.last_offset) == (4, 1, 3)


def test_one_append_holding_a_transaction_its_marker_and_the_next_is_applied_in_log_order(
    tmp_path: Path,
) -> None:
    # A follower's fetch may hold all three; markers must not be applied after the batches that follow them.
    def txn(seq: int, base_offset: int) -> RecordBatchHeader:
        data = encode_batch(
            [SimpleRecord(value=b"t")] * 2,
            producer_id=PID,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=True,
        )
        return at(data, base_offset)

    abort = dataclasses.replace(
        read_batch_header(
            encode_control_batch(
                ABORT, producer_id=PID, producer_epoch=0, coordinator_epoch=0, timestamp_ms=TS
            )
        ),
        base_offset=2,
    )
    manager = ProducerStateManager(tmp_path)
    headers = [txn(0, 0), abort, txn(2, 3)]
    info = manager.prepare(headers, [None, EndTxnMarker(ABORT, 0), None], origin=AppendOrigin.REPLICATION)
    completed = manager.commit(info, 0)
    assert completed == [CompletedTxn(PID, 0, 2, is_aborted=True, last_stable_offset=3)]
    assert manager.ongoing_transactions == {PID: 3}
    assert manager.first_undecided_offset == 3
