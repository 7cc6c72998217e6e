"""The broker's periodic flush in-process: fsyncs run in a worker thread, completions on the event loop.

- A round fsyncs on a thread other than the event loop's and then advances the recovery points.
- A log whose fsync fails keeps its recovery point (and is retried next round); the others complete.
- Cancelling the round (broker shutdown) waits for the worker, however often it is cancelled: the plans'
  descriptors stay open until the fsyncs returned, and nothing is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch

from tidelog.server.log_flush_task import LogFlushTask
from tidelog.storage.errors import KafkaStorageError
from tidelog.storage.flush_plan import FlushPlan
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog

CONFIG = dataclasses.replace(SMALL, flush_ms=1000)


def rolled_logs(tmp_path: Path, *names: str) -> tuple[LogManager, list[PartitionLog]]:
    manager = LogManager([tmp_path / "d"], CONFIG, now_ms=0)
    logs = []
    for name in names:
        log = manager.create(name, 0)
        for seq in range(20):
            log.append(batch(seq), leader_epoch=0, now_ms=0)
        assert len(log.segments) > 1
        logs.append(log)
    return manager, logs


def test_a_round_fsyncs_off_the_event_loop_then_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, logs = rolled_logs(tmp_path, "a", "b")
    threads: list[int] = []
    real_execute = FlushPlan.execute

    def execute(plan: FlushPlan) -> None:
        threads.append(threading.get_ident())
        real_execute(plan)

    monkeypatch.setattr(FlushPlan, "execute", execute)
    task = LogFlushTask(lambda: logs, clock_ms=lambda: 1)

    async def run() -> int:
        await task.run_once()
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert len(threads) == 2
    assert loop_thread not in threads
    assert [log.recovery_point for log in logs] == [log.active_segment.base_offset for log in logs]
    assert (task.rounds, task.completed) == (1, 2)
    asyncio.run(task.run_once())  # nothing due: no round
    assert task.rounds == 1
    asyncio.run(LogFlushTask(lambda: logs, clock_ms=lambda: 1000).run_once())  # flush.ms passed
    assert [log.recovery_point for log in logs] == [log.log_end_offset for log in logs]
    manager.shutdown()


def test_a_failed_fsync_leaves_that_log_due_and_the_others_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    manager, (a, b) = rolled_logs(tmp_path, "a", "b")
    real_execute = FlushPlan.execute

    def execute(plan: FlushPlan) -> None:
        if plan.log_name == "a-0":
            raise KafkaStorageError("fsync of a-0 failed: [Errno 5] I/O error")
        real_execute(plan)

    task = LogFlushTask(lambda: [a, b], clock_ms=lambda: 1)
    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, logger="tidelog.log_flush"):
        patch.setattr(FlushPlan, "execute", execute)
        asyncio.run(task.run_once())
    assert (a.recovery_point, b.recovery_point) == (0, b.active_segment.base_offset)
    assert [r.getMessage() for r in caplog.records] == [
        "flush of a-0 failed: fsync of a-0 failed: [Errno 5] I/O error"
    ]
    asyncio.run(task.run_once())  # the next round retries a
    assert a.recovery_point == a.active_segment.base_offset
    assert (task.rounds, task.completed) == (2, 2)
    manager.shutdown()


def test_cancelling_a_round_waits_for_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, (log,) = rolled_logs(tmp_path, "a")
    entered, release = threading.Event(), threading.Event()
    plans: list[FlushPlan] = []
    real_execute = FlushPlan.execute

    def execute(plan: FlushPlan) -> None:
        plans.append(plan)
        entered.set()
        assert release.wait(30)
        for fd in plan.descriptors:
            os.fstat(fd)  # still open: nobody closed them under the worker
        real_execute(plan)

    monkeypatch.setattr(FlushPlan, "execute", execute)
    flusher = LogFlushTask(lambda: [log], clock_ms=lambda: 1)

    async def run() -> None:
        task = asyncio.ensure_future(flusher.run_once())
        assert await asyncio.to_thread(entered.wait, 30)
        for _ in range(2):  # stop() cancels once; a second cancel must not cut the wait short either
            task.cancel()
            for _ in range(5):
                await asyncio.sleep(0)
            assert not task.done()
            assert not plans[0].closed
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert plans[0].executed
    assert plans[0].closed
    assert log.recovery_point == 0  # a cancelled round records nothing; the shutdown flush covers it
    manager.shutdown()
    assert log.recovery_point == log.log_end_offset


def test_rounds_over_logs_to_flush_plan_only_the_logs_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17: wired as the broker wires it (``logs_to_flush``), a round plans only the logs a change
    may have made due; a rolled log is flushed to its roll as before, then left alone until it rolls again."""
    manager = LogManager([tmp_path / "d"], SMALL, now_ms=0)  # flush.ms and flush.messages: never
    quiet = [manager.create(f"quiet{i}", 0) for i in range(50)]
    busy = manager.create("busy", 0)
    planned: list[str] = []
    real_plan = PartitionLog.plan_flush

    def plan_flush(log: PartitionLog, now_ms: int) -> FlushPlan | None:
        planned.append(log.dir.name)
        return real_plan(log, now_ms)

    monkeypatch.setattr(PartitionLog, "plan_flush", plan_flush)
    task = LogFlushTask(manager.logs_to_flush, clock_ms=lambda: 1)
    asyncio.run(task.run_once())
    assert planned == []  # nothing was ever due: no log visited
    for seq in range(20):
        busy.append(batch(seq), leader_epoch=0, now_ms=0)
    assert len(busy.segments) > 1
    asyncio.run(task.run_once())
    assert planned == ["busy-0"]
    assert busy.recovery_point == busy.active_segment.base_offset  # the roll flush, as before
    asyncio.run(task.run_once())
    assert planned == ["busy-0"]  # only the active segment is unflushed: nothing due, not visited
    assert all(log.recovery_point == 0 for log in quiet)
    manager.shutdown()
