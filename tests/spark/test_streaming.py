"""Streaming reads: admission control, availableNow, exact resumption from the checkpoint, new
partitions and topics, data lost to retention."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from tests.spark.conftest import Kafka

pytestmark = pytest.mark.clients


def _stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _input_rows(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def test_max_offsets_per_trigger_gives_the_expected_micro_batches(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    topic = topic_name("in")
    kafka.create(topic, 3)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 3} for i in range(1000)])
    query = (
        _stream(spark, bootstrap, subscribe=topic, maxOffsetsPerTrigger="300")
        .writeStream.format("memory")
        .queryName("admission")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert _input_rows(query) == [300, 300, 300, 100]
    values = sorted(int(r.value) for r in spark.sql("select value from admission").collect())
    assert values == list(range(1000))
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {topic: {"0": 334, "1": 333, "2": 333}}


def _archive(spark: Any, bootstrap: str, out: Path, checkpoint: Path, **options: str) -> Any:
    return (
        _stream(spark, bootstrap, **options)
        .select("topic", "partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )


def test_restart_from_checkpoint_resumes_exactly(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    """Stopped mid-stream, restarted twice (new data, a new partition, a new topic matching the pattern in
    between): every input offset is in the output exactly once."""
    prefix = topic_name("p")
    first, second = f"{prefix}-a", f"{prefix}-b"
    kafka.create(first, 2)
    kafka.produce(first, [{"value": b"a%d" % i, "partition": i % 2} for i in range(600)])
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    options = {"subscribePattern": f"{prefix}-.*", "maxOffsetsPerTrigger": "100"}

    # run 1: micro-batches every 100 ms, stopped after a few of them, wherever it is
    query = (
        _archive(spark, bootstrap, out, checkpoint, **options)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    deadline = time.monotonic() + 60
    while len(_input_rows(query)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
    assert query.exception() is None
    read_before_restart = sum(_input_rows(query))
    assert 200 <= read_before_restart < 600

    # more data, a new partition, a new topic that matches the pattern
    kafka.produce(first, [{"value": b"a%d" % i, "partition": i % 2} for i in range(600, 800)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(first, 3)])[first].result(30)
    kafka.produce(first, [{"value": b"new%d" % i, "partition": 2} for i in range(30)])
    kafka.create(second, 1)
    kafka.produce(second, [{"value": b"b%d" % i} for i in range(70)])
    time.sleep(1)  # metadata of the new partition and topic reach the client caches

    query = _archive(spark, bootstrap, out, checkpoint, **options).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None

    # run 3: nothing new, nothing read again
    query = _archive(spark, bootstrap, out, checkpoint, **options).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    assert _input_rows(query) == []

    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r.topic, r.partition, r.offset) for r in rows)
    expected = sorted(
        [(first, p, o) for p in range(2) for o in range(400)]
        + [(first, 2, o) for o in range(30)]
        + [(second, 0, o) for o in range(70)]
    )
    assert got == expected  # none missing, none twice
    assert len({(r.topic, r.partition, r.offset) for r in rows}) == len(rows)


def test_streaming_data_loss_per_fail_on_data_loss(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    topic = topic_name("lossy")
    kafka.create(topic, 1)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(100)])

    def run(name: str, **options: str) -> Any:
        query = (
            _stream(spark, bootstrap, subscribe=topic, **options)
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(120)
        return query

    assert run("strict", maxOffsetsPerTrigger="30").exception() is None
    assert run("lenient", maxOffsetsPerTrigger="30").exception() is None
    # both checkpoints are at offset 100; more data arrives and retention deletes part of it unread
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(100, 200)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
        future.result(30)

    strict = run("strict")
    assert strict.exception() is not None
    assert "failOnDataLoss" in str(strict.exception())
    lenient = run("lenient", failOnDataLoss="false")
    assert lenient.exception() is None
    assert _input_rows(lenient) == [50]
