"""LogManager: placement over log dirs, checkpoints, clean-shutdown marker, deletion, locks, fd bound."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, headers, read_everything

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import InconsistentClusterIdError, InvalidTopicError, LogDirError
from tidelog.storage.log_manager import LogManager


def dirs(tmp_path: Path, n: int) -> list[Path]:
    return [tmp_path / f"d{i}" for i in range(n)]


def fill(manager: LogManager, topic: str, partition: int, count: int) -> bytes:
    log = manager.create(topic, partition)
    for seq in range(count):
        log.append(batch(seq), leader_epoch=1, now_ms=seq)
    return log.read(0, 10**9).read_bytes()


def test_new_partitions_go_to_the_dir_with_fewest(tmp_path: Path) -> None:
    d = dirs(tmp_path, 3)
    manager = LogManager(d, SMALL, now_ms=0, node_id=1, cluster_id="c1")
    for p in range(4):
        manager.create("a.topic-x", p)
    assert [manager.get("a.topic-x", p).dir for p in range(4)] == [  # type: ignore[union-attr]
        d[0] / "a.topic-x-0",
        d[1] / "a.topic-x-1",
        d[2] / "a.topic-x-2",
        d[0] / "a.topic-x-3",
    ]
    log = manager.get("a.topic-x", 0)
    assert manager.create("a.topic-x", 0) is log
    assert manager.get("a.topic-x", 9) is None
    assert set(manager.all_logs()) == {TopicPartition("a.topic-x", p) for p in range(4)}
    assert sorted(os.listdir(d[0])) == [".lock", "a.topic-x-0", "a.topic-x-3", "meta.properties"]
    assert "node.id=1\n" in (d[1] / "meta.properties").read_text()
    with pytest.raises(InvalidTopicError):
        manager.create("bad topic", 0)
    manager.shutdown()


def test_shutdown_checkpoints_and_marks_clean_then_restart_trusts(tmp_path: Path) -> None:
    d = dirs(tmp_path, 2)
    manager = LogManager(d, SMALL, now_ms=0, cluster_id="c1")
    data0 = fill(manager, "t", 0, 20)
    fill(manager, "t", 1, 5)
    log0 = manager.get("t", 0)
    assert log0 is not None
    log0.update_high_watermark(45)
    log0.delete_records_before(30)
    manager.shutdown(now_ms=100)
    assert read_offsets_checkpoint(d[0] / "recovery-point-offset-checkpoint") == {TopicPartition("t", 0): 60}
    assert read_offsets_checkpoint(d[1] / "recovery-point-offset-checkpoint") == {TopicPartition("t", 1): 15}
    assert (d[0] / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 30\n"
    assert (d[0] / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 45\n"
    assert (d[0] / ".kafka_cleanshutdown").exists()
    assert (d[1] / ".kafka_cleanshutdown").exists()

    again = LogManager(d, SMALL, now_ms=200)
    assert again.cluster_id == "c1"
    assert again.had_clean_shutdown == {d[0]: True, d[1]: True}
    assert not (d[0] / ".kafka_cleanshutdown").exists()
    log0 = again.get("t", 0)
    assert log0 is not None
    assert (log0.log_start_offset, log0.high_watermark, log0.log_end_offset, log0.recovery_point) == (
        30,
        45,
        60,
        60,
    )
    assert read_everything(log0) == data0[data0.index(read_everything(log0)) :]
    again.close()


def test_unclean_restart_recovers_from_the_checkpointed_recovery_point(tmp_path: Path) -> None:
    d = dirs(tmp_path, 1)
    manager = LogManager(d, SMALL, now_ms=0)
    fill(manager, "t", 0, 10)
    log = manager.get("t", 0)
    assert log is not None
    log.flush()
    manager.checkpoint_recovery_points()
    for seq in range(10, 15):
        log.append(batch(seq), leader_epoch=1, now_ms=0)
    written = log.read(0, 10**9).read_bytes()
    manager.close()  # no flush, checkpoints or marker: as after kill -9
    again = LogManager(d, SMALL, now_ms=0)
    assert again.had_clean_shutdown == {d[0]: False}
    log = again.get("t", 0)
    assert log is not None
    assert (log.recovery_point, log.log_end_offset) == (30, 45)
    assert read_everything(log) == written
    again.shutdown()


def test_damaged_checkpoints_are_warned_about_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = dirs(tmp_path, 1)
    manager = LogManager(d, SMALL, now_ms=0)
    fill(manager, "t", 0, 10)
    log = manager.get("t", 0)
    assert log is not None
    log.flush()
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    written = log.read(0, 10**9).read_bytes()
    manager.close()  # as after kill -9
    names = [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
    ]
    for name in names:
        (d[0] / name).write_bytes(b"0\n1\nt 0 \x9e\n")
    with caplog.at_level(logging.WARNING, logger="tidelog.storage.log_manager"):
        again = LogManager(d, SMALL, now_ms=0)
    consequences = [
        "after an unclean shutdown every log in that dir is recovered from its start",
        "each log in that dir starts at its first segment",
        "the high watermarks of that dir start at the log start offsets",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot read checkpoint {d[0] / name}: 'utf-8' codec can't decode byte 0x9e in position 8: invalid "
        f"start byte; ignoring it: {consequence}"
        for name, consequence in zip(names, consequences, strict=True)
    ]
    log = again.get("t", 0)
    assert log is not None
    assert (log.recovery_point, log.log_start_offset, log.log_end_offset) == (0, 0, 30)
    assert read_everything(log) == written
    again.shutdown()


def test_delete_renames_then_removes_and_leftovers_go_at_start(tmp_path: Path) -> None:
    d = dirs(tmp_path, 1)
    manager = LogManager(d, SMALL, now_ms=0)
    fill(manager, "doomed-topic", 3, 5)
    fill(manager, "kept", 0, 1)
    assert manager.delete("doomed-topic", 3)
    assert not manager.delete("doomed-topic", 3)
    assert manager.get("doomed-topic", 3) is None
    assert sorted(os.listdir(d[0])) == [".lock", "kept-0", "meta.properties"]
    manager.shutdown()
    assert (d[0] / "recovery-point-offset-checkpoint").read_text() == "0\n1\nkept 0 3\n"
    # A crash between the rename and the removal leaves a -delete dir: removed at the next start.
    leftover = d[0] / "doomed-topic-3.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    (d[0] / "not-a-partition").mkdir()
    (d[0] / "recovery-point-offset-checkpoint.tmp").write_text("garbage")
    again = LogManager(d, SMALL, now_ms=0)
    assert not leftover.exists()
    assert set(again.all_logs()) == {TopicPartition("kept", 0)}
    again.close()


def test_a_stray_is_renamed_and_kept_never_loaded_nor_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = dirs(tmp_path, 1)
    manager = LogManager(d, SMALL, now_ms=0)
    data = fill(manager, "ghost", 2, 7)
    fill(manager, "kept", 0, 1)
    stray = manager.mark_stray("ghost", 2)
    assert manager.mark_stray("ghost", 2) is None
    assert stray is not None
    assert stray.parent == d[0]
    assert stray.name.startswith("ghost-2.")
    assert stray.name.endswith("-stray")
    assert manager.get("ghost", 2) is None
    assert set(manager.all_logs()) == {TopicPartition("kept", 0)}
    manager.shutdown()
    # Kept across restarts with its data, not loaded, and named in a warning.
    with caplog.at_level(logging.WARNING, logger="tidelog.storage"):
        again = LogManager(d, SMALL, now_ms=0)
    assert set(again.all_logs()) == {TopicPartition("kept", 0)}
    assert stray.is_dir()
    assert b"".join(p.read_bytes() for p in sorted(stray.glob("*.log"))) == data
    assert any(stray.name in r.getMessage() and "stray" in r.getMessage() for r in caplog.records)
    # A new partition of the same name starts empty beside it.
    assert again.create("ghost", 2).log_end_offset == 0
    again.close()


def test_directories_of_another_cluster_or_in_use_are_refused(tmp_path: Path) -> None:
    d = dirs(tmp_path, 2)
    manager = LogManager(d, SMALL, now_ms=0, cluster_id="first")
    with pytest.raises(LogDirError, match="in use by another process"):
        LogManager(d[1:], SMALL, now_ms=0)
    manager.shutdown()
    with pytest.raises(InconsistentClusterIdError) as info:
        LogManager(d, SMALL, now_ms=0, cluster_id="second")
    assert info.value.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    with pytest.raises(LogDirError, match="belongs to node 0"):
        LogManager(d, SMALL, now_ms=0, node_id=5)
    LogManager(d, SMALL, now_ms=0).close()  # the failed attempts released their locks


def test_a_partition_in_two_dirs_is_refused(tmp_path: Path) -> None:
    d = dirs(tmp_path, 2)
    manager = LogManager(d, SMALL, now_ms=0)
    manager.shutdown()
    (d[0] / "t-0").mkdir()
    (d[1] / "t-0").mkdir()
    with pytest.raises(LogDirError, match="in two log dirs"):
        LogManager(d, SMALL, now_ms=0)


def test_topic_configs_retention_and_flush_tasks(tmp_path: Path) -> None:
    d = dirs(tmp_path, 1)
    short = dataclasses.replace(SMALL, retention_ms=10, file_delete_delay_ms=5, flush_ms=100)
    manager = LogManager(d, SMALL, now_ms=0, topic_config=lambda topic: short if topic == "short" else None)
    fill(manager, "short", 0, 20)
    fill(manager, "long", 0, 20)
    for _, log in manager:
        log.update_high_watermark(log.log_end_offset)
    short_log, long_log = manager.get("short", 0), manager.get("long", 0)
    assert short_log is not None
    assert long_log is not None
    assert short_log.config is short
    assert long_log.config is SMALL
    count = len(short_log.segments)
    assert manager.cleanup_logs(now_ms=10_000_000) == count
    assert any(p.name.endswith(".deleted") for p in short_log.dir.iterdir())
    manager.cleanup_logs(now_ms=10_000_005)
    assert not any(p.name.endswith(".deleted") for p in short_log.dir.iterdir())
    assert len(long_log.segments) > 1
    assert short_log.recovery_point == 0
    manager.flush_dirty_logs(now_ms=10_000_006)
    assert short_log.recovery_point == 60
    # The long topic's rolled segments are flushed; its active segment waits for flush.ms (never).
    assert long_log.recovery_point == long_log.active_segment.base_offset < 60
    manager.update_config("long", short)
    manager.flush_dirty_logs(now_ms=10_000_007)
    assert long_log.recovery_point == 60
    manager.shutdown()


def test_open_descriptors_stay_bounded(tmp_path: Path) -> None:
    d = dirs(tmp_path, 1)
    config = dataclasses.replace(SMALL, segment_bytes=300)
    manager = LogManager(d, config, now_ms=0, max_open_segments=4)
    for topic in ("a", "b", "c"):
        fill(manager, topic, 0, 40)
    manager.shutdown()
    again = LogManager(d, config, now_ms=0, max_open_segments=4)
    segments = sum(len(log.segments) for _, log in again)
    assert segments > 100
    before = len(os.listdir("/proc/self/fd"))
    for _, log in again:
        assert len(read_everything(log)) > 0
    after = len(os.listdir("/proc/self/fd"))
    # Three active segments (log + two mappings each) plus at most four inactive ones.
    assert after - before <= 3 * 4
    assert after < before + segments
    again.shutdown()


def _open_files_under(directory: Path) -> tuple[int, int]:
    """Descriptors and memory maps of this process on files under ``directory``."""
    prefix = str(directory)
    fds = sum(1 for fd in os.listdir("/proc/self/fd") if _readlink(f"/proc/self/fd/{fd}").startswith(prefix))
    with open("/proc/self/maps") as maps:
        mapped = sum(1 for line in maps if prefix in line)
    return fds, mapped


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def test_active_segments_are_bounded_too(tmp_path: Path) -> None:
    """60 partitions, each with an active segment holding index entries: at most ``max_open_segments``
    segments' files are open at any time (four descriptors and two maps each at most), every record is
    there, and a segment released while active takes appends and reads again."""
    d = dirs(tmp_path, 1)
    config = dataclasses.replace(SMALL, index_interval_bytes=0)  # an index entry for every batch
    manager = LogManager(d, config, now_ms=0, max_open_segments=8)
    logs = [manager.create("many", p) for p in range(60)]
    for seq in range(3):
        for i, log in enumerate(logs):
            log.append(batch(seq, value_size=50), leader_epoch=1, now_ms=seq)
            if i % 10 == 0:
                fds, mapped = _open_files_under(d[0])
                assert fds <= 4 * 8
                assert mapped <= 2 * 8
    for log in logs:
        assert [h.base_offset for h in headers(read_everything(log))] == [0, 3, 6]
        assert log.active_segment.offset_index.entries == 2  # none for the first batch of a segment
    fds, mapped = _open_files_under(d[0])
    assert fds <= 4 * 8
    assert mapped <= 2 * 8
    manager.shutdown()
    again = LogManager(d, config, now_ms=0, max_open_segments=8)
    assert [again.get("many", p).log_end_offset for p in range(60)] == [9] * 60  # type: ignore[union-attr]
    again.shutdown()


def test_default_config_and_cluster_id(tmp_path: Path) -> None:
    manager = LogManager([tmp_path / "only"], LogConfig(), now_ms=0)
    assert len(manager.cluster_id) == 22
    assert manager.default_config == LogConfig()
    assert manager.log_dirs == (tmp_path / "only",)
    cluster = manager.cluster_id
    manager.shutdown()
    again = LogManager([tmp_path / "only"], LogConfig(), now_ms=0)
    assert again.cluster_id == cluster
    again.close()


def test_the_periodic_flush_visits_only_logs_that_changed(tmp_path: Path) -> None:
    """Issue 17: ``logs_to_flush`` lists the logs a change may have made due; an idle one leaves the list
    and comes back when a change makes a flush due (a roll, flush.messages, a config); a finite flush.ms
    stays."""
    timed = dataclasses.replace(SMALL, flush_ms=100)
    manager = LogManager(
        dirs(tmp_path, 1), SMALL, now_ms=0, topic_config=lambda t: timed if t == "timed" else None
    )
    quiet, busy, timed_log = manager.create("q", 0), manager.create("b", 0), manager.create("timed", 0)
    assert manager.logs_to_flush() == [timed_log]  # the others are idle: flush.ms never elapses
    busy.append(batch(0), leader_epoch=1, now_ms=1)
    # Unflushed data in the active segment is no flush due (flush.ms and flush.messages never reached).
    assert busy.flush_idle
    assert manager.logs_to_flush() == [timed_log]
    few = dataclasses.replace(SMALL, flush_messages=5)
    manager.update_config("b", few)
    assert manager.logs_to_flush() == [timed_log]  # visited after the change, and idle (3 < 5)
    busy.append(batch(0), leader_epoch=1, now_ms=2)  # 6 unflushed: flushed by the append itself
    assert busy.recovery_point == 6
    manager.update_config("b", SMALL)
    seq = 1
    while len(busy.segments) == 1:  # a roll makes the rolled segments due
        busy.append(batch(seq), leader_epoch=1, now_ms=3)
        seq += 1
    assert busy in manager.logs_to_flush()
    assert busy in manager.logs_to_flush()  # still due until flushed
    assert busy.maybe_flush(now_ms=4)
    assert busy.recovery_point == busy.active_segment.base_offset
    assert manager.logs_to_flush() == [timed_log]
    manager.update_config("q", timed)
    assert quiet in manager.logs_to_flush()
    assert quiet in manager.logs_to_flush()  # flush.ms is finite now: never idle
    manager.delete("q", 0)
    assert quiet not in manager.logs_to_flush()
    manager.shutdown()


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path: Path) -> None:
    d = dirs(tmp_path, 1)
    manager = LogManager(d, SMALL, now_ms=0)
    log = manager.create("t", 0)
    log.append(batch(0), leader_epoch=1, now_ms=1)
    log.flush(now_ms=2)
    path = d[0] / "recovery-point-offset-checkpoint"
    manager.checkpoint_recovery_points()
    written = path.stat().st_ino
    assert read_offsets_checkpoint(path) == {TopicPartition("t", 0): 3}
    manager.checkpoint_recovery_points()
    assert path.stat().st_ino == written  # the same content: not replaced
    path.unlink()  # no one else writes it; proves nothing was written
    manager.checkpoint_recovery_points()
    assert not path.exists()
    log.append(batch(1), leader_epoch=1, now_ms=3)
    manager.checkpoint_recovery_points()  # the recovery point did not move: still nothing to write
    assert not path.exists()
    log.flush(now_ms=4)
    manager.checkpoint_recovery_points()
    assert read_offsets_checkpoint(path) == {TopicPartition("t", 0): 6}
    manager.shutdown()
