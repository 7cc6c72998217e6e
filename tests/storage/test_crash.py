"""kill -9 of a process appending to a log: every append that returned is there, with exactly its data."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.storage.crash_writer import CONFIG, payload

from tidelog.protocol.records import decode_batch, iter_batch_headers
from tidelog.storage.log_manager import LogManager

WRITER = Path(__file__).with_name("crash_writer.py")
REPO = Path(__file__).resolve().parents[2]


def run_and_kill(log_dir: Path, first_seq: int, run_seconds: float) -> list[tuple[int, int]]:
    """Start the writer, SIGKILL it after ``run_seconds`` of appending; the (offset, seq) it acknowledged."""
    with subprocess.Popen(
        [sys.executable, str(WRITER), str(log_dir), str(first_seq)],
        stdout=subprocess.PIPE,
        cwd=REPO,
    ) as child:
        assert child.stdout is not None
        first = child.stdout.readline()  # appending has started
        time.sleep(run_seconds)
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
    assert child.returncode == -signal.SIGKILL
    lines = (first + rest).decode().split("\n")
    acked = [line.split() for line in lines[:-1]]  # the last piece is empty or a line cut by the kill
    return [(int(offset), int(seq)) for offset, seq in acked]


def test_every_acknowledged_append_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(7)
    log_dir = tmp_path / "logs"
    total_acked = 0
    for round_ in range(4):
        acked = run_and_kill(log_dir, round_ * 1_000_000, rng.uniform(0.1, 0.6))
        assert acked, "the writer acknowledged nothing"
        total_acked += len(acked)
        manager = LogManager([log_dir], CONFIG, now_ms=0)
        assert manager.had_clean_shutdown == {log_dir: False}
        log = manager.get("crash", 0)
        assert log is not None
        assert log.log_end_offset >= acked[-1][0] + 1
        for offset, seq in acked:
            data = log.read(offset, 1).read_bytes()
            position, header = next(iter_batch_headers(data))
            assert header.base_offset == offset, (round_, offset, seq)
            stored = data[position : position + header.size_in_bytes]
            expected_header, expected_records = decode_batch(payload(seq))
            got_header, got_records = decode_batch(stored)
            assert [(r.key, r.value, r.timestamp) for r in got_records] == [
                (r.key, r.value, r.timestamp) for r in expected_records
            ]
            assert [r.offset for r in got_records] == list(range(offset, offset + len(expected_records)))
            assert got_header.crc == expected_header.crc
        # The whole log reads back as contiguous batches.
        next_offset = log.log_start_offset
        while next_offset < log.log_end_offset:
            data = log.read(next_offset, 1 << 20).read_bytes()
            for _, header in iter_batch_headers(data):
                assert header.base_offset == next_offset
                next_offset = header.next_offset
        manager.close()
    assert total_acked > 100
