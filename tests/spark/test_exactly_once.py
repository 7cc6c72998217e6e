"""The exactly-once sink (``deliveryGuarantee=exactly-once``) on broker transactions.

- The transform example with ``--exactly-once``: topic B, read with read_committed, holds exactly the
  transformed records of topic A.
- A micro-batch replayed after it was committed (Spark's commit log entry removed, as when the driver
  dies between the sink's commit and its own) writes nothing again.
- The kill test: windowed counts (a shuffle, state, append mode behind a watermark) written with the two-phase sink to three
  partitions, SIGKILLed at seeded random points (the driver's process group, or one of Spark's Python
  workers; in CI a worker, then the driver; twenty kills in the soak) and restarted from its checkpoint
  whenever it died. A read_committed reader running throughout never sees part of a task's transaction in
  a partition, nor any of batch k + 1 before all of batch k (tests/spark/batch_visibility.py); after the
  final run the output is exactly one (key@window, count) record per closed window, and the reader
  consumed exactly that.
- The broker SIGKILLed and restarted under the query: the same.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.errors import StreamingQueryException
from tests.spark.batch_visibility import OutputRecord, check_samples, partial_batch_samples
from tests.spark.conftest import Kafka, read_committed, read_committed_messages

from tidelog.spark import pipeline
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _stable_end(bootstrap: str, topic: str) -> int:
    """The sink partition's last stable offset (moves when a transaction commits or aborts)."""
    consumer: Any = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "eos-lso", "isolation.level": "read_committed"}
    )
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1])
    finally:
        consumer.close()


def _transform_args(bootstrap: str, checkpoint: Path, source: str, sink: str, *extra: str) -> list[str]:
    return [
        str(EXAMPLES / "transform.py"),
        "--bootstrap-server",
        bootstrap,
        "--checkpoint",
        str(checkpoint),
        "--source",
        source,
        "--sink",
        sink,
        "--exactly-once",
        *extra,
    ]


def _run(spark: Any, args: list[str]) -> Any:
    module, parsed = pipeline.parse_args(args)
    query = pipeline.start(module, parsed, spark)
    query.awaitTermination(180)
    assert query.exception() is None
    return query


def test_transform_exactly_once_and_a_replayed_batch_writes_nothing_again(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    kafka.create(source, 2)
    kafka.create(sink, 2)
    kafka.produce(source, [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2} for i in range(500)])
    checkpoint = tmp_path / "cp"
    args = _transform_args(
        bootstrap, checkpoint, source, sink, "--available-now", "--max-offsets-per-trigger", "200"
    )
    query = _run(spark, args)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [200, 200, 100]
    expected = sorted(b"V%d" % i for i in range(500))
    assert sorted(read_committed(bootstrap, sink, 2)) == expected

    # The driver "dies" after the sink committed batch 2 but before Spark recorded it: Spark replays batch 2.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert last == 2
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    kafka.produce(
        source, [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2} for i in range(500, 600)]
    )
    _run(spark, args)
    assert sorted(read_committed(bootstrap, sink, 2)) == sorted(b"V%d" % i for i in range(600))


# -- the kill test --------------------------------------------------------------------------------------

KEYS, WINDOW_S, STEP_MS = 7, 2, 40
PIPELINE = Path(__file__).resolve().parent / "pipelines" / "windowed_counts_batches.py"


def _windowed_command(bootstrap: str, checkpoint: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tidelog.spark.pipeline",
        str(PIPELINE),
        "--bootstrap-server",
        bootstrap,
        "--checkpoint",
        str(checkpoint),
        "--source",
        "eos-in",
        "--sink",
        "eos-out",
        "--max-offsets-per-trigger",
        "100",
        *extra,
        "--master",
        "local[2,3]",  # 3 attempts per task: a task whose Python worker is killed is retried
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",  # two write tasks (two transactions) per micro-batch
    ]


def _input(n: int, base_ms: int) -> list[dict[str, Any]]:
    """``n`` records in event-time order, then one an hour later whose watermark closes every window before
    it (its own stays open)."""
    records = [
        {"key": b"k%d" % (i % KEYS), "value": b"x", "partition": i % 2, "timestamp": base_ms + i * STEP_MS}
        for i in range(n)
    ]
    return [*records, {"key": b"flush", "value": b"x", "partition": n % 2, "timestamp": base_ms + 3_600_000}]


def _expected(records: list[dict[str, Any]]) -> Counter[tuple[bytes, bytes]]:
    """(key@window, count) of every window the query must have written, once each: all but the last
    record's."""
    counts: Counter[bytes] = Counter(
        b"%s@%d" % (r["key"], r["timestamp"] // 1000 // WINDOW_S * WINDOW_S) for r in records[:-1]
    )
    return Counter((group, b"%d" % count) for group, count in counts.items())


def _output(bootstrap: str, topic: str, partitions: int) -> list[OutputRecord]:
    """Every committed record of ``topic`` (read_committed, up to each partition's LSO)."""
    return [_record(m) for m in read_committed_messages(bootstrap, topic, partitions)]


def _record(m: Any) -> OutputRecord:
    (name, task), *_ = m.headers()
    assert name == "task"
    batch, write_task = task.split(b":")
    return OutputRecord(m.partition(), m.offset(), int(batch), int(write_task), m.key(), m.value())


class _Reader(threading.Thread):
    """A read_committed reader running throughout the test: it samples each output partition's last stable
    offset in turn (``samples``, in time order) and consumes what becomes readable (``delivered``)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.consumer: Any = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "eos-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.topic = topic
        self.partitions = partitions
        self.samples: list[tuple[int, int]] = []
        self.delivered: list[OutputRecord] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            while not self.stopping.is_set():
                for p in range(self.partitions):
                    _, lso = self.consumer.get_watermark_offsets(
                        TopicPartition(self.topic, p), timeout=30, cached=False
                    )
                    self.samples.append((p, int(lso)))
                for m in self.consumer.consume(500, 0.05):
                    if not m.error():
                        self.delivered.append(_record(m))
        except Exception as exc:  # reported by the test, which asserts there was none
            self.errors.append(repr(exc))
        finally:
            self.consumer.close()


def _python_workers(driver: int) -> list[int]:
    """Spark's Python worker processes under the driver's JVM (pyspark.daemon and the workers it forks,
    the data source's planner workers)."""
    table = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in table.splitlines():
        pid, ppid, *command = line.split(None, 2)
        children.setdefault(int(ppid), []).append((int(pid), command[0] if command else ""))
    workers: list[int] = []
    stack = [jvm for jvm, args in children.get(driver, []) if "java" in args]
    while stack:
        parent = stack.pop()
        for child, args in children.get(parent, []):
            stack.append(child)
            if "pyspark" in args:
                workers.append(child)
    return workers


# Most of this test's time is Spark itself: a query process takes 15-25 s to start (JVM, the Python
# workers that plan the data source) and a micro-batch 2-3 s, so its cost is the number of query runs.
# CI: a Python worker kill, then a driver kill (two runs with the final one); the soak: 20 kills.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("kills", "n"),
    [(2, 800), pytest.param(20, 6000, marks=[pytest.mark.soak, pytest.mark.timeout(3600)])],
    ids=["ci", "soak"],
)
def test_killed_windowed_counts_restarted_from_its_checkpoint_read_committed_sees_whole_batches(
    tmp_path: Path, kills: int, n: int
) -> None:
    """Windowed counts (a shuffle, state, append mode behind a watermark) written with the two-phase sink to 3 partitions;
    the query is SIGKILLed at seeded random points: the driver's process group, or one of Spark's Python
    worker processes (every third kill, the first included). A worker kill fails the task it ran, which
    Spark retries (``local[2,3]``), or, when it was the driver side's data source worker, fails the query:
    its process exits 1 and is restarted from the checkpoint like a killed one. Throughout, a read_committed
    reader samples what is readable (:mod:`tests.spark.batch_visibility`); after the final run the output
    is exactly one record per closed window with its count, from a committed micro-batch."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    print(f"seed {seed}")  # pytest shows it when the test fails
    broker = Broker(
        {"transaction.two.phase.commit.enable": True, "log.retention.ms": -1},
        data_dir=tmp_path / "data",
        run_dir=tmp_path / "run",
    )
    broker.start()
    reader: _Reader | None = None
    process: subprocess.Popen[bytes] | None = None
    try:
        bootstrap = broker.bootstrap_servers
        kafka = Kafka(bootstrap)
        kafka.create("eos-in", 2)
        kafka.create("eos-out", 3)
        records = _input(n, (int(time.time()) // WINDOW_S - 1000) * WINDOW_S * 1000)
        kafka.produce("eos-in", records)
        reader = _Reader(bootstrap, "eos-out", 3)
        reader.start()
        checkpoint = tmp_path / "cp"
        outcomes: list[str] = []
        while len([o for o in outcomes if not o.startswith("exited")]) < kills:
            kill = len([o for o in outcomes if not o.startswith("exited")])
            assert len(outcomes) - kill <= kills, f"seed {seed}: the query keeps failing: {outcomes}"
            if process is None or process.poll() is not None:
                process = subprocess.Popen(
                    _windowed_command(bootstrap, checkpoint, "--trigger-interval", "200 milliseconds"),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            before = _committed(checkpoint)
            deadline = time.monotonic() + 600  # a bound, not a wait: a loaded machine starts Spark slowly
            while _committed(checkpoint) == before and process.poll() is None:
                assert time.monotonic() < deadline, f"seed {seed}: no micro-batch committed in 600 s"
                time.sleep(0.1)  # until a micro-batch committed since the last kill: batches are flowing
            time.sleep(rng.uniform(0, 2.0))  # then anywhere: mid-write, prepared, mid-commit, between batches
            if process.poll() is not None:
                outcomes.append(f"exited {process.returncode}")
                continue
            workers = _python_workers(process.pid) if kill % 3 == 0 else []
            if workers:
                os.kill(rng.choice(workers), signal.SIGKILL)
                outcomes.append("worker")
            else:
                os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and Python workers
                process.wait(30)
                outcomes.append("driver")
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        assert _committed(checkpoint) < n // 100, (
            f"seed {seed}: the kills landed after the query had finished"
        )
        final = subprocess.run(
            _windowed_command(bootstrap, checkpoint, "--available-now"),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert final.returncode == 0, f"seed {seed}: {final.stderr[-3000:]}"
        output = _output(bootstrap, "eos-out", 3)
        assert Counter((r.key, r.value) for r in output) == _expected(records), (
            f"seed {seed}, kills {outcomes}"
        )
        assert {r.batch for r in output} <= set(range(_committed(checkpoint)))
        # The reader saw the whole output, each record once, in offset order, as the final read has it.
        drained = time.monotonic() + 60
        while len(reader.delivered) < len(output) and time.monotonic() < drained:
            time.sleep(0.1)
        reader.stopping.set()
        reader.join(60)
        assert reader.errors == []
        assert sorted(reader.delivered, key=lambda r: (r.partition, r.offset)) == output
        check_samples(output, reader.samples)
        print(
            f"kills {outcomes}; {len(reader.samples)} samples, "
            f"{partial_batch_samples(output, reader.samples)} showed part of a batch's transactions"
        )
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        if reader is not None:
            reader.stopping.set()
        broker.close()


def _committed(checkpoint: Path) -> int:
    """How many micro-batches the query committed (its commit log's last batch + 1)."""
    commits = checkpoint / "commits"
    return (
        1 + max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1)
        if commits.is_dir()
        else 0
    )


def test_broker_sigkilled_under_an_exactly_once_query(spark: Any, tmp_path: Path) -> None:
    """The broker crashes and restarts while the query writes: after the query is restarted from its
    checkpoint (if it failed), the sink still holds every transformed record exactly once."""
    broker = Broker(data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    broker.start()
    try:
        kafka = Kafka(broker.bootstrap_servers)
        kafka.create("crash-in", 2)
        kafka.create("crash-out", 1)
        kafka.produce("crash-in", [{"value": b"r%d" % i, "partition": i % 2} for i in range(2000)])
        checkpoint = tmp_path / "cp"
        args = _transform_args(
            broker.bootstrap_servers, checkpoint, "crash-in", "crash-out", "--max-offsets-per-trigger", "200"
        )
        module, parsed = pipeline.parse_args([*args, "--trigger-interval", "200 milliseconds"])
        query = pipeline.start(module, parsed, spark)
        deadline = time.monotonic() + 60
        while _stable_end(broker.bootstrap_servers, "crash-out") < 300 and time.monotonic() < deadline:
            time.sleep(0.1)
        broker.kill()
        time.sleep(1)
        broker.restart()
        time.sleep(3)
        query.stop()
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(1)
        _run(spark, [*args, "--available-now"])
        got = read_committed(broker.bootstrap_servers, "crash-out")
        assert sorted(got) == sorted(b"R%d" % i for i in range(2000))
    finally:
        broker.close()
