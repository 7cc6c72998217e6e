"""Moving a replica between log dirs: the future log's copy, the swap, and a crash at every rename."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, read_everything

from tidelog.storage.checkpoint import fsync_dir as fsync_dir_real
from tidelog.storage.future_log_copy import copy_step
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog


class Crash(BaseException):
    """Stands for the process dying at that line (nothing after it runs)."""


def manager(tmp_path: Path) -> LogManager:
    return LogManager([tmp_path / "d0", tmp_path / "d1"], SMALL, now_ms=0, node_id=1, cluster_id="c1")


def fill(log: PartitionLog, first: int, count: int) -> None:
    for seq in range(first, first + count):
        log.append(batch(seq), leader_epoch=0, now_ms=seq)


def copy_all(current: PartitionLog, future: PartitionLog) -> int:
    steps = 0
    while copy_step(current, future, max_bytes=500, now_ms=0):
        steps += 1
    return steps


def test_copy_catches_up_and_swap_moves_the_log(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    current = logs.create("t", 0)
    assert current.dir == tmp_path / "d0" / "t-0"
    fill(current, 0, 40)
    current.update_high_watermark(current.log_end_offset)
    current.delete_records_before(7, now_ms=0)
    future = logs.create_future("t", 0, tmp_path / "d1", now_ms=0)
    assert future.dir.name.startswith("t-0.")
    assert future.dir.name.endswith("-future")
    assert copy_all(current, future) > 3  # batches, in several steps
    fill(current, 40, 5)  # appends go on while it copies
    current.update_high_watermark(current.log_end_offset)
    copy_all(current, future)
    expected = read_everything(current, 7)
    moved = logs.replace_current_with_future("t", 0, now_ms=0)
    assert moved.dir == tmp_path / "d1" / "t-0"
    assert logs.get("t", 0) is moved
    assert logs.future("t", 0) is None
    assert read_everything(moved, 7) == expected
    assert moved.log_start_offset == 7
    assert moved.high_watermark == moved.log_end_offset == 135
    assert sorted(p.name for p in (tmp_path / "d0").iterdir() if p.is_dir()) == []
    assert sorted(p.name for p in (tmp_path / "d1").iterdir() if p.is_dir()) == ["t-0"]
    fill(moved, 45, 1)
    logs.shutdown(0)
    again = manager(tmp_path)
    reopened = again.get("t", 0)
    assert reopened is not None
    assert reopened.dir == tmp_path / "d1" / "t-0"
    assert read_everything(reopened, 7)[: len(expected)] == expected
    assert reopened.log_end_offset == 138
    again.close()


def test_a_future_left_by_a_stop_is_copied_on_after_restart(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    current = logs.create("t", 0)
    fill(current, 0, 20)
    future = logs.create_future("t", 0, tmp_path / "d1", now_ms=0)
    copy_step(current, future, max_bytes=500, now_ms=0)
    logs.close()  # a crash mid-copy
    again = manager(tmp_path)
    current2, future2 = again.get("t", 0), again.future("t", 0)
    assert current2 is not None
    assert future2 is not None
    assert future2.dir == future.dir
    assert 0 < future2.log_end_offset < current2.log_end_offset
    copy_all(current2, future2)
    expected = read_everything(current2)
    moved = again.replace_current_with_future("t", 0, now_ms=0)
    assert moved.dir == tmp_path / "d1" / "t-0"
    assert read_everything(moved) == expected
    again.close()


def test_deleting_a_partition_removes_its_future(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    fill(logs.create("t", 0), 0, 3)
    future = logs.create_future("t", 0, tmp_path / "d1", now_ms=0)
    assert logs.delete("t", 0)
    assert not future.dir.exists()
    assert logs.future("t", 0) is None
    logs.close()


@pytest.mark.parametrize(
    "crash_at", ["first rename", "first fsync", "second rename", "second fsync", "rmtree"]
)
def test_a_crash_at_any_point_of_the_swap_leaves_one_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    logs = manager(tmp_path)
    current = logs.create("t", 0)
    fill(current, 0, 30)
    expected = read_everything(current)
    future = logs.create_future("t", 0, tmp_path / "d1", now_ms=0)
    copy_all(current, future)
    calls = {"rename": 0, "fsync_dir": 0}
    real_rename, real_fsync = os.rename, fsync_dir_real

    def rename(src: Path, dst: Path) -> None:
        calls["rename"] += 1
        if crash_at == ("first rename" if calls["rename"] == 1 else "second rename"):
            raise Crash
        real_rename(src, dst)

    def fsync_dir(path: Path) -> None:
        calls["fsync_dir"] += 1
        real_fsync(path)
        if crash_at == ("first fsync" if calls["fsync_dir"] == 1 else "second fsync"):
            raise Crash

    def rmtree(path: Path, ignore_errors: bool = False) -> None:
        raise Crash

    monkeypatch.setattr("os.rename", rename)
    monkeypatch.setattr("tidelog.storage.log_manager.fsync_dir", fsync_dir)
    monkeypatch.setattr("shutil.rmtree", rmtree)
    with pytest.raises(Crash):
        logs.replace_current_with_future("t", 0, now_ms=0)
    monkeypatch.undo()
    logs.close()  # the process died: locks go, nothing is flushed or checkpointed
    again = manager(tmp_path)
    log = again.get("t", 0)
    assert log is not None
    assert read_everything(log) == expected
    committed = crash_at != "first rename"
    assert log.dir == tmp_path / ("d1" if committed else "d0") / "t-0"
    live = [p for d in ("d0", "d1") for p in (tmp_path / d).iterdir() if p.is_dir()]
    if committed:
        assert [p.name for p in live] == ["t-0"]
    else:
        assert len(live) == 2  # the current and its future, still moving
    if not committed:
        future2 = again.future("t", 0)
        assert future2 is not None
        assert future2.log_end_offset == log.log_end_offset
    again.close()
