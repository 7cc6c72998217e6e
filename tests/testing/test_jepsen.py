"""The Jepsen checker against a real broker: idempotent producers of confluent-kafka, kafka-python and
aiokafka, a transactional producer and two consumers, while the broker is killed with SIGKILL and frozen
with SIGSTOP at seeded moments; the analysis must find no anomaly.

CI runs two fault cycles; ``--soak`` runs 100. The seed is random unless ``TIDELOG_JEPSEN_SEED`` is set,
and a failure's message starts with it and the command that repeats the run.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tidelog.testing.jepsen import RunConfig, run

pytestmark = [pytest.mark.clients, pytest.mark.timeout(900)]


def seed() -> int:
    chosen = os.environ.get("TIDELOG_JEPSEN_SEED")
    return int(chosen) if chosen else random.SystemRandom().randrange(1 << 31)


def check(tmp_path: Path, cycles: int) -> None:
    config = RunConfig(seed=seed(), cycles=cycles, quiet=(0.2, 0.8))
    print(f"jepsen seed {config.seed}: rerun with TIDELOG_JEPSEN_SEED={config.seed}")
    report = run(config, data_dir=tmp_path / "data", history_path=tmp_path / "history.jsonl")
    assert report.ok, report.render()
    assert report.stats["acknowledged"] > 0, report.render()
    assert report.stats["read"] > 0, report.render()
    assert report.stats["transactions"] > 0, report.render()
    assert len(report.faults) == 2 * cycles, report.render()


def test_no_anomaly_across_kill9_and_sigstop(tmp_path: Path) -> None:
    check(tmp_path, cycles=2)


@pytest.mark.soak
def test_no_anomaly_across_100_fault_cycles(tmp_path: Path) -> None:
    check(tmp_path, cycles=100)
