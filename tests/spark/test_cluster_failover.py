"""An exactly-once Spark query (the transform example: tidelog source -> upper-case -> tidelog sink,
``deliveryGuarantee=exactly-once``, two-phase) across leader failovers in a three-broker cluster.

Input and output topics have replication factor 3 and ``min.insync.replicas=2``; a producer (acks=all,
idempotent) feeds the input while the query runs. Mid-query the leader of an output partition is killed
(SIGKILL) and restarted, then the leader of an input partition, and in the soak more of either (and the
controller). The query is meant to ride through: the driver asks metadata and list-offsets again while a
leader moves, the tasks' consumers and producers and the driver's commit follow the new leaders and
coordinators. If the query does fail (Spark's local mode retries no task; under a heavily loaded machine
Spark itself may time out a Python worker) it is restarted from its checkpoint, as a supervisor would, and
the restarts are printed with the failover events.

Afterwards the output, read with read_committed, holds the transformed input exactly: every input record
once, each input partition's records in their order (they share a key, so one output partition), and
every record the feeding producer saw acknowledged is in the input. The seed of the random choices (which
partition, when) is printed; ``--cluster-seed`` reruns one.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.errors import StreamingQueryException
from tests.cluster.checker import seed_banner
from tests.cluster.harness import Scenario

from tidelog.spark import pipeline

pytestmark = [pytest.mark.clients, pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PARTITIONS = 2


@pytest.fixture(scope="module")
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    given = request.config.getoption("--cluster-seed", None) or os.environ.get("TIDELOG_CLUSTER_SEED")
    seed = int(given) if given is not None else random.SystemRandom().randrange(1, 1_000_000)
    print(seed_banner(seed))
    instance = Scenario(seed, tmp_path_factory.mktemp("spark-cluster"), "spark-failover")
    try:
        instance.start(config={"transaction.two.phase.commit.enable": True, "log.retention.ms": -1})
        yield instance
    finally:
        instance.close()


class Feeder(threading.Thread):
    """Produces ``count`` records (acks=all, idempotent) to the input, ``rate`` a second; record ``i`` goes
    to partition ``i % PARTITIONS`` with key ``p<partition>``. ``acked`` holds the values acknowledged."""

    def __init__(self, bootstrap: str, topic: str, count: int, rate: float) -> None:
        super().__init__(name="feeder", daemon=True)
        self.bootstrap, self.topic, self.count, self.rate = bootstrap, topic, count, rate
        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 120_000,
                    "topic.metadata.refresh.interval.ms": 2000,
                    "log_level": 3,
                }
            )

            def delivered(error: Any, message: Any) -> None:
                if error is None:
                    self.acked.add(message.value())
                else:
                    self.failed.append(f"{message.value()!r}: {error}")

            started = time.monotonic()
            for i in range(self.count):
                if self.stop_event.is_set():
                    break
                p = i % PARTITIONS
                producer.produce(
                    self.topic, value=b"r%d" % i, key=b"p%d" % p, partition=p, on_delivery=delivered
                )
                # ``rate`` records a second while the query runs (a pacing, not a synchronisation)
                producer.poll(max(0.0, started + i / self.rate - time.monotonic()))
            assert producer.flush(180) == 0, "records still unacknowledged after 180 s"
        except BaseException as exc:
            self.error = exc


def _args(scenario: Scenario, source: str, sink: str, checkpoint: Path, *extra: str) -> list[str]:
    return [
        str(EXAMPLES / "transform.py"),
        "--bootstrap-server",
        scenario.bootstrap,
        "--checkpoint",
        str(checkpoint),
        "--source",
        source,
        "--sink",
        sink,
        "--exactly-once",
        "--two-phase-commit",
        "true",
        "--max-offsets-per-trigger",
        "400",
        "--kafka",
        "topic.metadata.refresh.interval.ms=2000",
        *extra,
    ]


def _committed_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's last stable offset."""
    consumer: Any = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "failover-lso", "isolation.level": "read_committed"}
    )
    try:
        return {
            p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1])
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def _read(bootstrap: str, topic: str, *, committed: bool) -> dict[int, list[tuple[bytes, bytes]]]:
    """(key, value) of every record of each partition, in offset order (read_committed: up to the LSO)."""
    consumer: Any = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "failover-check",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    result: dict[int, list[tuple[bytes, bytes]]] = {}
    try:
        for p in range(PARTITIONS):
            consumer.assign([TopicPartition(topic, p, 0)])
            rows = result.setdefault(p, [])
            while True:
                m = consumer.poll(15)
                assert m is not None, f"timed out reading {topic}-{p}"
                if m.error():
                    break  # partition EOF
                rows.append((m.key(), m.value()))
    finally:
        consumer.close()
    return result


def _first_difference(got: list[bytes], expected: list[bytes]) -> int:
    pairs = zip(got, expected, strict=False)
    return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(got), len(expected)))


def _run_failovers(
    spark: Any, scenario: Scenario, tmp_path: Path, *, records: int, rate: float, kills: list[str]
) -> None:
    """``kills``: what to SIGKILL in turn, each of "output" (the leader of an output partition), "input"
    (the leader of an input partition) and "controller"; each killed broker is restarted before the next."""
    tag = f"{len(kills)}k{scenario.rng.randrange(1 << 30):x}"
    source, sink = (
        scenario.create_topic(f"fo-in-{tag}", PARTITIONS),
        scenario.create_topic(f"fo-out-{tag}", PARTITIONS),
    )
    checkpoint = tmp_path / "cp"
    args = _args(scenario, source, sink, checkpoint, "--trigger-interval", "300 milliseconds")
    module, parsed = pipeline.parse_args(args)
    restarts: list[str] = []
    events: list[str] = []

    def context() -> str:
        progress: dict[str, Any] = query.lastProgress or {}
        return (
            f"{seed_banner(scenario.seed)}\nevents: {events}\nquery restarts: {restarts}\n"
            f"query: {query.status}, last batch {progress.get('batchId')}, sink ends "
            f"{_committed_ends(scenario.bootstrap, sink)}\n{scenario.leadership()}"
        )

    feeder = Feeder(scenario.bootstrap, source, records, rate)
    query = pipeline.start(module, parsed, spark)
    feeder.start()
    try:

        def supervise() -> Any:
            """The running query; a failed one is restarted from its checkpoint (as a supervisor would)."""
            nonlocal query
            if not query.isActive:
                error = query.exception()
                reason = str(error).splitlines()[0] if error else "stopped"
                restarts.append(f"after {len(events)} failover events: {reason}")
                query = pipeline.start(module, parsed, spark)
            return query

        def committed() -> int:
            supervise()
            return sum(_committed_ends(scenario.bootstrap, sink).values())

        step = records // (len(kills) + 2)
        for number, what in enumerate(kills, start=1):
            target = committed() + step // 2

            def grown(target: int = target) -> bool:
                return committed() >= target

            scenario.wait_for(grown, f"output to grow before kill {number}", 300)
            time.sleep(scenario.rng.uniform(0, 1.0))  # anywhere in a micro-batch
            if what == "controller":
                victim, old = scenario.controller(), None
            else:
                topic = sink if what == "output" else source
                partition = scenario.rng.randrange(PARTITIONS)
                old = scenario.state(topic, partition)
                victim = old.leader
            events.append(f"kill {what} broker {victim}")
            scenario.event(events[-1])
            scenario.c.kill(victim)
            if old is not None:
                scenario.wait_new_leader(topic, partition, old)
            time.sleep(scenario.rng.uniform(0, 2.0))  # the query runs on two brokers for a while
            scenario.c.start_broker(victim)
            scenario.wait_converged()
            events.append(f"restarted broker {victim}")

        feeder.join(240)
        assert not feeder.is_alive(), "the feeder did not finish"
        assert feeder.error is None, f"feeder: {feeder.error!r}\n{context()}"
        inputs = _read(scenario.bootstrap, source, committed=False)
        total = sum(len(rows) for rows in inputs.values())
        scenario.wait_for(lambda: committed() >= total, f"the query to write all {total} records", 300)
        query.stop()
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(30)

        # nothing acknowledged is lost from the input
        present = {value for rows in inputs.values() for _key, value in rows}
        lost = sorted(feeder.acked - present)
        assert not lost, (
            f"{len(lost)} acknowledged records are missing from the input: {lost[:10]}\n{context()}"
        )
        # the output is the transformed input exactly: each input partition's records once, in order
        output = _read(scenario.bootstrap, sink, committed=True)
        for p in range(PARTITIONS):
            key = b"p%d" % p
            expected = [value.upper() for k, value in inputs[p] if k == key]
            got = [value for rows in output.values() for k, value in rows if k == key]
            assert got == expected, (
                f"input partition {p}: {len(got)} output records, {len(expected)} expected; "
                f"first difference at {_first_difference(got, expected)}\n"
                f"{context()}"
            )
        print(f"failovers: {events}; query restarts: {restarts}")
    finally:
        feeder.stop_event.set()
        with contextlib.suppress(Exception):
            query.stop()


def test_exactly_once_query_across_leader_failovers(spark: Any, scenario: Scenario, tmp_path: Path) -> None:
    _run_failovers(spark, scenario, tmp_path, records=2000, rate=100, kills=["output", "input"])


@pytest.mark.soak
def test_exactly_once_query_across_many_leader_failovers(
    spark: Any, scenario: Scenario, tmp_path: Path
) -> None:
    kinds = ["output", "input", "output", "controller", "input", "output"]
    _run_failovers(spark, scenario, tmp_path, records=9000, rate=120, kills=kinds)
