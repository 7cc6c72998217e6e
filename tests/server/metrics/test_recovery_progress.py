"""After an unclean shutdown the broker logs the recovery's progress (segments recovered of the total,
partitions, MB/s); after a clean one it says nothing. The storage layer reports, the server times."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch

from tidelog.server.recovery_progress import RecoveryProgressLog
from tidelog.storage.log_manager import LogManager, RecoveryProgress


def _write(data: Path, partitions: int, batches: int) -> int:
    """Partitions of ``batches`` batches each, closed without a clean shutdown; their segment count."""
    manager = LogManager([data], SMALL, now_ms=0)
    for index in range(partitions):
        log = manager.create("t", index)
        for seq in range(batches):
            log.append(batch(seq), leader_epoch=1, now_ms=seq)
    segments = sum(len(plog.segments) for _tp, plog in manager)
    manager.close()  # as after kill -9: no flush, checkpoints or marker
    return segments


def test_unclean_restart_reports_each_partition(tmp_path: Path) -> None:
    segments = _write(tmp_path, partitions=3, batches=12)
    reports: list[RecoveryProgress] = []
    again = LogManager([tmp_path], SMALL, now_ms=0, recovery_progress=reports.append)
    again.shutdown()
    assert [(r.partitions_done, r.partitions_total) for r in reports] == [(1, 3), (2, 3), (3, 3)]
    assert reports[-1].done
    assert reports[-1].segments_done == reports[-1].segments_total == segments
    assert reports[-1].bytes_done > 0
    reports.clear()
    LogManager([tmp_path], SMALL, now_ms=0, recovery_progress=reports.append).shutdown()
    assert reports == []  # a clean shutdown needs no recovery


def test_the_broker_logs_recovery_progress(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    segments = _write(tmp_path, partitions=3, batches=12)
    ticks = iter([0.0, 1.0, 10.0])
    progress = RecoveryProgressLog(clock=lambda: next(ticks), interval_s=5.0)
    with caplog.at_level(logging.INFO, logger="tidelog.recovery"):
        LogManager([tmp_path], SMALL, now_ms=0, recovery_progress=progress).shutdown()
    lines = [r.getMessage() for r in caplog.records if r.name == "tidelog.recovery"]
    assert len(lines) == 2  # the first report, then (1 s later: too soon) none, then the last
    assert lines[0].startswith(f"recovering {tmp_path} after an unclean shutdown: ")
    assert "1/3 partitions" in lines[0]
    assert f"{segments}/{segments} segments, 3/3 partitions" in lines[1]
    assert lines[1].endswith("MB/s (done)")
