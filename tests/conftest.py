"""Shared pytest setup: hypothesis profiles, a socket-leak fix for kafka-python
(:mod:`tests.support.kafka_python_fixes`).

``HYPOTHESIS_PROFILE`` selects one: ``default`` (quick, used by ``make test``), ``thorough``
(many more examples, for local soak runs). Tests that need fewer examples than the profile set
``max_examples`` themselves.

Soaks: a test marked ``soak`` runs only with ``--soak`` (or ``TIDELOG_SOAK=1``); CI leaves them out and
runs the same code at its small CI size instead.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from tests.support.kafka_python_fixes import close_sockets_of_failed_connects

close_sockets_of_failed_connects()

settings.register_profile(
    "default",
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    """The failover scenarios' options (tests/cluster); here so that a whole-suite run accepts them too."""
    group = parser.getgroup("tidelog cluster scenarios")
    group.addoption(
        "--cluster-seed",
        type=int,
        default=None,
        help="seed of the failover scenarios' randomness (default: env TIDELOG_CLUSTER_SEED, else random)",
    )
    group.addoption(
        "--cluster-soak",
        type=int,
        default=None,
        help="run each failover scenario N times, seeds seed, seed+1, ... (default: env TIDELOG_CLUSTER_SOAK, else 1)",
    )
    parser.getgroup("tidelog soaks").addoption(
        "--soak",
        action="store_true",
        default=os.environ.get("TIDELOG_SOAK", "") not in ("", "0"),
        help="also run the tests marked soak (long fault loops, large volumes; env TIDELOG_SOAK=1)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``soak`` are skipped unless ``--soak`` is given."""
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak: run with --soak or TIDELOG_SOAK=1")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(skip)
