"""The structure-aware wire fuzzer against a live broker (tidelog.testing.wire_fuzz_run).

CI sends 20,000 frames (every advertised key and version, unadvertised ones, mutations, lying lengths,
truncated and oversize frames, random tagged fields) from a fixed seed, or from ``TIDELOG_FUZZ_SEED``; the
soak sends 10^6. Each asserts: no probe went unanswered (no stall), the broker is alive and serves a
confluent-kafka round trip, its RSS is back within 64 MiB of where it started, and its log holds no
traceback and no ERROR line. The seed is in every failure message.
"""

from __future__ import annotations

import os

import pytest

from tidelog.testing.wire_fuzz_run import fuzz_own_broker

pytestmark = [pytest.mark.clients]

SEED = int(os.environ.get("TIDELOG_FUZZ_SEED", "17"))


def _run(frames: int) -> None:
    report = fuzz_own_broker(frames=frames, seed=SEED)
    assert report.frames == frames, f"seed {SEED}: {report.summary()}"
    assert not report.stalls, f"seed {SEED}: stalled bursts {report.stalls[:3]}; {report.summary()}"
    assert not report.problems, f"seed {SEED}: {report.summary()}"


@pytest.mark.timeout(150)
def test_twenty_thousand_fuzzed_frames() -> None:
    _run(20_000)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_a_million_fuzzed_frames() -> None:
    _run(1_000_000)
