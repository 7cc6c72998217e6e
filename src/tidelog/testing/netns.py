"""A private network of test hosts in Linux network namespaces, with partitions cut and healed by nft rules.

::

    with Network(["zk", "b1", "b2"]) as net:
        zk = ZooKeeper(host=net.address("zk"), port=2181, command_prefix=net.exec_prefix("zk"))
        net.cut("b1", "zk")      # b1 and zk can no longer exchange a packet
        net.heal("b1", "zk")

Layout: a hub namespace holds a bridge; each host is a namespace with one veth (``eth0``) on the bridge and
the address ``10.77.N.<i>``; the test process's own (root) namespace is attached too, as ``10.77.N.254``
(host name :data:`ROOT`), so tests reach every host directly, e.g. to play a client that a partition
leaves connected.

Invariants:

- Needs root, ``ip`` (iproute2) and ``nft`` (nftables): :func:`unavailable_reason` says what is missing.
- Every object is named after the owning process (``tln<pid>-...``, the root link ``tln<pid>``), and each
  network gets its own ``/24`` (``N`` is chosen under a lock file among those not already on a root
  link), so concurrent test runs on one machine never touch each other's hosts.
- :meth:`Network.start` first removes what runs whose process is gone left behind (namespaces, the
  processes still inside them, root links); :meth:`Network.close` (also at interpreter exit) removes
  everything of this network, killing what still runs inside its namespaces.
- Addresses of a network exist only between start and close: nothing is ever sent to a 10.77 address
  while no network owns it (the root namespace would route it out of the machine).
- A cut drops packets in the namespace of one end of the pair (nft ``input`` and ``output`` hooks, by
  address set), so TCP connections hang and time out as across a real partition; the root namespace's
  firewall is never touched. ``heal`` removes exactly that cut.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ROOT", "Host", "Network", "NetworkError", "unavailable_reason"]

ROOT = "root"
_PREFIX = "tln"
_SUBNET_BASE = "10.77"
_LOCK_FILE = Path("/run/lock/tidelog-netns.lock")
_ROOT_HOST_NUMBER = 254
_TABLE = "tidelog"
_NAME_PATTERN = re.compile(rf"^{_PREFIX}(\d+)(?:-|$)")
_LIVE: weakref.WeakSet[Network] = weakref.WeakSet()


class NetworkError(RuntimeError):
    """A namespace, link or firewall command failed; the message has the command and its output."""


@dataclass(frozen=True)
class Host:
    """One test host: its name, its network namespace (None for :data:`ROOT`) and its address."""

    name: str
    namespace: str | None
    address: str


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be used here (not root, ``ip`` or ``nft`` missing), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} not found (install {package}: scripts/setup.sh test)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetworkError(
            f"{' '.join(argv)} failed ({result.returncode}): {(result.stderr or result.stdout).strip()}"
        )
    return result


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the namespaces and root links of networks whose owning process is gone (and kill what still
    runs in those namespaces); returns what was removed."""
    removed: list[str] = []
    for line in _run("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAME_PATTERN.match(name)
        if match and not _pid_alive(int(match.group(1))):
            _delete_namespace(name)
            removed.append(name)
    for line in _run("ip", "-o", "link", "show").stdout.splitlines():
        fields = line.split(":")
        if len(fields) < 2:
            continue
        link = fields[1].strip().split("@")[0]
        match = _NAME_PATTERN.match(link)
        if match and not _pid_alive(int(match.group(1))):
            _run("ip", "link", "del", link, check=False)
            removed.append(link)
    return removed


def _delete_namespace(name: str) -> None:
    pids = _run("ip", "netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _run("ip", "netns", "del", name, check=False)


class Network:
    """Hosts in their own network namespaces on one bridge, plus the root namespace (see the module doc)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        if len(set(hosts)) != len(hosts) or ROOT in hosts:
            raise ValueError(f"host names must be unique and not {ROOT!r}: {list(hosts)}")
        if not 0 < len(hosts) < _ROOT_HOST_NUMBER:
            raise ValueError("a network has 1 to 253 hosts")
        self.names = list(hosts)
        self.owner = f"{_PREFIX}{os.getpid()}"
        self.hub = f"{self.owner}-hub"
        self._hosts: dict[str, Host] = {}
        self._cuts: set[tuple[str, str, str]] = set()  # (namespace host, other address, direction)
        self._subnet: int | None = None

    # ---- hosts ----

    @property
    def hosts(self) -> dict[str, Host]:
        """Every host by name, :data:`ROOT` included (only while started)."""
        if not self._hosts:
            raise RuntimeError("the network is not started")
        return dict(self._hosts)

    def address(self, host: str) -> str:
        return self.hosts[host].address

    def namespace(self, host: str) -> str:
        namespace = self.hosts[host].namespace
        if namespace is None:
            raise ValueError(f"{ROOT!r} is the test process's own namespace")
        return namespace

    def exec_prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command on ``host`` (``ip netns exec``, which execs in place)."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def run(
        self, host: str, argv: Sequence[str], *, check: bool = False, **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """``subprocess.run`` of ``argv`` on ``host``."""
        return subprocess.run([*self.exec_prefix(host), *argv], check=check, **kwargs)

    def popen(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """``subprocess.Popen`` of ``argv`` on ``host`` (the pid is the command's own)."""
        return subprocess.Popen([*self.exec_prefix(host), *argv], **kwargs)

    # ---- partitions ----

    def cut(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Drop every packet between hosts ``a`` and ``b`` (``one_way``: only those from ``a`` to ``b``)."""
        for namespace_host, other, direction in self._rules(a, b, one_way):
            if (namespace_host, other, direction) not in self._cuts:
                self._nft(namespace_host, "add", "element", "inet", _TABLE, direction, f"{{ {other} }}")
                self._cuts.add((namespace_host, other, direction))

    def heal(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Undo :meth:`cut` of the same pair (and direction)."""
        for namespace_host, other, direction in self._rules(a, b, one_way):
            if (namespace_host, other, direction) in self._cuts:
                self._nft(namespace_host, "delete", "element", "inet", _TABLE, direction, f"{{ {other} }}")
                self._cuts.discard((namespace_host, other, direction))

    def isolate(self, host: str) -> None:
        """Cut ``host`` from every other host, the root namespace included."""
        for other in self._hosts:
            if other != host:
                self.cut(host, other)

    def heal_all(self) -> None:
        for namespace_host, other, direction in sorted(self._cuts):
            self._nft(namespace_host, "delete", "element", "inet", _TABLE, direction, f"{{ {other} }}")
        self._cuts.clear()

    def _rules(self, a: str, b: str, one_way: bool) -> list[tuple[str, str, str]]:
        """Where to drop: in the namespace of a non-root end, by the other end's address."""
        hosts = self.hosts
        if a == b:
            raise ValueError("a host cannot be cut from itself")
        if a == ROOT:  # the root namespace's firewall is never touched: drop at b
            return (
                [(b, hosts[a].address, "drop_from")]
                if one_way
                else [
                    (b, hosts[a].address, "drop_from"),
                    (b, hosts[a].address, "drop_to"),
                ]
            )
        if one_way:
            return [(a, hosts[b].address, "drop_to")]
        return [(a, hosts[b].address, "drop_to"), (a, hosts[b].address, "drop_from")]

    def _nft(self, host: str, *args: str) -> None:
        _run(*self.exec_prefix(host), "nft", *args)

    # ---- lifecycle ----

    def start(self) -> Network:
        reason = unavailable_reason()
        if reason is not None:
            raise NetworkError(reason)
        remove_stale()
        _LIVE.add(self)
        try:
            with _subnet_lock():
                self._subnet = _free_subnet()
                self._create_root_link()  # claims the subnet for concurrent runs
            self._create_hub()
            for number, name in enumerate(self.names, start=1):
                self._create_host(name, number)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove every namespace and link of this network, killing what still runs inside."""
        for namespace in [f"{self.owner}-h-{name}" for name in self.names] + [self.hub]:
            if Path(f"/run/netns/{namespace}").exists():
                _delete_namespace(namespace)
        _run("ip", "link", "del", self.owner, check=False)
        self._hosts.clear()
        self._cuts.clear()
        _LIVE.discard(self)

    def __enter__(self) -> Network:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _create_root_link(self) -> None:
        address = f"{_SUBNET_BASE}.{self._subnet}.{_ROOT_HOST_NUMBER}"
        _run("ip", "netns", "add", self.hub)
        _run("ip", "link", "add", self.owner, "type", "veth", "peer", "name", "root", "netns", self.hub)
        _run("ip", "addr", "add", f"{address}/24", "dev", self.owner)
        _run("ip", "link", "set", self.owner, "up")
        self._hosts[ROOT] = Host(ROOT, None, address)

    def _create_hub(self) -> None:
        hub = ["ip", "-n", self.hub]
        _run(*hub, "link", "set", "lo", "up")
        _run(*hub, "link", "add", "br0", "type", "bridge")
        _run(*hub, "link", "set", "br0", "up")
        _run(*hub, "link", "set", "root", "master", "br0")
        _run(*hub, "link", "set", "root", "up")

    def _create_host(self, name: str, number: int) -> None:
        namespace = f"{self.owner}-h-{name}"
        address = f"{_SUBNET_BASE}.{self._subnet}.{number}"
        port = f"p{number}"
        _run("ip", "netns", "add", namespace)
        _run(
            "ip",
            "-n",
            self.hub,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            namespace,
        )
        _run("ip", "-n", self.hub, "link", "set", port, "master", "br0")
        _run("ip", "-n", self.hub, "link", "set", port, "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        _run("ip", "-n", namespace, "link", "set", "eth0", "up")
        self._hosts[name] = Host(name, namespace, address)
        ruleset = f"""
table inet {_TABLE} {{
    set drop_from {{ type ipv4_addr; }}
    set drop_to {{ type ipv4_addr; }}
    chain input {{ type filter hook input priority 0; policy accept; ip saddr @drop_from drop; }}
    chain output {{ type filter hook output priority 0; policy accept; ip daddr @drop_to drop; }}
}}
"""
        result = subprocess.run(
            ["ip", "netns", "exec", namespace, "nft", "-f", "-"],
            input=ruleset,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise NetworkError(f"nft -f in {namespace} failed: {result.stderr.strip()}")


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    _LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _free_subnet() -> int:
    """The lowest N whose 10.77.N.0/24 no root address uses (run under the lock)."""
    used = set(re.findall(rf"inet {re.escape(_SUBNET_BASE)}\.(\d+)\.", _run("ip", "-o", "-4", "addr").stdout))
    for candidate in range(256):
        if str(candidate) not in used:
            return candidate
    raise NetworkError(f"every {_SUBNET_BASE}.N.0/24 is in use")


@atexit.register
def _close_leftovers() -> None:
    for network in list(_LIVE):
        with contextlib.suppress(Exception):
            network.close()
