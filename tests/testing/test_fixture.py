"""tidelog.testing: a real broker subprocess, its lifecycle (kill, restart, pause) and the pytest fixtures."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

import tidelog.testing
import tidelog.testing.plugin
from tidelog.testing import Broker, BrokerError

pytestmark = pytest.mark.clients


def _connects(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10_000})
    errors: list[object] = []
    for value in values:
        producer.produce(
            topic, value=value, on_delivery=lambda err, _msg: errors.append(err) if err else None
        )
    assert producer.flush(15) == 0
    assert errors == []


def _consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fixture-test", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


# ---- the context manager ---------------------------------------------------------------------------


def test_context_manager_runs_a_real_broker_and_cleans_up() -> None:
    with tidelog.testing.broker({"num.partitions": 2, "auto.create.topics.enable": True}) as b:
        assert re.fullmatch(r"127\.0\.0\.1:\d+", b.bootstrap_servers)
        assert b.port > 0
        assert b.is_running
        assert _connects(b.bootstrap_servers)
        assert b.data_dir.is_dir()
        assert "--set" in b.command(b.port)
        pid, data_dir, log_path = b.pid, b.data_dir, b.log_path
        assert log_path.exists()
    assert not b.is_running
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not data_dir.exists()
    assert not log_path.exists()


def test_a_given_data_dir_is_kept(tmp_path: Path) -> None:
    with tidelog.testing.broker(data_dir=tmp_path / "d") as b:
        assert b.data_dir == tmp_path / "d"
    assert (tmp_path / "d").is_dir()


def test_broker_that_dies_at_startup_reports_its_output_at_once() -> None:
    started = time.monotonic()
    with (
        pytest.raises(BrokerError) as info,
        tidelog.testing.broker({"num.partitions": 0}, startup_timeout=60),
    ):
        pass
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert "exited with code 2 before it was ready" in message
    assert "Invalid value 0 for configuration num.partitions: Value must be at least 1" in message
    assert "Traceback" not in message


@pytest.mark.parametrize("key", ["listeners", "log.dirs", "log.dir"])
def test_reserved_config_keys_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match=f"pass {re.escape(key)} through Broker"):
        Broker({key: "x"})


def test_bootstrap_servers_before_start_is_an_error() -> None:
    instance = Broker()
    try:
        with pytest.raises(RuntimeError, match="has not been started"):
            _ = instance.bootstrap_servers
    finally:
        instance.close()


def test_stop_is_graceful_and_idempotent() -> None:
    instance = Broker().start()
    try:
        assert instance.terminate() == 0
        assert instance.stop() == 0
        assert not instance.is_running
    finally:
        instance.close()


def test_kill_then_restart_keeps_port_and_acknowledged_data() -> None:
    with tidelog.testing.broker({"auto.create.topics.enable": True}) as b:
        port = b.port
        _produce(b.bootstrap_servers, "durable", [b"one", b"two", b"three"])
        assert b.kill() == -signal.SIGKILL
        assert not b.is_running
        assert not _connects(b.bootstrap_servers)
        b.restart()
        assert b.port == port
        assert b.starts == 2
        assert _consume_all(b.bootstrap_servers, "durable", 3) == [b"one", b"two", b"three"]
        assert b.log_tail().count("---- tidelog.testing: start #") == 2


def test_restart_takes_a_fresh_port_when_the_old_one_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    import tidelog.testing._broker as broker_module

    monkeypatch.setattr(broker_module, "_RESTART_SAME_PORT_SECONDS", 0.5)
    with tidelog.testing.broker() as b:
        port = b.port
        b.stop()
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            b.restart()
            assert b.port != port
            assert _connects(b.bootstrap_servers)


def test_pause_and_resume() -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with tidelog.testing.broker() as b:
        b.pause()
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        with pytest.raises(KafkaException, match=r"(?i)transport|timed out"):
            admin.list_topics(timeout=1.5)
        b.resume()
        assert admin.list_topics(timeout=10).brokers
        b.pause()  # stop() must still manage a paused broker
        assert b.stop() == 0


def _process_state(pid: int) -> str:
    """The one-letter state in /proc/PID/stat: T when stopped by SIGSTOP."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_paused_block_freezes_the_broker_and_always_resumes_it() -> None:
    from confluent_kafka.admin import AdminClient

    with tidelog.testing.broker() as b:
        assert b.pid is not None
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        assert admin.list_topics(timeout=10).brokers
        started = time.monotonic()
        with b.paused(seconds=1.0) as same:
            assert same is b
            assert b.is_paused
            assert _process_state(b.pid) == "T"
        assert time.monotonic() - started >= 1.0
        assert not b.is_paused
        assert _process_state(b.pid) != "T"
        assert admin.list_topics(timeout=10).brokers

        states: list[str] = []

        def fail_while_paused() -> None:
            with b.paused(seconds=60):
                states.append(_process_state(b.pid or 0))
                raise LookupError("in the block")

        started = time.monotonic()
        with pytest.raises(LookupError, match="in the block"):
            fail_while_paused()
        assert states == ["T"]
        assert time.monotonic() - started < 60  # resumed at once, not after the minimum
        assert not b.is_paused
        assert _process_state(b.pid) != "T"

        b.pause()
        b.restart()  # restart stops a paused broker gracefully (SIGCONT, then SIGTERM)
        assert not b.is_paused
        assert admin.list_topics(timeout=10).brokers
        b.pause()
        assert b.kill() == -signal.SIGKILL
        assert not b.is_paused


def test_leftover_brokers_are_killed_when_the_interpreter_exits(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import tidelog.testing
        b = tidelog.testing.Broker(data_dir={str(tmp_path / "d")!r}).start()
        print(b.pid, flush=True)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(result.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the broker outlived the interpreter that started it")


# ---- pytest fixtures ---------------------------------------------------------------------------------


def test_plugin_defines_fixtures_only() -> None:
    assert not [name for name in vars(tidelog.testing.plugin) if name.startswith("pytest_")]


@pytest.fixture
def tidelog_broker_config() -> Mapping[str, object]:
    return {"num.partitions": 3, "auto.create.topics.enable": True}


def test_tidelog_broker_fixture(tidelog_broker: Broker, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    assert tidelog_broker.data_dir == tmp_path / "tidelog-data"
    assert tidelog_broker.config == {"num.partitions": "3", "auto.create.topics.enable": "true"}
    _produce(tidelog_broker.bootstrap_servers, "auto", [b"x"])
    metadata = AdminClient({"bootstrap.servers": tidelog_broker.bootstrap_servers}).list_topics(timeout=10)
    assert len(metadata.topics["auto"].partitions) == 3


def test_tidelog_broker_factory(tidelog_broker_factory: Callable[..., Broker]) -> None:
    first = tidelog_broker_factory()
    second = tidelog_broker_factory({"num.partitions": 2})
    assert first.bootstrap_servers != second.bootstrap_servers
    assert first.data_dir != second.data_dir
    assert _connects(first.bootstrap_servers)
    assert _connects(second.bootstrap_servers)


def test_fixtures_in_a_users_test_session(tmp_path: Path) -> None:
    """The entry-point plugin as a user gets it: their own pytest run, their own conftest override."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture(scope="session")
            def tidelog_broker_session_config():
                return {"num.partitions": 4}
            """
        )
    )
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import socket

            def connect(b):
                host, _, port = b.bootstrap_servers.rpartition(":")
                socket.create_connection((host, int(port)), timeout=5).close()

            def test_one(tidelog_broker, tidelog_broker_session):
                connect(tidelog_broker)
                connect(tidelog_broker_session)
                assert tidelog_broker_session.config == {"num.partitions": "4"}

            def test_two(tidelog_broker_session, tidelog_broker_factory):
                connect(tidelog_broker_session)
                connect(tidelog_broker_factory())
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
