"""Listeners over real sockets: every client listener is bound on its own socket and answers with its own
advertised endpoint (Kafka's rule: a broker is described to a client by its endpoint on the listener the
client's connection came in on).

- Two PLAINTEXT-mapped listeners (one advertised under another name): Metadata, DescribeCluster and
  FindCoordinator on each connection name that listener's endpoint; a confluent-kafka producer bootstrapped
  on the advertised one is told that endpoint and delivers through it.
- A wildcard or empty host is bound on every interface and advertised as the machine's canonical host
  name, never as a wildcard; port 0 is advertised as the port actually bound.
- A controller listener is never bound, and the ready file names the first client listener.
- A listener that cannot be bound stops the start with an error naming it, and leaves no socket bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient
from tests.server.inprocess import make_broker

from tidelog.client.wire import WireClient
from tidelog.protocol.messages import DescribeClusterRequest, FindCoordinatorRequest, MetadataRequest
from tidelog.server.broker import Broker
from tidelog.server.config.listeners import WILDCARD_HOSTS
from tidelog.server.listeners import ListenerBindError, canonical_hostname

pytestmark = [pytest.mark.timeout(120)]

TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "advertised.listeners": "EXTERNAL://localhost:0",
}


@contextlib.asynccontextmanager
async def serving(data: Path, settings: dict[str, str]) -> AsyncIterator[Broker]:
    broker = make_broker(data, topic=None, **{"offsets.topic.num.partitions": "1", **settings})
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


def endpoints_told(port: int) -> dict[str, list[tuple[int, str, int]]]:
    """(node id, host, port) of the brokers a client connected to 127.0.0.1:``port`` is told about."""
    with WireClient("127.0.0.1", port, timeout=30) as client:
        metadata = client.call(MetadataRequest(topics=[]))
        cluster = client.call(DescribeClusterRequest())
        coordinators = client.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]))
        legacy_coordinator = client.call(FindCoordinatorRequest(key="g"), 3)
    return {
        "Metadata": [(b.node_id, b.host, b.port) for b in metadata.brokers],
        "DescribeCluster": [(b.broker_id, b.host, b.port) for b in cluster.brokers],
        "FindCoordinator": [(c.node_id, c.host, c.port) for c in coordinators.coordinators],
        "FindCoordinator v3": [
            (legacy_coordinator.node_id, legacy_coordinator.host, legacy_coordinator.port)
        ],
    }


def told_everywhere(host: str, port: int) -> dict[str, list[tuple[int, str, int]]]:
    return {
        api: [(1, host, port)]
        for api in ("Metadata", "DescribeCluster", "FindCoordinator", "FindCoordinator v3")
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def bindable(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (we can bind it ourselves)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_each_listener_answers_with_its_own_advertised_endpoint(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, TWO_LISTENERS) as broker:
            bound = {listener.name: listener.port for listener in broker.bound_listeners}
            assert list(bound) == ["INTERNAL", "EXTERNAL"]
            internal, external = bound["INTERNAL"], bound["EXTERNAL"]
            assert 0 not in (internal, external)
            assert internal != external
            assert (broker.host, broker.port) == ("127.0.0.1", internal)  # what the ready file gets

            assert await asyncio.to_thread(endpoints_told, internal) == told_everywhere("127.0.0.1", internal)
            assert await asyncio.to_thread(endpoints_told, external) == told_everywhere("localhost", external)

    asyncio.run(scenario())


def confluent_brokers_and_delivery(
    bootstrap: str, topic: str
) -> tuple[dict[int, tuple[str, int]], list[int]]:
    """The brokers confluent-kafka is told about, and the offsets of two messages it delivers."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    brokers = {b.id: (b.host, b.port) for b in admin.list_topics(timeout=30).brokers.values()}
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    offsets: list[int] = []

    def delivered(error: confluent_kafka.KafkaError | None, message: confluent_kafka.Message) -> None:
        assert error is None, error
        offset = message.offset()
        assert offset is not None
        offsets.append(offset)

    for value in (b"one", b"two"):
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(30) == 0
    return brokers, offsets


@pytest.mark.clients
def test_a_real_client_follows_the_advertised_endpoint_of_its_listener(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, TWO_LISTENERS) as broker:
            bound = {listener.name: listener.port for listener in broker.bound_listeners}
            for name, host, topic in (
                ("EXTERNAL", "localhost", "via-external"),
                ("INTERNAL", "127.0.0.1", "via-internal"),
            ):
                brokers, offsets = await asyncio.to_thread(
                    confluent_brokers_and_delivery, f"127.0.0.1:{bound[name]}", topic
                )
                assert brokers == {1: (host, bound[name])}
                assert offsets == [0, 1]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "settings",
    [
        {"listeners": "PLAINTEXT://0.0.0.0:0"},
        {"listeners": "PLAINTEXT://:0"},
        {"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "PLAINTEXT://:0"},
    ],
    ids=["wildcard", "empty-host", "advertised-empty-host"],
)
def test_a_wildcard_host_is_advertised_as_the_canonical_host_name(
    tmp_path: Path, settings: dict[str, str]
) -> None:
    hostname = canonical_hostname()
    assert hostname not in WILDCARD_HOSTS

    async def scenario() -> None:
        async with serving(tmp_path, settings) as broker:
            [listener] = broker.bound_listeners
            assert listener.port != 0
            assert listener.advertised == (hostname, listener.port)
            assert await asyncio.to_thread(endpoints_told, listener.port) == told_everywhere(
                hostname, listener.port
            )

    asyncio.run(scenario())


def test_a_listener_that_cannot_bind_stops_the_start_and_leaves_nothing_bound(tmp_path: Path) -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            busy = taken.getsockname()[1]
            free = free_port()
            broker = make_broker(
                tmp_path,
                topic=None,
                **{
                    "listeners": f"INTERNAL://127.0.0.1:{free},EXTERNAL://127.0.0.1:{busy}",
                    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                },
            )
            try:
                with pytest.raises(ListenerBindError) as info:
                    await broker.start()
            finally:
                broker.logs.shutdown(broker.clock.now_ms())
            assert str(info.value).startswith(f"cannot listen on EXTERNAL://127.0.0.1:{busy}: ")
            assert info.value.listener.name == "EXTERNAL"
            assert broker.bound_listeners == []
            assert bindable(free)  # INTERNAL's socket, bound first, was closed again

    asyncio.run(scenario())


def wait_for_file(path: Path, process: subprocess.Popen[bytes], limit_s: float = 60.0) -> str:
    deadline = time.monotonic() + limit_s
    while True:
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text()
            if text.endswith("\n"):
                return text.strip()
        assert process.poll() is None, f"broker exited with {process.returncode}"
        assert time.monotonic() < deadline, f"{path} was not written within {limit_s} s"
        time.sleep(0.02)


def test_a_controller_listener_is_not_bound_and_the_ready_file_names_the_first_client_listener(
    tmp_path: Path,
) -> None:
    controller = free_port()
    ready = tmp_path / "ready"
    settings = {
        "listeners": f"CONTROLLER://127.0.0.1:{controller},PLAINTEXT://127.0.0.1:0",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(tmp_path / "data"),
    }
    command = [sys.executable, "-m", "tidelog", "broker", "--ready-file", str(ready)]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    log_path = tmp_path / "broker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        host, _, port_text = wait_for_file(ready, process).rpartition(":")
        port = int(port_text)
        assert host == "127.0.0.1"
        assert port not in (0, controller)
        assert bindable(controller)
        assert endpoints_told(port) == told_everywhere("127.0.0.1", port)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
        code = process.wait(60)
    assert code == 0, log_path.read_text(errors="replace")
    assert "level=ERROR" not in log_path.read_text(errors="replace")
