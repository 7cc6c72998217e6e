"""A full disk met outside a segment's own write (a roll's producer snapshot), through the replica manager.

The produce is answered KAFKA_STORAGE_ERROR with one warning line and no traceback (a full disk is an
operating condition, not a bug), the log dir stays online (the disk may get space back), and once there is
space again the same partition takes the next batch at the offset the refused one would have had.
Deterministic: ``os.write`` fails only for the snapshot's temp file, so the refusal always comes from the
roll (the tmpfs test in ``test_disk_full.py`` meets whichever write fills the disk first).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.server.inprocess import make_broker
from tests.support.small_fs import enospc_on_writes_to

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import SimpleRecord, encode_batch


def one_batch(seq: int) -> bytearray:
    return bytearray(encode_batch([SimpleRecord(key=b"k%d" % seq, value=b"v" * 400, timestamp=1_000 + seq)]))


def test_enospc_in_a_roll_is_a_storage_error_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_broker(tmp_path / "data", **{"log.segment.bytes": "2048"})
    replicas, now = broker.replicas, broker.clock.now_ms()
    try:
        log = broker.logs.get("t", 0)
        assert log is not None
        size = len(one_batch(0))
        seq = 0
        while len(log.segments) == 1 or log.active_segment.size + size <= 2048:  # one roll, then fill up
            error, info, _ = replicas.append("t", 0, one_batch(seq), now_ms=now)
            assert error is ErrorCode.NONE
            assert info is not None
            assert info.first_offset == seq
            seq += 1
        enospc_on_writes_to(monkeypatch, ".snapshot.tmp")
        with caplog.at_level(logging.WARNING, logger="tidelog.replica_manager"):
            error, info, message = replicas.append("t", 0, one_batch(seq), now_ms=now)
        assert (error, info) == (ErrorCode.KAFKA_STORAGE_ERROR, None)
        assert message == "the broker could not write to its log"
        records = [r for r in caplog.records if r.name == "tidelog.replica_manager"]
        assert [(r.levelno, r.exc_info) for r in records] == [(logging.WARNING, None)]
        assert "the disk is full" in records[0].getMessage()
        assert not replicas.log_dir_failures
        monkeypatch.undo()
        error, info, _ = replicas.append("t", 0, one_batch(seq + 1), now_ms=now)
        assert error is ErrorCode.NONE
        assert info is not None
        assert (info.first_offset, log.log_end_offset) == (seq, seq + 1)
    finally:
        broker.replicas.shutdown()
        broker.logs.shutdown(broker.clock.now_ms())
