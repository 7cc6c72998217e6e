"""pytest plugin for tidelog.testing (registered through the pytest11 entry point).

Only fixtures, no hooks: nothing happens unless a test asks for one of them.

- ``tidelog_broker``: a fresh broker per test, its data in the test's ``tmp_path``.
- ``tidelog_broker_session``: one broker shared by the whole session.
- ``tidelog_broker_factory``: ``start(config=None, **Broker kwargs) -> Broker``, for several brokers
  in one test; all are stopped at the end of the test.
- ``tidelog_broker_config`` / ``tidelog_broker_session_config``: the broker configs (Kafka names) the two
  broker fixtures use; override them in a ``conftest.py`` or test module.
- ``tidelog_cluster``: ZooKeeper and three brokers (``tidelog_cluster_config`` configures them), with
  ``kill``, ``restart``, ``pause``, ``expire_session`` (:class:`tidelog.testing.Cluster`).
- ``tidelog_zookeeper``: a fresh standalone ZooKeeper per test (Debian's jar, data in the test's ``tmp_path``);
  ``.connect_string`` is Kafka's ``zookeeper.connect``. A machine without java or the jar fails the test
  with the install hint (``scripts/setup.sh test``).

The broker's output stays in ``<tmp_path>/tidelog-run/broker.log`` (ZooKeeper's in
``<tmp_path>/zookeeper-run/zookeeper.log``) for a failing test's post-mortem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

from tidelog.testing._broker import Broker, ConfigValue
from tidelog.testing._cluster import Cluster
from tidelog.testing._zookeeper import ZooKeeper

__all__ = [
    "tidelog_broker",
    "tidelog_broker_config",
    "tidelog_broker_factory",
    "tidelog_broker_session",
    "tidelog_broker_session_config",
    "tidelog_cluster",
    "tidelog_cluster_config",
    "tidelog_zookeeper",
]


@pytest.fixture
def tidelog_broker_config() -> Mapping[str, ConfigValue]:
    """Broker configs for ``tidelog_broker`` (override this fixture to change them)."""
    return {}


@pytest.fixture(scope="session")
def tidelog_broker_session_config() -> Mapping[str, ConfigValue]:
    """Broker configs for ``tidelog_broker_session`` (override this fixture to change them)."""
    return {}


@pytest.fixture
def tidelog_broker(tidelog_broker_config: Mapping[str, ConfigValue], tmp_path: Path) -> Iterator[Broker]:
    """A running tidelog broker for this test; ``.bootstrap_servers`` is where clients connect."""
    with Broker(
        tidelog_broker_config, data_dir=tmp_path / "tidelog-data", run_dir=tmp_path / "tidelog-run"
    ) as running:
        yield running


@pytest.fixture(scope="session")
def tidelog_broker_session(
    tidelog_broker_session_config: Mapping[str, ConfigValue], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Broker]:
    """One tidelog broker for the whole test session (tests share its topics: use unique names)."""
    base = tmp_path_factory.mktemp("tidelog-session")
    with Broker(tidelog_broker_session_config, data_dir=base / "data", run_dir=base / "run") as running:
        yield running


class _BrokerOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Broker` besides its config."""

    data_dir: Path | str | None
    port: int
    host: str
    startup_timeout: float
    stop_timeout: float
    python: str | None
    env: Mapping[str, str] | None
    run_dir: Path | str | None


@pytest.fixture
def tidelog_broker_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start any number of brokers: ``tidelog_broker_factory({"num.partitions": 3})``."""
    started: list[Broker] = []

    def start(config: Mapping[str, ConfigValue] | None = None, **kwargs: Unpack[_BrokerOptions]) -> Broker:
        n = len(started)
        kwargs.setdefault("data_dir", tmp_path / f"tidelog-data-{n}")
        kwargs.setdefault("run_dir", tmp_path / f"tidelog-run-{n}")
        instance = Broker(config, **kwargs)
        started.append(instance)
        return instance.start()

    yield start
    for instance in reversed(started):
        instance.close()


@pytest.fixture
def tidelog_zookeeper(tmp_path: Path) -> Iterator[ZooKeeper]:
    """A running standalone ZooKeeper for this test; ``.connect_string`` is where clients connect."""
    with ZooKeeper(data_dir=tmp_path / "zookeeper-data", run_dir=tmp_path / "zookeeper-run") as running:
        yield running


@pytest.fixture
def tidelog_cluster_config() -> dict[str, ConfigValue]:
    """Broker configs for every broker of ``tidelog_cluster`` (override this fixture to change them)."""
    return {}


@pytest.fixture
def tidelog_cluster(tmp_path: Path, tidelog_cluster_config: dict[str, ConfigValue]) -> Iterator[Cluster]:
    """A running 3-broker cluster (ZooKeeper and brokers 1-3) for this test, with its fault injection."""
    with Cluster(3, config=tidelog_cluster_config, data_dir=tmp_path / "cluster") as running:
        yield running
