"""tidelog.testing.netns: hosts in network namespaces on one bridge, partitions by nft, stale clean-up, and a
real ZooKeeper in one namespace reached by a kazoo client in another, cut off and healed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.testing import ZooKeeper
from tidelog.testing.netns import ROOT, Network, remove_stale, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))

# Run on a host: try one TCP connection, print "connected" or the error's class name.
CONNECT = textwrap.dedent(
    """
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
        print("connected")
    except OSError as exc:
        print(type(exc).__name__)
    """
)
# Run on a host: accept connections on (address, port) until killed.
SERVE = textwrap.dedent(
    """
    import socket, sys
    server = socket.create_server((sys.argv[1], int(sys.argv[2])))
    print("listening", flush=True)
    while True:
        server.accept()[0].close()
    """
)


def _connect(net: Network, host: str, address: str, port: int, timeout: float = 1.0) -> str:
    if host == ROOT:
        result = subprocess.run(
            [sys.executable, "-c", CONNECT, address, str(port), str(timeout)],
            capture_output=True,
            text=True,
            check=True,
        )
    else:
        result = net.run(
            host,
            [sys.executable, "-c", CONNECT, address, str(port), str(timeout)],
            capture_output=True,
            text=True,
            check=True,
        )
    return result.stdout.strip()


@pytest.fixture
def net() -> Iterator[Network]:
    with Network(["a", "b", "zk"]) as network:
        yield network


@pytest.fixture
def server_on_b(net: Network) -> Iterator[int]:
    port = 7777
    process = net.popen(
        "b", [sys.executable, "-c", SERVE, net.address("b"), str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "listening"
        yield port
    finally:
        process.kill()
        process.communicate()


def test_hosts_get_their_own_addresses_and_namespaces(net: Network) -> None:
    hosts = net.hosts
    subnet = hosts[ROOT].address.rsplit(".", 1)[0]
    assert subnet.startswith("10.77.")
    assert [hosts[name].address for name in ("a", "b", "zk", ROOT)] == [
        f"{subnet}.{n}" for n in (1, 2, 3, 254)
    ]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"{net.owner}-h-a" in namespaces
    assert f"{net.owner}-hub" in namespaces
    own = net.run(
        "a", ["ip", "-o", "-4", "addr", "show", "dev", "eth0"], capture_output=True, text=True, check=True
    )
    assert f"inet {net.address('a')}/24" in own.stdout


def test_cut_and_heal_a_pair_leaves_everyone_else_connected(net: Network, server_on_b: int) -> None:
    b = net.address("b")
    assert _connect(net, "a", b, server_on_b) == "connected"
    assert _connect(net, ROOT, b, server_on_b) == "connected"
    net.cut("a", "b")
    assert _connect(net, "a", b, server_on_b) == "TimeoutError"
    assert _connect(net, ROOT, b, server_on_b) == "connected"
    assert _connect(net, "zk", b, server_on_b) == "connected"
    net.heal("a", "b")
    assert _connect(net, "a", b, server_on_b) == "connected"
    net.cut(ROOT, "b")
    assert _connect(net, ROOT, b, server_on_b) == "TimeoutError"
    assert _connect(net, "a", b, server_on_b) == "connected"
    net.heal_all()
    assert _connect(net, ROOT, b, server_on_b) == "connected"


def test_close_removes_everything_and_stale_networks_are_removed_at_start() -> None:
    # A network whose owner died: its namespace, a process inside it and its root link stay behind.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"tln{dead.pid}-hub"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    subprocess.run(
        ["ip", "link", "add", f"tln{dead.pid}", "type", "veth", "peer", "name", "x", "netns", stale],
        check=True,
    )
    sleeper = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "600"])
    try:
        # The sleeper is left behind only once it runs inside the namespace (``ip netns exec`` enters it,
        # then execs): before that, the clean-up below would not see it there.
        deadline = time.monotonic() + 10
        while (
            str(sleeper.pid)
            not in subprocess.run(
                ["ip", "netns", "pids", stale], capture_output=True, text=True, check=True
            ).stdout.split()
        ):
            assert time.monotonic() < deadline, "the sleeper never entered its namespace"
            time.sleep(0.01)
        with Network(["a"]) as network:  # start() removes what the dead run left
            names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
            assert stale not in names
            assert sleeper.wait(10) == -9
            links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
            assert f"tln{dead.pid}@" not in links
            owner = network.owner
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        assert owner not in names
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
        assert f"{owner}@" not in links
        assert remove_stale() == []
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "netns", "del", stale], check=False, capture_output=True)


# A kazoo client on its host: connects, then answers each line on stdin with one probe of ZooKeeper
# ("ok" or "timeout") and reports session state changes as they happen.
KAZOO_CLIENT = textwrap.dedent(
    """
    import sys, threading
    from kazoo.client import KazooClient
    lock = threading.Lock()
    def say(line):  # one whole line at a time: kazoo's thread reports states concurrently
        with lock:
            print(line, flush=True)
    client = KazooClient(hosts=sys.argv[1], timeout=12.0)  # silence for 2/3 of it: SUSPENDED
    client.add_listener(lambda state: say(f"state {state}"))
    client.start(timeout=20)
    say("connected")
    for _line in sys.stdin:
        try:
            client.exists_async("/").get(timeout=2)
            say("ok")
        except Exception as exc:
            say(f"timeout {type(exc).__name__}")
    """
)


def test_zookeeper_in_one_namespace_a_client_in_another_cut_off_and_healed(
    net: Network, tmp_path: Path
) -> None:
    with ZooKeeper(
        host=net.address("zk"),
        port=2181,
        command_prefix=net.exec_prefix("zk"),
        run_dir=tmp_path / "zk-run",
        data_dir=tmp_path / "zk-data",
    ) as zk:
        assert zk.connect_string == f"{net.address('zk')}:2181"
        assert zk.is_ok()  # from the root namespace, across the bridge
        assert subprocess.run(
            ["ip", "netns", "identify", str(zk.pid)], capture_output=True, text=True, check=True
        ).stdout.strip() == net.namespace("zk")
        client = net.popen(
            "a",
            [sys.executable, "-u", "-c", KAZOO_CLIENT, zk.connect_string],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert client.stdin is not None
        assert client.stdout is not None

        def probe() -> str:
            assert client.stdin is not None
            assert client.stdout is not None
            client.stdin.write("probe\n")
            client.stdin.flush()
            while True:
                line: str = client.stdout.readline().strip()
                if not line.startswith("state"):
                    return line
                states.append(line)

        states: list[str] = []
        try:
            while (line := client.stdout.readline().strip()) != "connected":
                states.append(line)  # kazoo's thread reports CONNECTED before or after start() returns
            assert probe() == "ok"
            net.cut("a", "zk")
            assert probe().startswith("timeout")
            assert zk.is_ok()  # ZooKeeper itself is fine: only the pair is cut
            while "state SUSPENDED" not in states:  # kazoo gives up the connection after ~8 s of silence
                states.append(client.stdout.readline().strip())
            net.heal("a", "zk")
            deadline = time.monotonic() + 30
            while (answer := probe()) != "ok":
                assert answer.startswith("timeout")
                assert time.monotonic() < deadline, states
            # It lost the connection, not the session (healed within its 12 s): SUSPENDED, CONNECTED, no LOST.
            assert states[-2:] == ["state SUSPENDED", "state CONNECTED"], states
        finally:
            client.kill()
            client.communicate()
