"""tidelog.testing.ZooKeeper and ``tidelog zookeeper``: a real ZooKeeper from Debian's package, its lifecycle
(kill, restart, pause), session expiry, the ``zookeeper`` fixture, and the CLI's start, stop and errors."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

import tidelog.testing
from tidelog.server.zookeeper_process import free_port, is_ok
from tidelog.testing import ZooKeeper


def _client(zk: ZooKeeper, timeout: float = 10.0) -> KazooClient:
    client = KazooClient(hosts=zk.connect_string, timeout=timeout)
    client.start(timeout=15)
    return client


def test_start_answers_imok_and_writes_its_config() -> None:
    with tidelog.testing.zookeeper() as zk:
        assert re.fullmatch(r"127\.0\.0\.1:\d+", zk.connect_string)
        assert zk.is_running
        assert zk.is_ok()
        assert zk.four_letter_word("ruok") == "imok"
        assert "Mode: standalone" in zk.four_letter_word("srvr")
        config = dict(
            line.split("=", 1) for line in zk.config_path.read_text().splitlines() if not line.startswith("#")
        )
        assert config["clientPortAddress"] == "127.0.0.1"
        assert config["clientPort"] == str(zk.port)
        assert config["admin.enableServer"] == "false"
        assert config["dataDir"] == str(zk.data_dir.absolute())
        assert config["4lw.commands.whitelist"] == "ruok,stat,srvr,mntr,conf"
        pid, data_dir = zk.pid, zk.data_dir
    assert not zk.is_running
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not data_dir.exists()


def test_kill_and_restart_keep_the_port_and_every_persistent_znode(tmp_path: Path) -> None:
    with ZooKeeper(data_dir=tmp_path / "data", run_dir=tmp_path / "run") as zk:
        port = zk.port
        client = _client(zk)
        try:
            client.create("/kept", b"value")
            client.create("/gone", b"", ephemeral=True)
        finally:
            client.stop()
            client.close()
        assert zk.kill() == -signal.SIGKILL
        assert not zk.is_running
        assert not is_ok("127.0.0.1", port)
        zk.restart()
        assert zk.port == port
        assert zk.starts == 2
        client = _client(zk)
        try:
            assert client.get("/kept")[0] == b"value"
            assert client.exists("/gone") is None  # its session was closed before the kill
        finally:
            client.stop()
            client.close()
        assert "start #2" in zk.log_path.read_text()
    assert (tmp_path / "data" / "version-2").is_dir()  # directories passed in are kept


def test_pause_freezes_the_server_until_resume() -> None:
    with tidelog.testing.zookeeper() as zk:
        with zk.paused():
            assert zk.is_paused
            assert not zk.is_ok()
        assert not zk.is_paused
        assert zk.is_ok()


def test_expire_session_deletes_the_victims_ephemerals_and_tells_it() -> None:
    with tidelog.testing.zookeeper() as zk:
        victim = _client(zk, timeout=30.0)  # far longer than the test: only expire_session can end it
        observer = _client(zk)
        lost = threading.Event()
        victim.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
        try:
            victim.create("/brokers/ids/1", b"{}", ephemeral=True, makepath=True)
            session_id, password = victim.client_id
            zk.expire_session(session_id, password)
            with pytest.raises(NoNodeError):
                observer.get("/brokers/ids/1")
            assert lost.wait(30)
        finally:
            for client in (victim, observer):
                client.stop()
                client.close()


def test_a_taken_port_is_reported_with_the_servers_log(tmp_path: Path) -> None:
    with tidelog.testing.zookeeper() as first:
        second = ZooKeeper(port=first.port, startup_timeout=30, run_dir=tmp_path / "run")
        try:
            with pytest.raises(tidelog.testing.ZooKeeperError, match="exited with code") as failure:
                second.start()
        finally:
            second.close()
        assert "Address already in use" in str(failure.value)
        assert first.is_ok()


def test_the_zookeeper_fixture_runs_one_for_the_test(tidelog_zookeeper: ZooKeeper, tmp_path: Path) -> None:
    assert tidelog_zookeeper.is_ok()
    assert tidelog_zookeeper.data_dir == tmp_path / "zookeeper-data"
    assert tidelog_zookeeper.log_path == tmp_path / "zookeeper-run" / "zookeeper.log"


# ---- tidelog zookeeper -------------------------------------------------------------------------------


def _tidelog(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tidelog", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_cli_runs_in_the_foreground_and_stops_cleanly(tmp_path: Path, stop_signal: signal.Signals) -> None:
    port = free_port()
    process = _tidelog("zookeeper", "--data", str(tmp_path / "zk"), "--port", str(port))
    try:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line)
            if "ready" in line:
                break
        assert f"ZooKeeper ready on 127.0.0.1:{port}" in "".join(lines), "".join(lines)
        assert is_ok("127.0.0.1", port)
        process.send_signal(stop_signal)
        process.communicate(timeout=30)
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert not is_ok("127.0.0.1", port)
    assert (tmp_path / "zk" / "zoo.cfg").is_file()
    assert (tmp_path / "zk" / "version-2").is_dir()


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(child) for child in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie left for init to reap counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_cli_killed_with_sigkill_takes_its_zookeeper_along(tmp_path: Path) -> None:
    """kill -9 of ``tidelog zookeeper`` is one of ZooKeeper: the port is free for the next start."""
    port = free_port()
    process = _tidelog("zookeeper", "--data", str(tmp_path / "zk"), "--port", str(port))
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "ready" in line:
                break
        assert is_ok("127.0.0.1", port)
        (java,) = _children(process.pid)
        process.kill()
        process.communicate(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(java) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(java)
        assert not is_ok("127.0.0.1", port)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_cli_without_java_says_how_to_install_it(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "JAVA_HOME": ""}
    process = _tidelog("zookeeper", "--data", str(tmp_path / "zk"), env=env)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 2
    assert output.strip() == (
        "Error: java not found (ZooKeeper runs on Java 17); "
        "install it with scripts/setup.sh test (or: apt-get install zookeeper)"
    )
