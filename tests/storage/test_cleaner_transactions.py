"""The cleaner and transactions/idempotence: Kafka's rules for aborted data, markers and producer state.

- data of an aborted transaction goes at the first cleaning, and never shadows an earlier committed value
  of its key; its ABORT marker stays while any of its batches does, then until its delete horizon;
- committed transactional records are compacted like any others; a COMMIT marker goes (after its horizon)
  once no batch of its transaction is left;
- nothing from the first open transaction on is cleaned;
- the last batch of every producer still in the producer state is kept (emptied if need be), so the
  producer state rebuilt from the log alone has the same epochs and sequences.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.storage.cleaner_support import COMPACT, CompactedLog, random_updates, read_batches, read_records

from tidelog.protocol.records import ControlRecordType
from tidelog.storage.index import _SparseIndex
from tidelog.storage.producer_state import AppendStatus

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _no_fsync() -> Iterator[None]:
    """fsync and msync only matter for power loss; these cases model process crashes: skip their cost."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        patch.setattr(_SparseIndex, "flush", lambda self: None)
        yield


RETENTION = COMPACT.delete_retention_ms
COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


def markers(log: CompactedLog) -> list[tuple[int, int, bool]]:
    """(offset, producer id, has delete horizon) of every control batch still holding its marker."""
    return [
        (h.base_offset, h.producer_id, h.has_delete_horizon)
        for h, records in read_batches(log.log)
        if h.is_control and records
    ]


def test_aborted_data_goes_and_never_shadows_the_committed_value(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    log.append([(b"x", b"x-plain"), (b"y", b"y-plain")], now_ms=NOW)  # 0, 1
    log.append_transactional([(b"x", b"x-committed")], producer_id=1, base_sequence=0, now_ms=NOW)  # 2
    log.append_marker(COMMIT, producer_id=1, now_ms=NOW)  # 3
    log.append_transactional([(b"x", b"x-aborted"), (b"y", None)], producer_id=2, base_sequence=0, now_ms=NOW)
    abort = log.append_marker(ABORT, producer_id=2, now_ms=NOW)  # 6
    log.settle(NOW, roll=True)
    # Producers expire: no batch is kept for their sake.
    log.log.remove_expired_producers(NOW + 10**9, 0)
    assert log.clean(NOW)
    assert read_records(log.log) == [(1, b"y", b"y-plain"), (2, b"x", b"x-committed")]
    # Both markers stay: their transactions' batches were still there when this cleaning began.
    assert markers(log) == [(3, 1, False), (abort, 2, False)]
    # The cleaned segment's .txnindex keeps the aborted transaction (Kafka's cleaned index).
    assert log.log.collect_aborted_transactions(0, log.log.log_end_offset) == [(2, 4)]

    # Second cleaning: the aborted transaction has no batch left, so its marker gets a delete horizon;
    # the committed one still has x-committed, so its marker stays as it is.
    log.append([(b"z", b"z1")], now_ms=NOW + 1)
    log.settle(NOW + 1, roll=True)
    assert log.clean(NOW + 1)
    assert markers(log) == [(3, 1, False), (abort, 2, True)]
    assert log.log.collect_aborted_transactions(0, log.log.log_end_offset) == []
    # x-committed is overwritten: this cleaning removes it, the next finds no batch of the transaction.
    later = log.append([(b"x", b"x-later")], now_ms=NOW + 2)
    log.settle(NOW + 2, roll=True)
    assert log.clean(NOW + 2)
    assert markers(log) == [(3, 1, False), (abort, 2, True)]
    log.append([(b"z", b"z2")], now_ms=NOW + 3)
    log.settle(NOW + 3, roll=True)
    assert log.clean(NOW + 3)
    assert markers(log) == [(3, 1, True), (abort, 2, True)]
    # Before the ABORT marker's horizon both stay; past both horizons both go.
    last_z = log.append([(b"z", b"z3")], now_ms=NOW + 1 + RETENTION - 1)
    log.settle(NOW + 1 + RETENTION - 1, roll=True)
    assert log.clean(NOW + 1 + RETENTION - 1)
    assert markers(log) == [(3, 1, True), (abort, 2, True)]
    log.append([(b"y", b"y-last")], now_ms=NOW + 3 + RETENTION)
    log.settle(NOW + 3 + RETENTION, roll=True)
    assert log.clean(NOW + 3 + RETENTION)
    assert markers(log) == []
    assert read_records(log.log) == [
        (later, b"x", b"x-later"),
        (last_z, b"z", b"z3"),
        (last_z + 1, b"y", b"y-last"),
    ]
    log.close()


def test_nothing_from_an_open_transaction_on_is_cleaned(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(1), keys=5, records=150, now_ms=NOW)
    log.settle(NOW, roll=True)
    open_txn = log.append_transactional(
        [(b"key-000", b"pending")], producer_id=9, base_sequence=0, now_ms=NOW
    )
    random_updates(log, random.Random(2), keys=5, records=150, now_ms=NOW)
    log.settle(NOW, roll=True)
    log.log.remove_expired_producers(NOW + 10**9, 0)
    assert log.clean(NOW)
    open_segment = max(s.base_offset for s in log.log.segments if s.base_offset <= open_txn)
    records = read_records(log.log)
    # Everything from the open transaction's segment on is untouched.
    assert [r for r in records if r[0] >= open_segment] == [w for w in log.written if w[0] >= open_segment]
    assert len([r for r in records if r[0] < open_segment]) <= 5
    # Once committed (and past the segment), it is cleaned like the rest.
    log.append_marker(COMMIT, producer_id=9, now_ms=NOW)
    log.settle(NOW, roll=True)
    assert log.clean(NOW)
    assert len(read_records(log.log)) <= 6
    log.close()


def test_the_last_batch_of_an_active_producer_is_kept_and_the_state_rebuilds(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    for seq in range(3):
        log.append(
            [(b"k%d" % seq, b"idempotent")], now_ms=NOW, producer_id=5, producer_epoch=2, base_sequence=seq
        )
    for seq in range(3):
        log.append([(b"k%d" % seq, b"plain")], now_ms=NOW)
    log.settle(NOW, roll=True)
    before = log.log.producer_state.last_entry(5)
    assert before is not None
    assert (before.producer_epoch, before.last_sequence, before.last_offset) == (2, 2, 2)
    assert log.clean(NOW)
    assert read_records(log.log) == [(3, b"k0", b"plain"), (4, b"k1", b"plain"), (5, b"k2", b"plain")]
    kept = [h for h, records in read_batches(log.log) if h.producer_id == 5]
    assert [(h.base_offset, h.records_count, h.base_sequence, h.producer_epoch) for h in kept] == [
        (2, 0, 2, 2)
    ]
    # The producer state rebuilt from the cleaned log alone (no snapshot) is the same.
    for snapshot in log.partition_dir.glob("*.snapshot"):
        snapshot.unlink()
    log.log.load_producer_state(NOW)
    after = log.log.producer_state.last_entry(5)
    assert after is not None
    assert (after.producer_epoch, after.last_sequence, after.last_offset) == (2, 2, 2)
    # A retry of the last batch is still recognised as a duplicate.
    from tidelog.protocol.records import SimpleRecord, encode_batch, read_batch_header

    retry = encode_batch(
        [SimpleRecord(key=b"k2", value=b"idempotent", timestamp=NOW)],
        producer_id=5,
        producer_epoch=2,
        base_sequence=2,
    )
    verdict = log.log.producer_state.prepare([read_batch_header(retry)])
    assert verdict.status is AppendStatus.DUPLICATE
    log.close()


def test_an_expired_producers_batches_go_entirely(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    log.append([(b"k", b"idempotent")], now_ms=NOW, producer_id=5, producer_epoch=0, base_sequence=0)
    log.append([(b"k", b"plain")], now_ms=NOW)
    log.settle(NOW, roll=True)
    log.log.remove_expired_producers(NOW + 10**9, 0)
    assert log.clean(NOW)
    assert [h.producer_id for h, _ in read_batches(log.log)] == [-1]
    log.close()


def test_transactions_whose_markers_are_past_the_cleaned_segments_are_cleaned_by_their_outcome(
    tmp_path: Path,
) -> None:
    """A transaction decided (below the last stable offset) but whose marker lies in the active segment is
    committed unless a later segment's ``.txnindex`` says it aborted, as Kafka reads it: its committed
    records are compacted and its aborted ones go, and the cleaning reaches the active segment (it used to
    take them for open transactions and clean nothing, round after round)."""
    log = CompactedLog(tmp_path / "data")
    for i in range(60):
        key = b"key-%d" % (i % 3)
        log.append_transactional([(key, b"committed-%02d" % i)], producer_id=1, base_sequence=i, now_ms=NOW)
        log.append_transactional([(key, b"aborted-%02d" % i)], producer_id=2, base_sequence=i, now_ms=NOW)
    log.settle(NOW, roll=True)
    active = log.log.active_segment.base_offset
    assert len(log.log.segments) > 5
    log.append_marker(COMMIT, producer_id=1, now_ms=NOW)
    abort = log.append_marker(ABORT, producer_id=2, now_ms=NOW)
    log.settle(NOW)
    assert log.log.last_stable_offset == log.log.log_end_offset
    assert log.clean(NOW)
    assert log.manager.cleaner_checkpoints.get(log.log.topic_partition) == active
    assert read_records(log.log) == [
        (114, b"key-0", b"committed-57"),
        (116, b"key-1", b"committed-58"),
        (118, b"key-2", b"committed-59"),
    ]
    # Both markers stay (their data was there when this cleaning began), and read_committed readers are still
    # told about the aborted transaction.
    assert markers(log) == [(active, 1, False), (abort, 2, False)]
    assert log.log.collect_aborted_transactions(0, log.log.log_end_offset) == [(2, 1)]
    log.close()
