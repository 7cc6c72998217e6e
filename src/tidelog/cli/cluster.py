"""``tidelog cluster up``: a throwaway ZooKeeper and N brokers on loopback in the foreground, so a newcomer
sees a replicated cluster with one command.

Invariants: brokers ``1..N`` listen on ``--port``, ``--port + 1``, ...; ZooKeeper on ``--zookeeper-port``;
everything keeps its data under ``--data`` (started again on the same directory, the cluster comes back
with its topics). Ctrl-C or SIGTERM stops every broker with a controlled shutdown, then ZooKeeper, and
exits 0; a broker that has not stopped within ``--stop-timeout`` is killed and named, and the exit code is 1
(never "stopped cleanly" after a kill). A broker or ZooKeeper that does not start ends in one error line
and exit 1, leaving nothing running. While it runs, it says (on stderr, once per change, within about a
second) when ZooKeeper stops or starts answering and when a broker process exits.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tidelog.cli._common import err_console, print_error

if TYPE_CHECKING:
    from tidelog.testing import Cluster


@click.group("cluster")
def cluster_group() -> None:
    """Run a local tidelog cluster (ZooKeeper and several brokers) for trying cluster mode."""


@cluster_group.command("up")
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(1, 9), help="How many brokers.")
@click.option(
    "--data",
    "data_dir",
    default="./cluster-data",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where ZooKeeper and every broker keep their data (kept after Ctrl-C).",
)
@click.option(
    "--port", default=9092, show_default=True, type=click.IntRange(1, 65535), help="Broker 1's port."
)
@click.option(
    "--zookeeper-port",
    default=2181,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="ZooKeeper's port.",
)
@click.option(
    "--stop-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds each broker gets to stop (controlled shutdown included) before SIGKILL.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A broker config for every broker (repeatable), e.g. --set min.insync.replicas=2.",
)
def up_command(
    brokers: int,
    data_dir: Path,
    port: int,
    zookeeper_port: int,
    stop_timeout: float,
    overrides: tuple[str, ...],
) -> None:
    """Start ZooKeeper and BROKERS brokers on 127.0.0.1 until Ctrl-C."""
    from tidelog.testing import Cluster, ClusterError
    from tidelog.testing._broker import BrokerError
    from tidelog.testing._zookeeper import ZooKeeperError

    replicas = min(brokers, 3)
    config: dict[str, str | int] = {
        "default.replication.factor": replicas,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min(replicas, 2),
    }
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print_error(f"--set wants KEY=VALUE, got {item!r}")
            raise SystemExit(2)
        config[key.strip()] = value
    cluster = Cluster(
        brokers,
        config=config,
        data_dir=data_dir,
        zookeeper_port=zookeeper_port,
        broker_ports={i: port + i - 1 for i in range(1, brokers + 1)},
        startup_timeout=120,
        stop_timeout=stop_timeout,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    err_console.print(
        f"starting ZooKeeper on 127.0.0.1:{zookeeper_port} and {brokers} brokers (data in {data_dir}) ..."
    )
    try:
        cluster.start()
    except (ClusterError, BrokerError, ZooKeeperError, OSError) as exc:
        print_error(f"the cluster did not start: {str(exc).splitlines()[0]}")
        raise SystemExit(1) from None
    err_console.print(f"cluster up: zookeeper.connect={cluster.connect_string}")
    for broker_id, broker in sorted(cluster.brokers.items()):
        err_console.print(f"  broker {broker_id}: {broker.bootstrap_servers}  (log: {broker.log_path})")
    click.echo(cluster.bootstrap_servers)
    err_console.print("Ctrl-C stops every broker (controlled shutdown), then ZooKeeper")
    watch = _Watch(cluster)
    while not stop.wait(_WATCH_INTERVAL_S):
        for line in watch.changes():
            err_console.print(line)
    err_console.print("stopping ...")
    if cluster.zookeeper is not None and not cluster.zookeeper.is_ok():  # dead, paused or cut off alike
        err_console.print(
            "ZooKeeper does not answer: the controlled shutdowns cannot move leaderships and each broker "
            f"gets SIGKILL if it has not stopped after its retries within {stop_timeout:g} s"
        )
    killed: list[str] = []
    for broker_id in sorted(cluster.brokers, reverse=True):
        code = cluster.brokers[broker_id].stop()
        if code != 0:
            killed.append(
                f"broker {broker_id} ({'killed' if code == -signal.SIGKILL else f'exit code {code}'})"
            )
    cluster.close()
    if killed:
        print_error(f"not stopped cleanly: {', '.join(killed)}; its logs are recovered at its next start")
        raise SystemExit(1)
    err_console.print("stopped cleanly")


_WATCH_INTERVAL_S = 1.0
"""How often ``cluster up`` looks at ZooKeeper and the broker processes while it waits for Ctrl-C."""


class _Watch:
    """What changed in the cluster's processes since the last look: ZooKeeper stopping or starting to
    answer ``ruok`` (dead, paused or cut off alike), a broker process exiting. Each change is said once."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._zookeeper_ok = True
        self._exited: set[int] = set()

    def changes(self) -> list[str]:
        lines: list[str] = []
        zookeeper = self._cluster.zookeeper
        if zookeeper is not None:
            ok = zookeeper.is_ok()
            if ok != self._zookeeper_ok:
                self._zookeeper_ok = ok
                lines.append(
                    f"{time.strftime('%H:%M:%S')} ZooKeeper answers again"
                    if ok
                    else f"{time.strftime('%H:%M:%S')} ZooKeeper does not answer: brokers keep serving what "
                    "they lead, but no leader can be elected and no ISR can change until it is back"
                )
        for broker_id, broker in sorted(self._cluster.brokers.items()):
            if broker_id in self._exited or broker.is_running:
                continue
            self._exited.add(broker_id)
            code = broker.returncode
            how = "was killed" if code is not None and code < 0 else f"exited with code {code}"
            lines.append(f"{time.strftime('%H:%M:%S')} broker {broker_id} {how} (log: {broker.log_path})")
        return lines
