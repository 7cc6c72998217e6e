"""Fixtures for tests that drive a real tidelog broker process with real Kafka clients.

- ``broker``: one broker per test module (``BROKER_CONFIG`` in the module adds broker configs).
- ``fresh_broker``: one broker per test, for tests that restart, kill or reconfigure it.
- ``topic``: a topic name unique to the test.

The brokers are ``tidelog.testing.Broker`` subprocesses on 127.0.0.1 with a temporary data dir. Every
broker is checked when its fixture ends: the process must still be running (it never died on its own), it
must stop gracefully on SIGTERM with exit code 0, and its log must hold no traceback and no ERROR line (an
exception escaping a handler is a broker bug even when the client coped).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.testing import Broker


def broker_problems(broker: Broker) -> list[str]:
    """Log lines showing that an exception escaped somewhere in the broker (always a bug)."""
    try:
        text = broker.log_path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if "Traceback" in line or "level=ERROR" in line]


def finish_broker(broker: Broker) -> None:
    """The end-of-fixture check above (running, stops with 0 on SIGTERM, no errors logged), then close."""
    try:
        if not broker.is_running:
            pytest.fail(f"broker process was not running at the end of the test:\n{broker.log_tail()}")
        code = broker.stop(timeout=30)
        assert code == 0, f"broker exit code {code} on SIGTERM:\n{broker.log_tail()}"
        problems = broker_problems(broker)
        assert not problems, "broker logged errors:\n" + "\n".join(problems[:20]) + "\n" + broker.log_tail(80)
    finally:
        broker.close()


def _config(request: pytest.FixtureRequest) -> dict[str, str]:
    return {k: str(v) for k, v in getattr(request.module, "BROKER_CONFIG", {}).items()}


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("broker")
    process = Broker(_config(request), data_dir=workdir / "data", run_dir=workdir / "run")
    process.start()
    try:
        yield process
    finally:
        finish_broker(process)


@pytest.fixture
def fresh_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    process = Broker(_config(request), data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    process.start()
    try:
        yield process
    finally:
        finish_broker(process)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A legal topic name derived from the test's name (unique within a module's broker)."""
    name = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")
    return f"t-{name}"[:200]
