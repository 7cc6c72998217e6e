"""The broker killed (SIGKILL) and restarted under a running query: the output is still exact.

The query reads with a short ``kafkaConsumer.pollTimeoutMs``; while the broker is down a micro-batch
either waits for it (librdkafka reconnects) or fails. A failed query is restarted from its checkpoint,
as a supervisor would. Either way the Parquet output (Spark's file sink commits each micro-batch once)
holds every input record exactly once.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from tests.spark.conftest import Kafka

from tidelog.testing import Broker

pytestmark = pytest.mark.clients


def _start(
    spark: Any, bootstrap: str, topic: str, out: Path, checkpoint: Path, trigger: dict[str, Any]
) -> Any:
    return (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200")
        .option("kafkaConsumer.pollTimeoutMs", "20000")
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def test_broker_killed_under_a_running_query(spark: Any, tmp_path: Path) -> None:
    broker = Broker(data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    broker.start()
    try:
        kafka = Kafka(broker.bootstrap_servers)
        topic = "restart-under-query"
        kafka.create(topic, 2)
        kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(2000)])
        out, checkpoint = tmp_path / "out", tmp_path / "cp"

        query = _start(
            spark, broker.bootstrap_servers, topic, out, checkpoint, {"processingTime": "200 milliseconds"}
        )
        deadline = time.monotonic() + 60
        while sum(p["numInputRows"] for p in query.recentProgress) < 400 and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.kill()
        time.sleep(2)
        broker.restart()
        kafka = Kafka(broker.bootstrap_servers)
        kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(2000, 2600)])

        if query.isActive:  # it survived the outage (or has not noticed yet): let it drain, then stop it
            deadline = time.monotonic() + 90
            while query.isActive and time.monotonic() < deadline:
                offsets = query.lastProgress and query.lastProgress["sources"][0]["endOffset"]
                if (
                    offsets
                    and '"0":1300' in offsets.replace(" ", "")
                    and '"1":1300' in offsets.replace(" ", "")
                ):
                    break
                time.sleep(0.2)
            query.stop()
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(1)

        # a supervisor restarts the query from its checkpoint (also a no-op if it already finished)
        query = _start(spark, broker.bootstrap_servers, topic, out, checkpoint, {"availableNow": True})
        query.awaitTermination(120)
        assert query.exception() is None

        rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
        got = sorted((r.partition, r.offset, r.value) for r in rows)
        expected = sorted((i % 2, i // 2, b"%d" % i) for i in range(2600))
        assert got == expected
    finally:
        broker.close()
