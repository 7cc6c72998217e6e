"""One failover scenario: a real cluster (ZooKeeper and three broker processes), its seeded randomness, the
checker's :class:`~tests.cluster.checker.History`, and what the test observes about leadership.

Invariants:

- Leadership is read from ZooKeeper itself (each partition's ``state`` znode and ``/controller``), the
  cluster's source of truth, not from a broker's possibly stale metadata; every wait is on a condition
  with a deadline, never a fixed sleep.
- Every random choice of a scenario (which partition, which broker, a fault's duration, an order) comes
  from :attr:`Scenario.rng`, seeded by the scenario's seed, which every failure message names.
- :meth:`Scenario.verify` first waits for the cluster to converge (every broker registered, every
  partition led with its whole assignment in the ISR), then reads every partition back, compares the
  replicas on disk below the high watermark and runs :func:`~tests.cluster.checker.check`.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.cluster.checker import (
    CheckFailed,
    History,
    PartitionLog,
    TopicPartition,
    check,
    compare_replicas,
    describe_replica_problems,
    producer_stamps,
    read_back,
    replica_batches,
    seed_banner,
)
from tests.cluster.workload import ProducerSpec, Workload

from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.server.zk.zk_data import decode_leader_and_isr
from tidelog.testing import Cluster

__all__ = ["BASE_CONFIG", "Scenario"]

SESSION_TIMEOUT_MS = 6000
BASE_CONFIG: dict[str, str | int | bool] = {
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "replica.lag.time.max.ms": 10_000,
    "unclean.leader.election.enable": False,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "group.initial.rebalance.delay.ms": 0,
}


class Scenario:
    """A started cluster plus everything a failover test needs around it; :meth:`close` cleans up."""

    def __init__(self, seed: int, directory: Path, name: str) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.directory = directory
        self.name = name
        self.history = History(seed, f"s{seed}")
        self.cluster: Cluster | None = None
        self.topics: dict[str, int] = {}
        self._zk: Any = None
        self._workloads: list[Workload] = []

    # ---- lifecycle ----

    def start(
        self, brokers: int = 3, config: Mapping[str, str | int | bool] | None = None, *, network: bool = False
    ) -> Cluster:
        """``network``: every member in a network namespace of its own, for ``cut`` / ``isolate``."""
        self.cluster = Cluster(
            brokers,
            config={**BASE_CONFIG, **(config or {})},
            data_dir=self.directory / "cluster",
            zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS,
            network=network,
        )
        self.cluster.start()
        self.wait_for(self._every_broker_sees_every_broker, "every broker's metadata to list every broker")
        return self.cluster

    def _every_broker_sees_every_broker(self) -> bool:
        """Registered is not yet known everywhere: a CreateTopics on a broker whose metadata cache has
        not seen the last registration would refuse replication factor 3."""
        from confluent_kafka.admin import AdminClient

        expected = set(self.c.brokers)
        for broker in self.c.brokers.values():
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
            if set(admin.list_topics(timeout=5).brokers) != expected:
                return False
        return True

    @property
    def c(self) -> Cluster:
        assert self.cluster is not None, "start() the scenario first"
        return self.cluster

    @property
    def bootstrap(self) -> str:
        return self.c.bootstrap_servers

    def close(self) -> None:
        for workload in self._workloads:
            with contextlib.suppress(BaseException):
                workload.stop()
        if self._zk is not None:
            with contextlib.suppress(Exception):
                self._zk.stop()
                self._zk.close()
        if self.cluster is not None:
            for broker in self.cluster.brokers.values():  # the verdict is in: no need for clean shutdowns
                with contextlib.suppress(Exception):
                    broker.kill()
            if self.cluster.zookeeper is not None and self.cluster.zookeeper.is_paused:
                self.cluster.zookeeper.resume()
            self.cluster.close()

    def event(self, what: str) -> None:
        self.history.event(what)

    # ---- topics and load ----

    def create_topic(
        self, name: str, partitions: int, replication_factor: int = 3, config: Mapping[str, str] | None = None
    ) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        future = admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=dict(config or {}))], operation_timeout=30
        )[name]
        future.result(60)
        self.topics[name] = partitions
        self.wait_for(
            lambda: all(self.full_isr(name, p) for p in range(partitions)),
            f"topic {name}: every partition led with its full ISR",
        )
        self.wait_metadata(name, partitions)
        return name

    def wait_metadata(self, topic: str, partitions: int) -> None:
        """Until every running broker answers Metadata with a leader for every partition of ``topic``."""
        from confluent_kafka.admin import AdminClient

        def known() -> bool:
            for broker in self.c.brokers.values():
                if not broker.is_running or broker.is_paused:
                    continue
                admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
                md = admin.list_topics(topic, timeout=5)
                described = md.topics.get(topic)
                if (
                    described is None
                    or described.error is not None
                    or len(described.partitions) != partitions
                ):
                    return False
                if any(p.leader < 0 for p in described.partitions.values()):
                    return False
            return True

        self.wait_for(known, f"every broker's metadata to show {topic}'s leaders")

    def workload(
        self,
        topic: str,
        producers: Sequence[ProducerSpec] = (ProducerSpec("idem"), ProducerSpec("plain", idempotent=False)),
        readers: Sequence[str] = ("confluent",),
    ) -> Workload:
        workload = Workload(
            self.history,
            self.bootstrap,
            topic,
            self.topics[topic],
            producers=producers,
            readers=readers,
            rng=self.rng,
        )
        self._workloads.append(workload)
        return workload

    # ---- ZooKeeper's view ----

    def zk(self) -> Any:
        from kazoo.client import KazooClient

        if self._zk is None:
            client = KazooClient(hosts=self.c.connect_string, timeout=10)
            client.start(timeout=20)
            self._zk = client
        return self._zk

    def state(self, topic: str, partition: int) -> LeaderAndIsr:
        data, stat = self.zk().get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return decode_leader_and_isr(data, stat.version)

    def replicas(self, topic: str, partition: int) -> list[int]:
        data, _stat = self.zk().get(f"/brokers/topics/{topic}")
        return [int(r) for r in json.loads(data)["partitions"][str(partition)]]

    def controller(self) -> int:
        """The controller's broker id (-1: none now)."""
        zk = self.zk()
        if not zk.exists("/controller"):
            return -1
        data, _stat = zk.get("/controller")
        return int(json.loads(data)["brokerid"])

    def controller_epoch(self) -> int:
        data, _stat = self.zk().get("/controller_epoch")
        return int(data)

    def leader(self, topic: str, partition: int) -> int:
        return self.state(topic, partition).leader

    def full_isr(self, topic: str, partition: int) -> bool:
        state = self.state(topic, partition)
        return state.leader >= 0 and sorted(state.isr) == sorted(self.replicas(topic, partition))

    def out_of_every_isr(self, topic: str, broker: int) -> bool:
        """``broker`` is in no ISR of ``topic`` (ZooKeeper's view)."""
        return all(broker not in self.state(topic, p).isr for p in range(self.topics[topic]))

    def coordinator_partition(self, internal_topic: str, key: str) -> int:
        from tidelog.coordinator.common.partitioning import partition_for

        count = len(self.zk().get_children(f"/brokers/topics/{internal_topic}/partitions"))
        return partition_for(key, count)

    # ---- waiting ----

    def wait_for(self, condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
        """Poll ``condition`` (exceptions count as not yet) until it holds or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            try:
                if condition():
                    return
            except Exception as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout:g} s waiting for {what} (last error: {last_error!r})\n"
                    f"{seed_banner(self.seed)}\n{self.history.summary()}\n{self.leadership()}\n{self.log_tails()}"
                )
            time.sleep(0.05)

    def wait_new_leader(
        self, topic: str, partition: int, old: LeaderAndIsr, timeout: float = 60.0
    ) -> LeaderAndIsr:
        """Until the partition has a leader other than ``old``'s, with a higher leader epoch."""
        self.wait_for(
            lambda: (
                (s := self.state(topic, partition)).leader_epoch > old.leader_epoch
                and s.leader >= 0
                and s.leader != old.leader
            ),
            f"{topic}-{partition}: a new leader after {old.leader} (epoch {old.leader_epoch})",
            timeout,
        )
        new = self.state(topic, partition)
        self.event(f"{topic}-{partition} leader {old.leader} -> {new.leader} (epoch {new.leader_epoch})")
        return new

    def wait_converged(self, timeout: float = 90.0) -> None:
        """Every broker registered and every partition (the scenario's topics and the internal ones) led
        with its whole assignment in the ISR."""
        expected = set(self.c.brokers)

        def converged() -> bool:
            if self.c.registered() != expected:
                return False
            for topic in self.all_topics():
                count = len(self.zk().get_children(f"/brokers/topics/{topic}/partitions"))
                if not all(self.full_isr(topic, p) for p in range(count)):
                    return False
            return True

        self.wait_for(converged, "the cluster to converge (all registered, every ISR full)", timeout)
        for topic, count in self.topics.items():
            self.wait_metadata(topic, count)

    def all_topics(self) -> list[str]:
        return sorted(self.zk().get_children("/brokers/topics"))

    # ---- verdict ----

    def verify(
        self, topics: Sequence[str] | None = None, *, isolation_level: str = "read_uncommitted"
    ) -> dict[TopicPartition, PartitionLog]:
        """Converge, read back, compare replicas on disk, check (module docstring); the partitions as read
        back."""
        self.event("verify: waiting for convergence")
        self.wait_converged()
        self.event("verify: converged")
        names = list(topics) if topics is not None else list(self.topics)
        final = read_back(self.bootstrap, {t: self.topics[t] for t in names}, isolation_level=isolation_level)
        self.event("verify: read back")
        for workload in self._workloads:
            if workload.topic in names:
                workload.wait_read_up_to(
                    {p: final[(workload.topic, p)].high_watermark for p in range(workload.partitions)}
                )
            workload.stop()
        problems: list[str] = []
        producers: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
        for (topic, partition), log in sorted(final.items()):
            isr = self.state(topic, partition).isr
            problems += compare_replicas(
                {b: self.c.broker(b).data_dir for b in isr}, topic, partition, log.high_watermark
            )
            producers[(topic, partition)] = producer_stamps(
                replica_batches(self.c.broker(isr[0]).data_dir, topic, partition, log.high_watermark)
            )
        check(self.history, final, replicas=describe_replica_problems(problems), producers=producers)
        print(self.history.summary())  # shown with -s, and with a failure's captured output
        return final

    def read(self, topic: str, *, isolation_level: str = "read_uncommitted") -> list[bytes | None]:
        """Every value of ``topic`` up to its high watermark (last stable offset), partition by partition."""
        logs = read_back(self.bootstrap, {topic: self.topics[topic]}, isolation_level=isolation_level)
        return [value for _tp, log in sorted(logs.items()) for _offset, value in sorted(log.records.items())]

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """OffsetFetch of ``group`` for ``topic``'s partitions (from whichever broker coordinates it now),
        without joining the group; partitions without a commit are left out."""
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        try:
            wanted = [TopicPartition(topic, p) for p in range(self.topics[topic])]
            return {
                tp.partition: tp.offset for tp in reader.committed(wanted, timeout=10) if tp.error is None
            }
        finally:
            reader.close()

    def high_watermarks(self, topic: str) -> dict[int, int]:
        """Each partition's high watermark as its leader answers it now."""
        from confluent_kafka import Consumer, TopicPartition

        reader = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "hw-probe", "log_level": 3})
        try:
            return {
                p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(self.topics[topic])
            }
        finally:
            reader.close()

    # ---- diagnostics ----

    def leadership(self) -> str:
        lines = []
        with contextlib.suppress(Exception):
            lines.append(f"controller {self.controller()}; registered {sorted(self.c.registered())}")
            for topic in self.all_topics():
                count = len(self.zk().get_children(f"/brokers/topics/{topic}/partitions"))
                for p in range(count):
                    s = self.state(topic, p)
                    lines.append(f"{topic}-{p}: leader {s.leader} epoch {s.leader_epoch} isr {list(s.isr)}")
        return "\n".join(lines)

    def log_tails(self, lines: int = 15) -> str:
        if self.cluster is None:
            return ""
        return "\n".join(
            f"--- broker {i} ({b.log_path})\n{b.log_tail(lines)}" for i, b in sorted(self.c.brokers.items())
        )


@contextlib.contextmanager
def failing_with_context(scenario: Scenario) -> Iterator[None]:
    """Add the leadership and the broker log tails to a :class:`CheckFailed` raised inside."""
    try:
        yield
    except CheckFailed as exc:
        raise CheckFailed(f"{exc}\n{scenario.leadership()}\n{scenario.log_tails()}") from None
