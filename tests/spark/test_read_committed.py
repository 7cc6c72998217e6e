"""kafka.isolation.level=read_committed honoured by batch and streaming reads: aborted records never
appear, and nothing at or past an open transaction's first record (the last stable offset) is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.spark.conftest import Kafka

pytestmark = pytest.mark.clients


def _values(spark: Any, bootstrap: str, topic: str, isolation: str, arrow: bool = False) -> list[bytes]:
    df = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .option("arrowDecode", str(arrow).lower())
        .load()
    )
    return [r.value for r in df.orderBy("offset").collect()]


def test_read_committed_skips_aborted_and_stops_at_open_transactions(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    topic = topic_name("txn")
    kafka.create(topic, 1)
    # the open transaction spans three Spark queries: on a loaded machine that outlasts librdkafka's 60 s
    # default transaction timeout, and the broker's abort would fence this producer's final commit
    producer: Any = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": topic_name("producer"),
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(30)
    for kind, count, end in (("c", 10, "commit"), ("a", 5, "abort"), ("d", 3, "commit"), ("o", 4, None)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, b"%s%d" % (kind.encode(), i))
        producer.flush(30)
        if end == "commit":
            producer.commit_transaction(30)
        elif end == "abort":
            producer.abort_transaction(30)
    committed = [b"c%d" % i for i in range(10)] + [b"d%d" % i for i in range(3)]
    everything = (
        committed[:10] + [b"a%d" % i for i in range(5)] + committed[10:] + [b"o%d" % i for i in range(4)]
    )

    assert _values(spark, bootstrap, topic, "read_committed") == committed  # stops before the open one
    assert _values(spark, bootstrap, topic, "read_uncommitted") == everything
    # the Arrow path filters aborted records and control batches itself, from the Fetch answer
    assert _values(spark, bootstrap, topic, "read_committed", arrow=True) == committed
    assert _values(spark, bootstrap, topic, "read_uncommitted", arrow=True) == everything

    query = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .writeStream.format("memory")
        .queryName("read_committed_stream")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    streamed = [
        r.value for r in spark.sql("select value from read_committed_stream order by offset").collect()
    ]
    assert streamed == committed

    producer.commit_transaction(30)
    assert _values(spark, bootstrap, topic, "read_committed") == committed + [b"o%d" % i for i in range(4)]
