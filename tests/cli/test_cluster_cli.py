"""The cluster through the command line: ``tidelog cluster up`` as a newcomer runs it, and ``tidelog topics
describe`` showing leaders, replicas, ISR, offline replicas and each partition's status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.cli.cli_support import TIDELOG, ok, tidelog_cli

from tidelog.testing import cluster
from tidelog.testing._zookeeper import free_port

pytestmark = pytest.mark.clients


def _describe(bootstrap: str, *extra: str, topic: str = "rf3") -> list[dict[str, object]]:
    out = ok(
        tidelog_cli(
            "topics",
            "describe",
            topic,
            "--format",
            "json",
            "--no-offsets",
            "--bootstrap-server",
            bootstrap,
            *extra,
        )
    )
    partitions: list[dict[str, object]] = json.loads(out)[0]["partitions"]
    return partitions


def test_describe_shows_offline_replicas_and_under_replicated_partitions(tmp_path: Path) -> None:
    config = {"replica.lag.time.max.ms": 3000, "min.insync.replicas": 2}
    with cluster(3, config=config, data_dir=tmp_path / "cluster") as running:
        bootstrap = running.bootstrap_servers
        ok(
            tidelog_cli(
                "topics",
                "create",
                "rf3",
                "--partitions",
                "2",
                "--replication-factor",
                "3",
                "--bootstrap-server",
                bootstrap,
            )
        )
        running.wait_for(
            lambda: all(p["status"] == "ok" for p in _describe(bootstrap)), "every partition in sync"
        )
        assert [len(p["replicas"]) for p in _describe(bootstrap)] == [3, 3]  # type: ignore[arg-type]
        running.kill(3)
        running.wait_for(
            lambda: all(
                p["status"] == "under-replicated" and p["offline_replicas"] == [3]
                for p in _describe(bootstrap)
            ),
            "broker 3's replicas offline and out of the ISR",
        )
        under = _describe(bootstrap, "--under-replicated-partitions")
        assert [p["partition"] for p in under] == [0, 1]
        assert all(3 not in p["isr"] for p in under)  # type: ignore[operator]
        assert _describe(bootstrap, "--unavailable-partitions") == []
        table = ok(tidelog_cli("topics", "describe", "rf3", "--no-offsets", "--bootstrap-server", bootstrap))
        assert "under-replicated" in table
        running.start_broker(3)
        running.wait_for(
            lambda: all(p["status"] == "ok" and p["offline_replicas"] == [] for p in _describe(bootstrap)),
            "broker 3 back in every ISR",
        )


def test_cluster_up_runs_a_cluster_until_ctrl_c(tmp_path: Path) -> None:
    port, zk_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            TIDELOG,
            "cluster",
            "up",
            "--brokers",
            "3",
            "--data",
            str(tmp_path / "data"),
            "--port",
            str(port),
            "--zookeeper-port",
            str(zk_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        bootstrap = process.stdout.readline().decode().strip()  # printed once every broker is up
        assert bootstrap.split(",")[0] == f"127.0.0.1:{port}"
        assert len(bootstrap.split(",")) == 3
        ok(
            tidelog_cli(
                "topics", "create", "rf3", "--replication-factor", "3", "--bootstrap-server", bootstrap
            )
        )
        deadline = time.monotonic() + 60
        while not all(p["status"] == "ok" for p in _describe(bootstrap)):
            assert time.monotonic() < deadline, "the new topic's replicas never got in sync"
            time.sleep(0.2)
        assert [sorted(p["isr"]) for p in _describe(bootstrap)] == [[1, 2, 3]]  # type: ignore[type-var]
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr.decode()
    assert "stopped cleanly" in stderr.decode()
    assert (tmp_path / "data" / "broker-1").is_dir()  # the data is kept


def _zookeeper_of(pid: int) -> int:
    """The pid of the ZooKeeper java among the children of ``tidelog cluster up``."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if "ZooKeeperServerMain" in Path(f"/proc/{child}/cmdline").read_text(errors="replace"):
                return int(child)
    raise AssertionError("no ZooKeeper child found")


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_cluster_up_names_the_brokers_it_had_to_kill(tmp_path: Path) -> None:
    """ZooKeeper killed under the cluster: ``cluster up`` says so while it runs, and a broker killed then too.
    At Ctrl-C the controlled shutdowns cannot finish (the controller's decision waits on ZooKeeper; each
    broker waits for it replica.socket.timeout.ms), so after --stop-timeout each broker is SIGKILLed; the
    command says so and exits 1 rather than "stopped cleanly"."""
    port, zk_port = free_port(), free_port()
    err_path = tmp_path / "stderr"
    with err_path.open("wb") as err_file:
        process = subprocess.Popen(
            [
                *(TIDELOG, "cluster", "up", "--brokers", "2", "--data", str(tmp_path / "data")),
                *("--port", str(port), "--zookeeper-port", str(zk_port), "--stop-timeout", "2"),
                *("--set", "replica.socket.timeout.ms=600000"),
            ],
            stdout=subprocess.PIPE,
            stderr=err_file,
        )

    def wait_for_stderr(text: str) -> None:
        while text not in err_path.read_text(errors="replace"):
            assert process.poll() is None, err_path.read_text(errors="replace")
            assert time.monotonic() < deadline, f"never said {text!r}: {err_path.read_text(errors='replace')}"
            time.sleep(0.1)

    try:
        assert process.stdout is not None
        bootstrap = process.stdout.readline().decode().strip()
        ok(
            tidelog_cli(
                "topics", "create", "rf2", "--replication-factor", "2", "--bootstrap-server", bootstrap
            )
        )
        deadline = time.monotonic() + 60
        while not all(p["status"] == "ok" for p in _describe(bootstrap, topic="rf2")):
            assert time.monotonic() < deadline, "the new topic's replicas never got in sync"
            time.sleep(0.2)
        java = _zookeeper_of(process.pid)
        os.kill(java, signal.SIGKILL)
        wait_for_stderr("ZooKeeper does not answer: brokers keep serving")
        broker_2 = [
            int(child)
            for task in Path(f"/proc/{process.pid}/task").iterdir()
            for child in (task / "children").read_text().split()
            if "broker-2" in Path(f"/proc/{child}/cmdline").read_text(errors="replace")
        ]
        assert len(broker_2) == 1
        os.kill(broker_2[0], signal.SIGKILL)
        wait_for_stderr("broker 2 was killed (log: ")
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=120)
    err = err_path.read_text(errors="replace")
    assert process.returncode == 1, err
    assert err.count("ZooKeeper does not answer: brokers keep serving") == 1  # said once, not every second
    assert err.count("broker 2 was killed") == 1
    assert "ZooKeeper does not answer: the controlled shutdowns cannot" in err
    assert "not stopped cleanly: broker 2 (killed), broker 1 (killed)" in err
    assert "stopped cleanly\n" not in err.replace("not stopped cleanly", "")
