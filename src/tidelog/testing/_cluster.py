"""A real tidelog cluster for tests and for trying cluster mode: a throwaway ZooKeeper and N brokers as
subprocesses, with the faults Kafka users test failover against (kill -9, restart, pause, ZooKeeper
session expiry, network partitions).

Invariants:

- :meth:`Cluster.start` returns once ZooKeeper serves and every broker is ready (registered in the cluster,
  its listener bound); :attr:`Cluster.bootstrap_servers` names every broker.
- Broker ``i`` (1..N) has ``broker.id=i``, its own data dir and run dir, and keeps its port across restarts
  (so clients' bootstrap lists stay valid).
- With ``network=True`` ZooKeeper and every broker run in network namespaces of their own on one bridge
  (:mod:`tidelog.testing.netns`; the test process reaches them through the bridge), so
  :meth:`Cluster.cut` / :meth:`Cluster.isolate` can partition any two of them; without it everything
  listens on 127.0.0.1 and partitions are not available.
- :meth:`Cluster.expire_session` expires a broker's ZooKeeper session as a long partition would (its
  ephemeral registration goes at once; the broker is told when it reconnects).
- :meth:`Cluster.close` leaves no process, namespace or temporary directory behind (directories passed in
  are kept).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from tidelog.testing._broker import Broker, ConfigValue
from tidelog.testing._zookeeper import ZooKeeper
from tidelog.testing.netns import ROOT, Network

__all__ = ["Cluster", "ClusterError", "cluster"]

_SESSION_FILE_ENV = "TIDELOG_ZK_SESSION_FILE"
_ZOOKEEPER_HOST = "zk"


class ClusterError(RuntimeError):
    """The cluster did not start or a wait ran out; the message ends with the relevant output."""


def _broker_host(broker_id: int) -> str:
    return f"b{broker_id}"


class Cluster:
    """ZooKeeper and ``brokers`` tidelog brokers; use as a context manager, or :meth:`start` / :meth:`close`."""

    def __init__(
        self,
        brokers: int = 3,
        *,
        config: Mapping[str, ConfigValue] | None = None,
        broker_config: Mapping[int, Mapping[str, ConfigValue]] | None = None,
        data_dir: Path | str | None = None,
        network: bool = False,
        zookeeper_session_timeout_ms: int = 6000,
        startup_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        zookeeper_port: int = 0,
        broker_ports: Mapping[int, int] | None = None,
        extra_log_dirs: Mapping[int, Sequence[Path]] | None = None,
    ) -> None:
        """``zookeeper_port`` / ``broker_ports`` (broker id -> port): fixed ports on 127.0.0.1 (0: a free one).
        ``extra_log_dirs`` (broker id -> dirs): more ``log.dirs`` of that broker (JBOD)."""
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self._owns_dir = data_dir is None
        self.directory = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="tidelog-cluster-"))
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.network: Network | None = None
        if network:
            self.network = Network([_ZOOKEEPER_HOST, *(_broker_host(i) for i in range(1, brokers + 1))])
        self._count = brokers
        self._config = dict(config or {})
        self._broker_config = {i: dict(c) for i, c in (broker_config or {}).items()}
        self.zookeeper_session_timeout_ms = zookeeper_session_timeout_ms
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._python = python
        self._env = dict(env) if env is not None else dict(os.environ)
        self._zookeeper_port = zookeeper_port
        self._broker_ports = dict(broker_ports or {})
        self._extra_log_dirs = {i: list(d) for i, d in (extra_log_dirs or {}).items()}
        self.zookeeper: ZooKeeper | None = None
        self.brokers: dict[int, Broker] = {}

    # ---- addresses ----

    @property
    def connect_string(self) -> str:
        """Kafka's ``zookeeper.connect`` for this cluster's ZooKeeper."""
        if self.zookeeper is None:
            raise RuntimeError("the cluster has not been started")
        return self.zookeeper.connect_string

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's ``host:port``, for any Kafka client's ``bootstrap.servers``."""
        return ",".join(self.brokers[i].bootstrap_servers for i in sorted(self.brokers))

    def broker(self, broker_id: int) -> Broker:
        return self.brokers[broker_id]

    # ---- lifecycle ----

    def start(self) -> Cluster:
        """Start ZooKeeper, then every broker; returns once all are ready."""
        try:
            if self.network is not None:
                self.network.start()
            self.zookeeper = self._new_zookeeper()
            self.zookeeper.start()
            for broker_id in range(1, self._count + 1):
                self.brokers[broker_id] = self._new_broker(broker_id)
            for broker in self.brokers.values():
                broker.start()
            self.wait_for(lambda: self.registered() == set(self.brokers), "every broker to register")
        except BaseException:
            self.close()
            raise
        return self

    def _new_zookeeper(self) -> ZooKeeper:
        host = "127.0.0.1" if self.network is None else self.network.address(_ZOOKEEPER_HOST)
        prefix = [] if self.network is None else self.network.exec_prefix(_ZOOKEEPER_HOST)
        return ZooKeeper(
            data_dir=self.directory / "zookeeper",
            run_dir=self.directory / "zookeeper-run",
            host=host,
            port=self._zookeeper_port if self.network is None else 2181,
            command_prefix=prefix,
            max_session_timeout_ms=max(120_000, self.zookeeper_session_timeout_ms),
        )

    def _new_broker(self, broker_id: int) -> Broker:
        host = "127.0.0.1" if self.network is None else self.network.address(_broker_host(broker_id))
        prefix = [] if self.network is None else self.network.exec_prefix(_broker_host(broker_id))
        run_dir = self.directory / f"broker-{broker_id}-run"
        run_dir.mkdir(parents=True, exist_ok=True)
        config: dict[str, ConfigValue] = {
            "broker.id": broker_id,
            "zookeeper.connect": self.connect_string,
            "zookeeper.session.timeout.ms": self.zookeeper_session_timeout_ms,
            **self._config,
            **self._broker_config.get(broker_id, {}),
        }
        env = {**self._env, _SESSION_FILE_ENV: str(run_dir / "zk-session")}
        return Broker(
            config,
            data_dir=self.directory / f"broker-{broker_id}",
            run_dir=run_dir,
            host=host,
            port=self._broker_ports.get(broker_id, 0) if self.network is None else 9092,
            startup_timeout=self._startup_timeout,
            stop_timeout=self._stop_timeout,
            python=self._python,
            env=env,
            command_prefix=prefix,
            extra_log_dirs=self._extra_log_dirs.get(broker_id, ()),
        )

    def close(self) -> None:
        """Stop every broker and ZooKeeper, remove what this object created."""
        for broker in self.brokers.values():
            with contextlib.suppress(Exception):
                broker.close()
        if self.zookeeper is not None:
            with contextlib.suppress(Exception):
                self.zookeeper.close()
        if self.network is not None:
            with contextlib.suppress(Exception):
                self.network.close()
        if self._owns_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- faults ----

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker (a crash: no controlled shutdown, no clean shutdown)."""
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int) -> None:
        """SIGTERM: a controlled shutdown (leaderships move first), then a clean stop."""
        self.brokers[broker_id].stop()

    def start_broker(self, broker_id: int) -> None:
        """Start a stopped or killed broker again (same id, data, port); returns once it is registered.

        The port is the one it had (``Broker.restart`` waits for it to be free), so clients that only
        know the brokers' first addresses still reach it after every broker was down at once."""
        broker = self.brokers[broker_id]
        if broker.is_running:
            raise RuntimeError(f"broker {broker_id} is already running")
        broker.restart()  # not running: a start on its previous port
        self.wait_for(lambda: broker_id in self.registered(), f"broker {broker_id} to register")

    def restart(self, broker_id: int) -> None:
        """A controlled stop, then a start."""
        self.stop(broker_id)
        self.start_broker(broker_id)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker (a hung process or a long pause): its sockets and ZooKeeper session stay open
        until the session times out."""
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    @contextlib.contextmanager
    def paused(self, broker_id: int, seconds: float = 0.0) -> Iterator[None]:
        with self.brokers[broker_id].paused(seconds):
            yield

    def expire_session(self, broker_id: int) -> None:
        """Expire the broker's ZooKeeper session now (as a partition from ZooKeeper longer than the session
        timeout would); the broker stops leading, registers again with a new broker epoch and rejoins."""
        if self.zookeeper is None:
            raise RuntimeError("the cluster has not been started")
        path = self.brokers[broker_id]._run_dir / "zk-session"
        session, password = path.read_text(encoding="ascii").split()
        self.zookeeper.expire_session(int(session, 16), bytes.fromhex(password))

    def cut(self, a: int | str, b: int | str, *, one_way: bool = False) -> None:
        """Drop traffic between two members (broker ids, ``"zk"``, or ``"client"`` for this process)."""
        network = self._require_network()
        network.cut(self._host(a), self._host(b), one_way=one_way)

    def heal(self, a: int | str, b: int | str, *, one_way: bool = False) -> None:
        self._require_network().heal(self._host(a), self._host(b), one_way=one_way)

    def isolate(self, member: int | str) -> None:
        """Cut one member from everyone (ZooKeeper, the other brokers and the clients)."""
        self._require_network().isolate(self._host(member))

    def heal_all(self) -> None:
        self._require_network().heal_all()

    def _require_network(self) -> Network:
        if self.network is None:
            raise RuntimeError("network partitions need Cluster(network=True)")
        return self.network

    def _host(self, member: int | str) -> str:
        if isinstance(member, int):
            return _broker_host(member)
        if member == "client":
            return ROOT
        return member

    # ---- observing ----

    def registered(self) -> set[int]:
        """The broker ids registered in ZooKeeper now (``/brokers/ids``)."""
        from kazoo.client import KazooClient

        if self.zookeeper is None:
            return set()
        client = KazooClient(hosts=self.connect_string, timeout=10)
        try:
            client.start(timeout=10)
            children = client.get_children("/brokers/ids") if client.exists("/brokers/ids") else []
            return {int(child) for child in children}
        finally:
            client.stop()
            client.close()

    def wait_for(self, condition: Callable[[], object], what: str, timeout: float | None = None) -> None:
        """Poll ``condition`` until it holds, at most ``timeout`` seconds (default: the startup timeout)."""
        deadline = time.monotonic() + (self._startup_timeout if timeout is None else timeout)
        while True:
            try:
                if condition():
                    return
            except Exception:  # noqa: BLE001 - a condition that cannot be evaluated yet is not met
                pass
            if time.monotonic() >= deadline:
                tails = "\n".join(
                    f"--- broker {i}\n{b.log_tail(20)}" for i, b in sorted(self.brokers.items())
                )
                raise ClusterError(f"timed out waiting for {what}\n{tails}")
            time.sleep(0.1)


@contextlib.contextmanager
def cluster(brokers: int = 3, **kwargs: object) -> Iterator[Cluster]:
    """``with tidelog.testing.cluster(brokers=3) as c:`` — a started cluster, closed afterwards."""
    instance = Cluster(brokers, **kwargs)  # type: ignore[arg-type]
    with instance:
        yield instance
