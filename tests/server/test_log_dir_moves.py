"""LogDirMoves in process: a move's copy steps are throttled by ``replica.alter.log.dirs.io.max.bytes.per.second``
(the task sleeps on the loop as the Throttler says; unlimited: it never sleeps), and the partition serves
the moved log."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, read_everything

from tidelog.protocol.errors import ErrorCode
from tidelog.server.clock import ManualClock
from tidelog.server.log_dir_moves import LogDirMoves
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.log_manager import LogManager


def move_once(tmp_path: Path, rate: float) -> tuple[list[float], bytes, bytes, Path]:
    """Move t-0 from d0 to d1 with ``rate``: (sleeps asked for, bytes before, bytes after, the new dir)."""
    logs = LogManager([tmp_path / "d0", tmp_path / "d1"], SMALL, now_ms=0, node_id=0, cluster_id="c")
    clock = ManualClock()
    replicas = ReplicaManager(logs, clock, node_id=0, metadata=MetadataCache(0, "c"))
    replicas.create("t", 0, SMALL)
    for seq in range(30):
        replicas.append("t", 0, batch(seq), now_ms=clock.now_ms())
    log = logs.get("t", 0)
    assert log is not None
    before = read_everything(log)
    sleeps: list[float] = []
    now_ns = [0]

    def clock_ns() -> int:
        now_ns[0] += 150_000_000  # every look at the clock: 150 ms later
        return now_ns[0]

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def scenario() -> None:
        moves = LogDirMoves(
            replicas, logs, clock, chunk_bytes=500, rate=lambda: rate, sleep=sleep, clock_ns=clock_ns
        )
        assert moves.alter("t", 0, str(tmp_path / "d1")) == ErrorCode.NONE
        await asyncio.gather(*moves.tasks())
        assert moves.moves_completed == 1

    asyncio.run(scenario())
    moved = logs.get("t", 0)
    assert moved is not None
    after = read_everything(moved)
    logs.shutdown(0)
    return sleeps, before, after, moved.dir.parent


def test_a_throttled_move_sleeps_as_the_throttler_says(tmp_path: Path) -> None:
    sleeps, before, after, where = move_once(tmp_path, 1000.0)
    assert where == tmp_path / "d1"
    assert after == before
    # each step copies the whole batches that fit in 500 bytes, and 150 ms pass (the fake clock) before the
    # throttler looks: at 1000 B/s it sleeps (copied - 150) ms
    size = len(batch(0))
    per_step = 500 // size
    assert sleeps[:-1] == [(per_step * size - 150) / 1000] * (math.ceil(30 / per_step) - 1)
    assert 0 < sleeps[-1] <= sleeps[0]


@pytest.mark.parametrize("rate", [float(2**63 - 1)])
def test_an_unlimited_move_never_sleeps(tmp_path: Path, rate: float) -> None:
    sleeps, before, after, where = move_once(tmp_path, rate)
    assert (sleeps, where, after == before) == ([], tmp_path / "d1", True)
