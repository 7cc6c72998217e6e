"""Transactions in the partition log: open transactions, last stable offset, markers, ``.txnindex``.

Every test builds a log through the storage API (transactional batches and COMMIT/ABORT markers) and
checks exact offsets: the LSO after each step, the aborted transactions a read_committed fetch would get,
the bytes of the ``.txnindex`` files, and that restarts (clean and crashed), truncation, DeleteRecords and
retention keep all of it right.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import ControlRecordType, SimpleRecord, encode_batch, iter_batch_headers
from tidelog.storage import layout
from tidelog.storage.config import LogConfig
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.producer_snapshot import decode_snapshot, snapshot_file
from tidelog.storage.producer_state import (
    AppendOrigin,
    AppendStatus,
    CompletedTxn,
    EndTxnMarker,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerStateManager,
    TransactionCoordinatorFencedError,
)
from tidelog.storage.txn_index import ABORTED_TXN_SIZE, AbortedTransaction, AbortedTxn, TransactionIndex

from .helpers import SMALL, batch, headers, open_log

TS = 1_000_000
P1, P2, P3 = 4000, 4001, 4002
COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT
BIG = dataclasses.replace(SMALL, segment_bytes=1 << 20)
"""One segment for everything (tests that are about offsets, not segments)."""


class Producer:
    """A transactional (or idempotent) producer writing straight into a log, sequences tracked."""

    def __init__(self, log: PartitionLog, pid: int, *, epoch: int = 0, transactional: bool = True) -> None:
        self.log = log
        self.pid = pid
        self.epoch = epoch
        self.seq = 0
        self.transactional = transactional

    def send(self, records: int = 2, *, value_size: int = 10) -> tuple[int, int]:
        """Append one batch; returns (first offset, last offset)."""
        data = encode_batch(
            [SimpleRecord(key=b"k%d" % i, value=b"v" * value_size, timestamp=TS) for i in range(records)],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=self.transactional,
        )
        info = self.log.append(data, leader_epoch=0, now_ms=TS)
        self.seq += records
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.first_offset, info.last_offset

    def end(self, kind: ControlRecordType, *, coordinator_epoch: int = 0, epoch: int | None = None) -> int:
        """Write a marker as the coordinator would; returns its offset."""
        info = self.log.append_control_marker(
            kind,
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=0,
            now_ms=TS,
        )
        assert info.first_offset == info.last_offset
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.first_offset


def plain(log: PartitionLog, seq: int = 0) -> tuple[int, int]:
    info = log.append(batch(seq, timestamp=TS), leader_epoch=0, now_ms=TS)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset, info.last_offset


def index_files(log: PartitionLog) -> dict[int, list[AbortedTxn]]:
    """The ``.txnindex`` files on disk, decoded straight from their bytes (Kafka's 34-byte entries)."""
    out: dict[int, list[AbortedTxn]] = {}
    for path in sorted(log.dir.glob("*" + layout.TXN_INDEX_FILE_SUFFIX)):
        data = path.read_bytes()
        assert len(data) % ABORTED_TXN_SIZE == 0
        entries = []
        for pos in range(0, len(data), ABORTED_TXN_SIZE):
            version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
            assert version == 0
            entries.append(AbortedTxn(pid, first, last, lso))
        base = layout.offset_from_file_name(path.name)
        assert base is not None
        out[base] = entries
    return out


def everything_aborted(log: PartitionLog) -> list[AbortedTransaction]:
    return log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)


# ---- last stable offset ---------------------------------------------------------------------------


def test_open_transaction_holds_the_lso_and_a_commit_releases_it(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    assert plain(log) == (0, 2)
    assert (log.last_stable_offset, log.first_unstable_offset) == (3, None)
    p1 = Producer(log, P1)
    assert p1.send() == (3, 4)
    assert log.producer_state.ongoing_transactions == {P1: 3}
    assert (log.high_watermark, log.last_stable_offset, log.first_unstable_offset) == (5, 3, 3)
    assert plain(log, 1) == (5, 7)  # other writers go on; the LSO stays at the open transaction
    assert p1.send() == (8, 9)  # the same transaction: its first offset stays 3
    assert (log.high_watermark, log.last_stable_offset) == (10, 3)
    # read_committed reads stop at the LSO: only the batch before the transaction
    assert [
        h.base_offset for h in headers(log.read(0, 1 << 20, max_offset=log.last_stable_offset).read_bytes())
    ] == [0]
    assert p1.end(COMMIT) == 10
    assert log.producer_state.ongoing_transactions == {}
    assert (log.high_watermark, log.last_stable_offset, log.first_unstable_offset) == (11, 11, None)
    assert everything_aborted(log) == []
    assert index_files(log) == {}  # a commit writes no index entry; the file is created lazily
    log.close()


def test_a_marker_above_the_high_watermark_keeps_the_transaction_unstable(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    p1 = Producer(log, P1)
    p1.send()
    log.append_control_marker(
        COMMIT, producer_id=P1, producer_epoch=0, coordinator_epoch=0, leader_epoch=0, now_ms=TS
    )
    # the marker is at offset 2, the high watermark still 2 (not replicated): Kafka's unreplicatedTxns
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (3, 2, 0)
    assert log.producer_state.ongoing_transactions == {}
    log.update_high_watermark(3)
    assert (log.last_stable_offset, log.first_unstable_offset) == (3, None)
    log.close()


def test_abort_writes_kafkas_txnindex_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    p1, p2 = Producer(log, P1), Producer(log, P2)
    plain(log)  # 0-2
    p1.send()  # 3-4
    p2.send(3)  # 5-7
    p1.send()  # 8-9
    assert log.last_stable_offset == 3
    assert p1.end(ABORT, coordinator_epoch=7) == 10
    # P2 is still open: the LSO recorded with P1's abort is P2's first offset
    assert index_files(log) == {0: [AbortedTxn(P1, 3, 10, 5)]}
    path = layout.txn_index_file(log.dir, 0)
    assert path.read_bytes() == struct.pack(">hqqqq", 0, P1, 3, 10, 5)
    assert log.last_stable_offset == 5
    assert p2.end(ABORT) == 11
    assert index_files(log) == {0: [AbortedTxn(P1, 3, 10, 5), AbortedTxn(P2, 5, 11, 12)]}
    assert log.last_stable_offset == 12
    assert everything_aborted(log) == [(P1, 3), (P2, 5)]
    assert log.producer_state.producers[P1].coordinator_epoch == 7
    log.close()


@pytest.mark.parametrize(
    ("start", "upper", "expected"),
    [
        (0, 3, []),  # before both transactions
        (0, 4, [(P1, 3)]),  # the first record of P1's transaction
        (4, 6, [(P1, 3), (P2, 5)]),  # in the middle of both
        (10, 11, [(P1, 3), (P2, 5)]),  # P1's marker (its last offset) and P2, open across the range
        (11, 12, [(P2, 5)]),
        (12, 14, []),  # after both markers
        (5, 5, []),  # an empty range
    ],
)
def test_collect_aborted_transactions_by_range(
    tmp_path: Path, start: int, upper: int, expected: list[tuple[int, int]]
) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    p1, p2 = Producer(log, P1), Producer(log, P2)
    plain(log)  # 0-2
    p1.send()  # 3-4
    p2.send(3)  # 5-7
    p1.send()  # 8-9
    p1.end(ABORT)  # 10
    p2.end(ABORT)  # 11
    plain(log, 1)  # 12-14
    assert log.collect_aborted_transactions(start, upper) == expected
    log.close()


def test_a_transaction_spanning_segments_is_indexed_where_its_marker_is(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")  # SMALL: 1 KiB segments
    p1 = Producer(log, P1)
    first, _ = p1.send(records=3, value_size=100)
    while len(log.segments) < 3:
        plain(log, len(log.segments))  # non-transactional records of others
    marker = p1.end(ABORT)
    marker_segment = log.segments[-1].base_offset
    assert first == 0
    assert marker_segment > 0
    assert index_files(log) == {marker_segment: [AbortedTxn(P1, 0, marker, marker + 1)]}
    # a fetch of the first segment only still learns of the abort (the search walks to later segments)
    assert log.collect_aborted_transactions(0, log.segments[1].base_offset) == [(P1, 0)]
    assert log.collect_aborted_transactions(marker + 1, log.log_end_offset + 1) == []
    log.close()


def test_commit_and_abort_of_interleaved_transactions_across_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    producers = [Producer(log, pid) for pid in (P1, P2, P3)]
    expected: dict[int, list[AbortedTxn]] = {}
    aborted: list[tuple[int, int]] = []
    for round_ in range(6):
        firsts = {p.pid: p.send(value_size=40)[0] for p in producers}
        plain(log, round_)
        for i, p in enumerate(producers):
            kind = ABORT if (round_ + i) % 2 else COMMIT
            still_open = [firsts[q.pid] for q in producers[i + 1 :]]
            offset = p.end(kind)
            if kind == ABORT:
                base = log.segments[-1].base_offset
                expected.setdefault(base, []).append(
                    AbortedTxn(p.pid, firsts[p.pid], offset, min(still_open) if still_open else offset + 1)
                )
                aborted.append((p.pid, firsts[p.pid]))
        assert log.last_stable_offset == log.log_end_offset
    assert len(log.segments) > 3
    assert index_files(log) == expected
    assert everything_aborted(log) == aborted
    log.close()


# ---- rules -----------------------------------------------------------------------------------------


def test_marker_epoch_fencing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    p1 = Producer(log, P1, epoch=3)
    p1.send()
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError) as raised:
        p1.end(ABORT, epoch=2)
    assert raised.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == end
    assert log.producer_state.ongoing_transactions == {P1: 0}
    # a bumped epoch (the coordinator aborting on timeout / fencing a zombie) is fine ...
    assert p1.end(ABORT, epoch=4, coordinator_epoch=2) == 2
    assert log.producer_state.producers[P1].producer_epoch == 4
    # ... and fences the zombie's data and markers of the old epoch
    with pytest.raises(InvalidProducerEpochError):
        p1.send()
    with pytest.raises(InvalidProducerEpochError):
        p1.end(COMMIT, epoch=3, coordinator_epoch=2)
    # a marker from an older coordinator epoch is fenced too
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        p1.end(COMMIT, epoch=4, coordinator_epoch=1)
    assert fenced.value.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == 3
    log.close()


def test_non_transactional_write_inside_an_open_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    p1 = Producer(log, P1)
    p1.send()
    p1.transactional = False
    with pytest.raises(InvalidTxnStateError) as raised:
        p1.send()
    assert raised.value.error_code == ErrorCode.INVALID_TXN_STATE
    assert log.log_end_offset == 2
    p1.transactional = True
    p1.seq = 2
    p1.end(COMMIT)
    p1.transactional = False
    assert p1.send() == (3, 4)  # idempotent writes again once the transaction ended
    log.close()


def test_marker_without_an_open_transaction_completes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    plain(log)
    assert Producer(log, P1, epoch=5).end(ABORT, coordinator_epoch=1) == 3
    assert (log.last_stable_offset, index_files(log), everything_aborted(log)) == (4, {}, [])
    entry = log.producer_state.producers[P1]
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (5, 1, -1)
    log.close()


def test_producer_state_prepare_and_commit_of_markers(tmp_path: Path) -> None:
    manager = ProducerStateManager(tmp_path)
    header = headers(
        encode_batch(
            [SimpleRecord(key=None, value=b"v", timestamp=TS)] * 2,
            producer_id=P1,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    )[0]
    info = manager.prepare([header])
    assert info.status is AppendStatus.OK
    assert manager.commit(info, 10) == []
    assert manager.ongoing_transactions == {P1: 10}
    control = headers(
        encode_batch(
            [SimpleRecord(key=b"\0\0\0\0", value=b"\0\0\0\0\0\0", timestamp=TS)],
            producer_id=P1,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
    )[0]
    # a data batch and the marker in one append: the data would be inside the transaction it closes
    info = manager.prepare([header, control], [None, EndTxnMarker(ABORT, 0)])
    assert info.status is AppendStatus.DUPLICATE  # sequence 0-1 again: a retry
    info = manager.prepare([control], [EndTxnMarker(ABORT, 3)])
    assert info.status is AppendStatus.OK
    assert manager.ongoing_transactions == {P1: 10}  # prepare changes nothing
    assert manager.commit(info, 12) == [CompletedTxn(P1, 10, 12, is_aborted=True, last_stable_offset=13)]
    assert manager.ongoing_transactions == {}
    assert manager.first_unstable_offset == 10  # not replicated yet
    manager.on_high_watermark_updated(13)
    assert manager.first_unstable_offset is None
    assert (
        manager.prepare([control], [EndTxnMarker(COMMIT, 2)]).status
        is AppendStatus.TRANSACTION_COORDINATOR_FENCED
    )


def test_coordinator_writes_skip_sequence_checks_but_not_epoch_fencing(tmp_path: Path) -> None:
    """Transactional offset commits: the group coordinator writes batches with the producer's id and
    epoch but no sequence (Kafka's AppendOrigin.COORDINATOR)."""
    log = open_log(tmp_path / "t-0", BIG)

    def offset_commit(epoch: int) -> bytes:
        return encode_batch(
            [SimpleRecord(key=b"offset-key", value=b"offset-value", timestamp=TS)],
            producer_id=P1,
            producer_epoch=epoch,
            is_transactional=True,
        )

    for expected in (0, 1):
        info = log.append(offset_commit(2), leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR)
        assert (info.first_offset, info.duplicate) == (expected, False)
    assert log.producer_state.ongoing_transactions == {P1: 0}
    with pytest.raises(InvalidProducerEpochError):
        log.append(offset_commit(1), leader_epoch=0, now_ms=TS, origin=AppendOrigin.COORDINATOR)
    # the same batches from a client fail the sequence check (no sequence cannot follow no sequence)
    assert log.producer_state.prepare(headers(offset_commit(2))).status is AppendStatus.OUT_OF_ORDER_SEQUENCE
    log.update_high_watermark(log.log_end_offset)
    assert Producer(log, P1, epoch=2).end(COMMIT) == 2
    assert log.last_stable_offset == 3
    log.close()


def test_expiry_spares_producers_with_an_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig())
    Producer(log, P1).send()
    Producer(log, P2, transactional=False).send()
    assert log.remove_expired_producers(TS + 10, 10) == 1
    assert set(log.producer_state.producers) == {P1}
    assert log.last_stable_offset == 0
    log.close()


# ---- restarts ---------------------------------------------------------------------------------------


def build_mixed(log: PartitionLog) -> tuple[list[AbortedTransaction], int]:
    """Aborted and committed transactions over several segments, and P3's transaction left open;
    returns the aborted list and P3's first offset."""
    p1, p2, p3 = Producer(log, P1), Producer(log, P2), Producer(log, P3)
    aborted = []
    for round_ in range(4):
        first1 = p1.send(value_size=60)[0]
        first2 = p2.send(value_size=60)[0]
        plain(log, round_)
        p1.end(COMMIT if round_ % 2 else ABORT)
        p2.end(ABORT if round_ % 2 else COMMIT)
        aborted.append((P2, first2) if round_ % 2 else (P1, first1))
    open_first = p3.send(value_size=60)[0]
    p1.send()
    p1.end(COMMIT)
    return [AbortedTransaction(*a) for a in aborted], open_first


def test_clean_restart_restores_open_transactions_from_the_snapshot(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    aborted, open_first = build_mixed(log)
    assert len(log.segments) >= 3
    files = index_files(log)
    end = log.log_end_offset
    assert log.last_stable_offset == open_first
    log.flush()
    log.take_producer_snapshot()
    log.close()
    entries = {e.producer_id: e for e in decode_snapshot(snapshot_file(directory, end).read_bytes())}
    assert entries[P3].current_txn_first_offset == open_first
    assert entries[P1].current_txn_first_offset == -1
    reopened = open_log(directory, clean=True, recovery_point=end, high_watermark=end)
    assert reopened.producer_state.ongoing_transactions == {P3: open_first}
    assert reopened.last_stable_offset == open_first
    assert everything_aborted(reopened) == aborted
    assert index_files(reopened) == files
    p3 = Producer(reopened, P3)
    p3.seq = 2
    p3.end(ABORT)
    assert reopened.last_stable_offset == reopened.log_end_offset
    assert everything_aborted(reopened) == [*aborted, (P3, open_first)]
    reopened.close()


@pytest.mark.parametrize("recovery_point", ["zero", "middle"])
def test_crash_rebuilds_the_txnindex_and_open_transactions(tmp_path: Path, recovery_point: str) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    aborted, open_first = build_mixed(log)
    files = index_files(log)
    bases = [s.base_offset for s in log.segments]
    point = 0 if recovery_point == "zero" else bases[len(bases) // 2]
    end = log.log_end_offset
    log.close()
    # the crash: no clean shutdown; the index files of the unflushed segments are lost or stale
    for base in bases:
        if base >= point:
            layout.txn_index_file(directory, base).unlink(missing_ok=True)
    reopened = open_log(directory, clean=False, recovery_point=point, high_watermark=end)
    assert reopened.log_end_offset == end
    assert index_files(reopened) == files
    assert everything_aborted(reopened) == aborted
    assert reopened.producer_state.ongoing_transactions == {P3: open_first}
    assert reopened.last_stable_offset == open_first
    reopened.close()


def test_corrupt_txnindex_of_a_trusted_segment_is_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    aborted, _ = build_mixed(log)
    files = index_files(log)
    end = log.log_end_offset
    log.flush()
    log.take_producer_snapshot()
    log.close()
    base = min(files)
    path = layout.txn_index_file(directory, base)
    path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])  # version 7
    reopened = open_log(directory, clean=True, recovery_point=end, high_watermark=end)
    assert index_files(reopened) == files
    assert everything_aborted(reopened) == aborted
    reopened.close()


@pytest.mark.parametrize("field", ["producer_id", "first_offset", "last_offset", "last_stable_offset"])
def test_a_plausible_but_wrong_txnindex_entry_of_a_trusted_segment_is_rebuilt(
    tmp_path: Path, field: str
) -> None:
    """One flipped bit that leaves an entry well-formed (another producer id, a nearby offset) is caught
    against the log; a wrong producer id would show the aborted records to read_committed consumers."""
    directory = tmp_path / "t-0"
    log = open_log(directory, BIG)  # one segment: every transaction begins in it
    aborted, _ = build_mixed(log)
    files = index_files(log)
    end = log.log_end_offset
    log.flush()
    log.take_producer_snapshot()
    log.close()
    base, entry = next((b, e) for b, entries in files.items() for e in entries if e.first_offset > b)
    position = files[base].index(entry) * ABORTED_TXN_SIZE
    damaged = entry._replace(
        producer_id=entry.producer_id ^ 1,
        first_offset=entry.first_offset - 1,
        last_offset=entry.last_offset - 1,
        last_stable_offset=entry.last_offset + 2,
    )
    wrong = entry._replace(**{field: getattr(damaged, field)})
    path = layout.txn_index_file(directory, base)
    data = bytearray(path.read_bytes())
    data[position : position + ABORTED_TXN_SIZE] = wrong.encode()
    path.write_bytes(bytes(data))
    reopened = open_log(directory, BIG, clean=True, recovery_point=end, high_watermark=end)
    assert index_files(reopened) == files
    assert everything_aborted(reopened) == aborted
    reopened.close()


def test_torn_partial_entry_is_ignored_and_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    first, second = AbortedTxn(P1, 0, 5, 3), AbortedTxn(P2, 3, 9, 10)  # P2 was open when P1 aborted
    index = TransactionIndex(path, 0)
    index.append(first)
    path.write_bytes(path.read_bytes() + b"\x00\x00\x01")  # a crash in the middle of the next entry
    reread = TransactionIndex(path, 0)
    assert reread.entries() == [first]
    reread.append(second)
    assert path.read_bytes() == first.encode() + second.encode()
    with pytest.raises(ValueError):
        reread.append(AbortedTxn(P3, 3, 9, 10))  # markers strictly increase
    assert reread.collect(0, 4) == ([first, second], True)  # P2's LSO 10 >= 4: nothing later can overlap
    assert reread.collect(6, 7) == ([second], True)
    assert reread.collect(0, 20) == ([first, second], False)  # go on into the next segment
    reread.truncate_to(9)
    assert path.read_bytes() == first.encode()
    reread.truncate_to(5)
    assert not path.exists()
    assert reread.entries() == []


# ---- truncation, DeleteRecords, retention -----------------------------------------------------------


def test_truncation_below_an_abort_marker_reopens_its_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", BIG)
    p1 = Producer(log, P1)
    plain(log)  # 0-2
    p1.send()  # 3-4
    marker = p1.end(ABORT)  # 5
    plain(log, 1)  # 6-8
    assert index_files(log) == {0: [AbortedTxn(P1, 3, 5, 6)]}
    log.truncate_to(marker)
    assert index_files(log) == {}
    assert log.producer_state.ongoing_transactions == {P1: 3}
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (5, 5, 3)
    # the coordinator writes the marker again (the leader's log after a failover)
    p1.seq = 2
    assert p1.end(ABORT) == 5
    assert index_files(log) == {0: [AbortedTxn(P1, 3, 5, 6)]}
    log.truncate_to(3)  # below the transaction's first batch: it never happened
    assert log.producer_state.ongoing_transactions == {}
    assert (log.last_stable_offset, everything_aborted(log)) == (3, [])
    log.close()


def test_truncation_keeps_earlier_entries_and_rebuilds_from_a_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    aborted, _ = build_mixed(log)
    files = index_files(log)
    last_base = max(files)
    last_marker = files[last_base][-1].last_offset
    log.truncate_to(last_marker)
    expected = {base: entries for base, entries in files.items() if base < last_base}
    if files[last_base][:-1]:
        expected[last_base] = files[last_base][:-1]
    assert index_files(log) == expected
    assert everything_aborted(log) == aborted[:-1]
    log.close()


def test_delete_records_past_an_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    p1 = Producer(log, P1)
    first, _ = p1.send(value_size=100)
    while len(log.segments) < 4:
        plain(log, len(log.segments))
    assert log.last_stable_offset == first == 0
    target = log.segments[2].base_offset + 1
    log.delete_records_before(target)
    assert log.log_start_offset == target
    # the LSO never falls below the log start offset (Kafka's maybeIncrementFirstUnstableOffset)
    assert (log.first_unstable_offset, log.last_stable_offset) == (target, target)
    marker = p1.end(ABORT)
    assert everything_aborted(log) == [(P1, 0)]
    assert log.collect_aborted_transactions(target, marker + 1) == [(P1, 0)]
    assert log.last_stable_offset == log.log_end_offset
    log.close()


def test_retention_deletes_index_files_with_their_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    _, open_first = build_mixed(log)
    before = index_files(log)
    log.update_config(dataclasses.replace(SMALL, retention_bytes=log.size_in_bytes // 2))
    deleted = log.delete_retention(now_ms=TS)
    assert deleted > 0
    bases = {s.base_offset for s in log.segments}
    after = index_files(log)
    assert after == {base: entries for base, entries in before.items() if base in bases}
    assert not list(log.dir.glob("*.txnindex.deleted"))  # file.delete.delay.ms=0 in SMALL
    start = log.log_start_offset
    assert everything_aborted(log) == [
        AbortedTransaction(e.producer_id, e.first_offset)
        for entries in after.values()
        for e in entries
        if e.last_offset >= start
    ]
    assert log.last_stable_offset == max(open_first, start)
    log.close()


def test_follower_appends_track_transactions_too(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader-0", BIG)
    aborted, open_first = build_mixed(leader)
    data = leader.read(0, 1 << 30).read_bytes()
    follower = open_log(tmp_path / "follower-0", BIG)
    for position, header in iter_batch_headers(data):
        follower.append(
            data[position : position + header.size_in_bytes], leader_epoch=0, now_ms=TS, assign_offsets=False
        )
    follower.update_high_watermark(follower.log_end_offset)
    assert index_files(follower) == index_files(leader)
    assert everything_aborted(follower) == aborted
    assert follower.last_stable_offset == open_first
    leader.close()
    follower.close()
