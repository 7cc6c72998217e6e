"""``tidelog brokers list`` against a real 3-broker cluster (one per module): ids, racks, endpoints, the
controller, partitions led and hosted, broker epochs from ZooKeeper, and a killed broker shown as not alive
until it has registered again (with a new, larger epoch)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from tests.cli.cli_support import failed, ok, tidelog_cli

from tidelog.testing import Broker, Cluster, cluster

pytestmark = pytest.mark.clients

TOPIC = "rf3"
PARTITIONS = [f"{TOPIC}-{p}" for p in range(3)]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    racks = {i: {"broker.rack": f"rack-{'abc'[i - 1]}"} for i in (1, 2, 3)}
    config = {"replica.lag.time.max.ms": 3000, "min.insync.replicas": 2}
    data = Path(tmp_path_factory.mktemp("brokers-cli"))
    with cluster(3, config=config, broker_config=racks, data_dir=data / "cluster") as started:
        ok(
            tidelog_cli(
                "topics",
                "create",
                TOPIC,
                "--partitions",
                "3",
                "--replication-factor",
                "3",
                "-b",
                started.bootstrap_servers,
            )
        )
        started.wait_for(
            lambda: all(b["out_of_isr_partitions"] == [] for b in _list(started)["brokers"]),
            "every replica in its ISR",
        )
        yield started


@pytest.fixture
def zk(running: Cluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=running.connect_string, timeout=10)
    client.start(timeout=20)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _list(running: Cluster, *extra: str) -> dict[str, Any]:
    out = ok(tidelog_cli("brokers", "list", "--json", "-b", running.bootstrap_servers, *extra))
    document: dict[str, Any] = json.loads(out)
    return document


def _leaders(zk: KazooClient) -> dict[int, list[str]]:
    led: dict[int, list[str]] = {}
    for name in PARTITIONS:
        data, _stat = zk.get(f"/brokers/topics/{TOPIC}/partitions/{name.rsplit('-', 1)[1]}/state")
        led.setdefault(json.loads(data)["leader"], []).append(name)
    return led


def _controller(zk: KazooClient) -> int:
    return int(json.loads(zk.get("/controller")[0])["brokerid"])


def test_list_shows_every_broker_from_the_wire(running: Cluster, zk: KazooClient) -> None:
    listed = _list(running)
    leaders = _leaders(zk)
    assert listed["source"] == "wire"
    assert listed["cluster_id"] == json.loads(zk.get("/cluster/id")[0])["id"]
    assert listed["controller_id"] == _controller(zk)
    assert listed["controller_epoch"] is None
    assert [b["id"] for b in listed["brokers"]] == [1, 2, 3]
    for broker in listed["brokers"]:
        host, port = running.broker(broker["id"]).bootstrap_servers.rsplit(":", 1)
        assert broker["alive"] is True
        assert broker["rack"] == f"rack-{'abc'[broker['id'] - 1]}"
        assert broker["endpoints"] == [
            {"listener": None, "security_protocol": None, "host": host, "port": int(port)}
        ]
        assert broker["broker_epoch"] is None  # not on the wire
        assert broker["controller"] is (broker["id"] == _controller(zk))
        assert broker["replica_partitions"] == PARTITIONS
        assert broker["leader_partitions"] == leaders.get(broker["id"], [])
        assert broker["out_of_isr_partitions"] == []


def test_list_with_zookeeper_adds_epochs_and_named_listeners(running: Cluster, zk: KazooClient) -> None:
    listed = _list(running, "--zookeeper", running.connect_string)
    assert listed == json.loads(
        ok(
            tidelog_cli(
                "brokers",
                "list",
                "-f",
                "json",
                "-b",
                running.bootstrap_servers,
                "--zookeeper",
                running.connect_string,
            )
        )
    )  # --json is short for --format json
    assert listed["source"] == "zookeeper"
    assert listed["controller_id"] == _controller(zk)
    assert listed["controller_epoch"] == int(zk.get("/controller_epoch")[0])
    for broker in listed["brokers"]:
        _data, stat = zk.get(f"/brokers/ids/{broker['id']}")
        host, port = running.broker(broker["id"]).bootstrap_servers.rsplit(":", 1)
        assert broker["broker_epoch"] == stat.czxid
        assert broker["endpoints"] == [
            {"listener": "PLAINTEXT", "security_protocol": "PLAINTEXT", "host": host, "port": int(port)}
        ]
        assert broker["rack"] == f"rack-{'abc'[broker['id'] - 1]}"


def test_table_rows_and_the_epoch_note(running: Cluster, zk: KazooClient) -> None:
    result = tidelog_cli("brokers", "list", "-b", running.bootstrap_servers)
    out = ok(result)
    controller = _controller(zk)
    assert f"Controller: {controller}" in out
    rows = {
        int(cells[0]): cells
        for line in out.splitlines()
        if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 9 and cells[0].isdigit()
    }
    leaders = _leaders(zk)
    assert sorted(rows) == [1, 2, 3]
    for broker_id, cells in rows.items():
        _id, rack, endpoint, epoch, is_controller, led, hosted, lagging, alive = cells
        assert (rack, endpoint, epoch) == (
            f"rack-{'abc'[broker_id - 1]}",
            running.broker(broker_id).bootstrap_servers,
            "-",
        )
        assert (is_controller, led, hosted, lagging, alive) == (
            "yes" if broker_id == controller else "",
            str(len(leaders.get(broker_id, []))),
            "3",
            "0",
            "yes",
        )
    assert "broker epochs are kept in ZooKeeper" in " ".join(result.stderr.decode().split())
    with_zk = ok(
        tidelog_cli("brokers", "list", "-b", running.bootstrap_servers, "--zookeeper", running.connect_string)
    )
    assert f"Controller: {controller} (epoch {int(zk.get('/controller_epoch')[0])})" in with_zk
    assert f"PLAINTEXT://{running.broker(1).bootstrap_servers}" in with_zk


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_unreachable_or_wrong_zookeeper_is_one_line(running: Cluster) -> None:
    message = failed(
        tidelog_cli(
            "brokers",
            "list",
            "-b",
            running.bootstrap_servers,
            "--zookeeper",
            f"127.0.0.1:{_closed_port()}",
            "--timeout",
            "1",
        )
    )
    assert "cannot reach ZooKeeper at 127.0.0.1:" in message
    message = failed(
        tidelog_cli(
            "brokers",
            "list",
            "-b",
            running.bootstrap_servers,
            "--zookeeper",
            f"{running.connect_string}/not-a-cluster",
        )
    )
    assert "has no /brokers/ids" in message


def test_a_killed_broker_is_listed_not_alive_until_it_registers_again(
    running: Cluster, zk: KazooClient
) -> None:
    before = _list(running, "--zookeeper", running.connect_string)["brokers"][2]
    running.kill(3)

    def gone() -> bool:
        listed = _list(running)["brokers"]
        return (
            [b["id"] for b in listed] == [1, 2, 3]
            and not listed[2]["alive"]
            and (listed[2]["out_of_isr_partitions"] == PARTITIONS)
        )

    running.wait_for(gone, "broker 3 unregistered and out of every ISR")
    dead = _list(running)["brokers"][2]
    assert dead == {
        "id": 3,
        "alive": False,
        "controller": False,
        "rack": None,
        "endpoints": [],
        "broker_epoch": None,
        "leader_partitions": [],
        "replica_partitions": PARTITIONS,
        "out_of_isr_partitions": PARTITIONS,
    }
    from_zk = _list(running, "--zookeeper", running.connect_string)["brokers"]
    assert [(b["id"], b["alive"], b["broker_epoch"]) for b in from_zk][2] == (3, False, None)
    running.start_broker(3)
    running.wait_for(
        lambda: _list(running)["brokers"][2]["out_of_isr_partitions"] == [], "broker 3 back in every ISR"
    )
    again = _list(running, "--zookeeper", running.connect_string)["brokers"][2]
    assert again["alive"] is True
    assert again["broker_epoch"] > before["broker_epoch"]  # a new registration, a new epoch (KIP-380)
    assert again["endpoints"] == before["endpoints"]


def test_a_single_broker_lists_itself_as_controller_leading_all_it_hosts(
    tidelog_broker_session: Broker,
) -> None:
    bootstrap = tidelog_broker_session.bootstrap_servers
    ok(
        tidelog_cli(
            "topics", "create", "brokers-list-single", "--partitions", "2", "--if-not-exists", "-b", bootstrap
        )
    )
    listed = json.loads(ok(tidelog_cli("brokers", "list", "--json", "-b", bootstrap)))
    host, port = bootstrap.rsplit(":", 1)
    [broker] = listed["brokers"]
    assert (broker["alive"], broker["controller"], listed["controller_id"]) == (True, True, broker["id"])
    assert broker["endpoints"] == [
        {"listener": None, "security_protocol": None, "host": host, "port": int(port)}
    ]
    assert {"brokers-list-single-0", "brokers-list-single-1"} <= set(broker["replica_partitions"])
    assert broker["leader_partitions"] == broker["replica_partitions"]
    assert broker["out_of_isr_partitions"] == []


def test_an_unreachable_bootstrap_server_is_one_line() -> None:
    message = failed(tidelog_cli("brokers", "list", "-b", f"127.0.0.1:{_closed_port()}", "--timeout", "1"))
    assert "cannot reach broker at 127.0.0.1:" in message
