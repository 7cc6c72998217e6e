"""Crash safety of a cleaning, and readers during one.

A crash is simulated at every step of the swap (each rename ``PartitionLog.replace_segments`` makes:
``.cleaned`` -> ``.swap``, old files -> ``.deleted``, ``.swap`` -> live), and while the ``.cleaned`` files are
being written: the process "dies" there (nothing more happens to the files) and the partition directory is
loaded again, after an unclean shutdown, with the recovery point checkpointed either at the log end or at
0. Whatever the step, the recovered log must read back with the same last value per key as before the
cleaning, hold only records that were written, each at its offset, be a superset of what the finished
cleaning leaves, keep everything from the uncleaned boundary on, and leave no ``.cleaned``/``.swap`` file.

A reader that fetches across cleanings never sees a key go back to an older value, and regions handed
out before a swap stay readable after it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.storage.cleaner_support import (
    COMPACT,
    CompactedLog,
    Written,
    compacted,
    latest_values,
    random_updates,
    read_records,
    with_config,
)

from tidelog.protocol.records import decode_batch, iter_batch_headers
from tidelog.storage.cleaner_job import LogCleaningAbortedError
from tidelog.storage.index import _SparseIndex
from tidelog.storage.partition_log import PartitionLog

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _no_fsync() -> Iterator[None]:
    """fsync and msync only matter for power loss; these cases model process crashes: skip their cost."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        patch.setattr(_SparseIndex, "flush", lambda self: None)
        yield


class Crash(Exception):
    """The process died here."""


def build(directory: Path) -> CompactedLog:
    """The same log every time: a few cleanable segments (one cleaned segment each), many updates per key."""
    log = CompactedLog(directory, with_config(COMPACT, file_delete_delay_ms=60_000))
    random_updates(log, random.Random(42), keys=12, records=110, now_ms=NOW, tombstone_share=0.1)
    log.settle(NOW)
    return log


def crash_after(monkeypatch: pytest.MonkeyPatch, steps: int) -> Callable[[], int]:
    """Make the ``steps``-th file rename from now on raise :class:`Crash` instead (counting from 0)."""
    count = 0
    real_replace = Path.replace
    real_rename = os.rename

    def step() -> None:
        nonlocal count
        if count == steps:
            raise Crash(f"crash before rename {steps}")
        count += 1

    def replace(self: Path, target: Any) -> Path:
        step()
        return real_replace(self, target)

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        step()
        real_rename(src, dst, **kwargs)

    monkeypatch.setattr(Path, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    return lambda: count


def reopen(log: CompactedLog, recovery_point: int) -> PartitionLog:
    return PartitionLog.open(
        log.partition_dir, log.config, now_ms=NOW, clean_shutdown=False, recovery_point=recovery_point
    )


def check_recovered(
    recovered: PartitionLog, written: list[Written], boundary: int, before: list[Written]
) -> None:
    records = read_records(recovered)
    assert latest_values(records) == latest_values(before)
    assert set(records) <= set(before)
    assert set(compacted(written, boundary)) <= set(records)
    assert [r for r in records if r[0] >= boundary] == [w for w in written if w[0] >= boundary]
    offsets = [r[0] for r in records]
    assert offsets == sorted(offsets)
    assert not [p.name for p in recovered.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def test_crash_at_every_swap_step_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dry_run = build(tmp_path / "dry-run")
    counter = crash_after(monkeypatch, 10**6)
    assert dry_run.clean(NOW)
    steps = counter()
    monkeypatch.undo()
    dry_run.close()
    # 3+ cleaned segments, each: 3 ``.cleaned`` -> ``.swap``, 4 renames of each old segment's files to
    # ``.deleted`` (``.txnindex`` tried even when absent), 3 ``.swap`` -> live.
    assert steps >= 3 * (3 + 4 + 3)
    for step in range(steps):
        log = build(tmp_path / f"step-{step}")
        before = read_records(log.log)
        boundary = log.log.active_segment.base_offset
        end = log.log.log_end_offset
        crash_after(monkeypatch, step)
        with pytest.raises(Crash):
            log.clean(NOW)
        monkeypatch.undo()
        # Recovery point as checkpointed at the log end, or lost (0): every segment is revalidated.
        recovered = reopen(log, end if step % 2 else 0)
        check_recovered(recovered, log.written, boundary, before)
        records = read_records(recovered)
        recovered.flush(NOW)
        recovered.close()
        again = PartitionLog.open(log.partition_dir, log.config, now_ms=NOW, clean_shutdown=True)
        assert read_records(again) == records
        again.close()


def test_crash_while_writing_cleaned_files_recovers(tmp_path: Path) -> None:
    log = build(tmp_path / "data")
    before = read_records(log.log)
    boundary = log.log.active_segment.base_offset
    cleaning = log.cleaner.grab_filthiest_log(NOW)
    assert cleaning is not None
    polls = 0

    def die_midway() -> bool:
        nonlocal polls
        polls += 1
        if polls == 30:
            raise Crash("killed while cleaning")
        return False

    # The job removes its files when it fails; a SIGKILL does not: write them again without the cleanup.
    with pytest.raises(Crash):
        cleaning.job._run(die_midway)
    cleaning.job.close()
    leftovers = [p.name for p in log.partition_dir.iterdir() if p.name.endswith(".cleaned")]
    assert leftovers
    recovered = reopen(log, log.log.log_end_offset)
    assert read_records(recovered) == before
    check_recovered(recovered, log.written, boundary, before)


def test_aborted_job_leaves_nothing(tmp_path: Path) -> None:
    log = build(tmp_path / "data")
    before = read_records(log.log)
    with pytest.raises(LogCleaningAbortedError):
        log.cleaner.clean_once(NOW, should_abort=lambda: True)
    assert not [p.name for p in log.partition_dir.iterdir() if ".cleaned" in p.name]
    assert read_records(log.log) == before
    assert log.cleaner.uncleanable_partitions == frozenset()
    assert log.clean(NOW)  # an abort does not make the log uncleanable
    log.close()


def test_segments_deleted_during_a_cleaning_are_not_swapped(tmp_path: Path) -> None:
    config = with_config(COMPACT, cleanup_policy="compact,delete", retention_ms=1000)
    log = CompactedLog(tmp_path / "data", config)
    random_updates(log, random.Random(3), keys=10, records=200, now_ms=NOW)
    log.settle(NOW)
    cleaning = log.cleaner.grab_filthiest_log(NOW + 5000)
    assert cleaning is not None
    result = cleaning.job.run()
    log.append([(b"late", b"1")], now_ms=NOW + 5000)
    log.settle(NOW + 5000, roll=True)
    assert log.log.delete_retention(NOW + 5000) > 0  # retention deleted every cleaned segment meanwhile
    assert log.cleaner.complete(cleaning, result, NOW + 5000)
    assert not [p.name for p in log.partition_dir.iterdir() if ".cleaned" in p.name]
    assert read_records(log.log) == [w for w in log.written if w[0] >= log.log.log_start_offset]
    log.close()


def test_truncation_during_a_cleaning_rejects_the_swap(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    random_updates(log, random.Random(4), keys=10, records=200, now_ms=NOW)
    log.settle(NOW)
    cleaning = log.cleaner.grab_filthiest_log(NOW)
    assert cleaning is not None
    result = cleaning.job.run()
    cut = cleaning.segments[-1].base_offset + 1
    log.log.truncate_to(cut, now_ms=NOW)
    assert not log.cleaner.complete(cleaning, result, NOW)
    assert not [p.name for p in log.partition_dir.iterdir() if ".cleaned" in p.name]
    assert log.cleaner.uncleanable_partitions == frozenset()
    assert read_records(log.log) == [w for w in log.written if w[0] < log.log.log_end_offset]
    log.close()


def test_reader_across_cleanings_never_goes_back(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path / "data")
    rng = random.Random(5)
    seen: dict[bytes | None, int] = {}
    position = 0
    for round_ in range(12):
        random_updates(log, rng, keys=15, records=120, now_ms=NOW + round_, tombstone_share=0.05)
        log.settle(NOW + round_)
        # A fetch answered before the cleaning is sent after it (its files may be gone by then).
        held = log.log.read(position, 300)
        log.clean(NOW + round_)
        position = consume(held, seen, log.written)
        for _ in range(3):
            if position < log.log.log_end_offset:
                position = consume(log.log.read(position, 300), seen, log.written)
    while position < log.log.log_end_offset:
        position = consume(log.log.read(position, 10_000), seen, log.written)
    # The reader ends with every key's last write (unless that was a tombstone the cleaner removed).
    last = {key: (offset, value) for offset, key, value in log.written}
    assert {k: o for k, (o, v) in last.items() if v is not None} == {
        k: o for k, o in seen.items() if last[k][1] is not None
    }
    log.close()


def consume(result: Any, seen: dict[bytes | None, int], written: list[Written]) -> int:
    """Decode a fetched result; every record must be as written and newer than what was seen of its key."""
    data = result.read_bytes()
    by_offset = {offset: (key, value) for offset, key, value in written}
    for position, _ in iter_batch_headers(data):
        header, records = decode_batch(data, position)
        if header.is_control:
            continue
        for record in records:
            assert by_offset[record.offset] == (record.key, record.value)
            assert record.offset > seen.get(record.key, -1), f"{record.key!r} went back to {record.offset}"
            seen[record.key] = record.offset
    return int(result.next_offset)
