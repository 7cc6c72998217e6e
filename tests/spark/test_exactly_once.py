"""The exactly-once sink (``deliveryGuarantee=exactly-once``) on broker transactions.

- The transform example with ``--exactly-once``: topic B, read with read_committed, holds exactly the
  transformed records of topic A.
- A micro-batch replayed after it was committed (Spark's commit log entry removed, as when the driver
  dies between the sink's commit and its own) writes nothing again.
- The query SIGKILLed mid-micro-batch several times (twice in CI, three times in the soak) and restarted
  from its checkpoint: B still holds each transformed record exactly once.
- The broker SIGKILLed and restarted under the query: the same.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.errors import StreamingQueryException
from tests.spark.conftest import Kafka, read_committed

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


def _command(bootstrap: str, checkpoint: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tidelog.spark.pipeline",
        *_transform_args(
            bootstrap, checkpoint, "eos-in", "eos-out", "--max-offsets-per-trigger", "150", *extra
        ),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
    ]


# Most of this test's time is Spark itself: a query process takes 15-25 s to start (JVM, the Python
# workers that plan the data source) and a micro-batch about 2-3 s, so its cost is the number of runs
# (kills + 1) and of micro-batches (records / 150). CI kills the query twice over 1,500 records; the soak
# three times over 3,000.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("kills", "n"), [(2, 1500), pytest.param(3, 3000, marks=pytest.mark.soak)], ids=["ci", "soak"]
)
def test_sigkilled_query_restarted_from_its_checkpoint_writes_each_record_once(
    tmp_path: Path, kills: int, n: int
) -> None:
    broker = Broker(data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    broker.start()
    try:
        kafka = Kafka(broker.bootstrap_servers)
        kafka.create("eos-in", 2)
        kafka.create("eos-out", 1)
        kafka.produce("eos-in", [{"value": b"record %d" % i, "partition": i % 2} for i in range(n)])
        checkpoint = tmp_path / "cp"
        rng = random.Random(7)
        killed = 0
        for _ in range(kills):
            before = _stable_end(broker.bootstrap_servers, "eos-out")
            process = subprocess.Popen(
                _command(broker.bootstrap_servers, checkpoint, "--trigger-interval", "200 milliseconds"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + 180  # a bound, not a wait: a loaded machine starts Spark slowly
            while _stable_end(broker.bootstrap_servers, "eos-out") == before and time.monotonic() < deadline:
                time.sleep(0.1)  # until this run committed something: micro-batches are flowing
            time.sleep(rng.uniform(0, 1.5))  # then anywhere: mid-write, mid-commit, between batches
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)  # the driver and its JVM
                killed += 1
            process.wait(30)
        assert killed == kills
        committed_before_final = len(read_committed(broker.bootstrap_servers, "eos-out"))
        assert 0 < committed_before_final < n  # the kills landed mid-stream
        final = subprocess.run(
            _command(broker.bootstrap_servers, checkpoint, "--available-now"),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert final.returncode == 0, final.stderr[-3000:]
        got = read_committed(broker.bootstrap_servers, "eos-out")
        assert sorted(got) == sorted(b"RECORD %d" % i for i in range(n))
    finally:
        broker.close()


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
