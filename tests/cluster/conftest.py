"""Fixtures of the failover scenarios: the seed, soak cycles, and a :class:`~tests.cluster.harness.Scenario`.

- The seed is ``--cluster-seed`` / ``TIDELOG_CLUSTER_SEED``, else a fresh random one; cycle ``i`` of a soak
  run uses ``seed + i``. A failing scenario's report names its seed in a section of its own.
- ``--cluster-soak N`` / ``TIDELOG_CLUSTER_SOAK=N`` runs every scenario N times (``[cycle-i]`` ids).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cluster.checker import seed_banner
from tests.cluster.harness import Scenario

_BASE_SEED: int | None = None


def _base_seed(config: pytest.Config) -> int:
    global _BASE_SEED
    if _BASE_SEED is None:
        given = config.getoption("--cluster-seed", None) or os.environ.get("TIDELOG_CLUSTER_SEED")
        _BASE_SEED = int(given) if given is not None else random.SystemRandom().randrange(1, 1_000_000)
    return _BASE_SEED


def _soak(config: pytest.Config) -> int:
    given = config.getoption("--cluster-soak", None) or os.environ.get("TIDELOG_CLUSTER_SOAK") or 1
    return max(1, int(given))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cycles = _soak(metafunc.config)
    if "soak_cycle" in metafunc.fixturenames and cycles > 1:
        metafunc.parametrize("soak_cycle", range(cycles), ids=[f"cycle-{i}" for i in range(cycles)])


@pytest.fixture
def soak_cycle() -> int:
    """Which cycle of a soak run this is (0 when not soaking)."""
    return 0


@pytest.fixture
def cluster_seed(request: pytest.FixtureRequest, soak_cycle: int) -> int:
    seed = _base_seed(request.config) + soak_cycle
    request.node.user_properties.append(("cluster_seed", seed))
    print(seed_banner(seed))
    return seed


@pytest.fixture
def scenario(cluster_seed: int, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Scenario]:
    """A scenario whose cluster the test starts (``scenario.start(config=...)``); closed afterwards. The
    cluster's directories (broker logs included) stay in ``tmp_path`` for a post-mortem."""
    instance = Scenario(cluster_seed, tmp_path, request.node.name)
    try:
        yield instance
    finally:
        instance.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:  # type: ignore[attr-defined]
        for name, value in item.user_properties:
            if name == "cluster_seed":
                report.sections.append(("cluster seed", seed_banner(int(value))))  # type: ignore[attr-defined]
    return report
