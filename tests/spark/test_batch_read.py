"""Batch reads: a topic range read through Spark equals what confluent-kafka reads, column for column."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from tests.spark.conftest import Kafka, spark_rows

pytestmark = pytest.mark.clients

N = 3000
PARTITIONS = 3


def _records(n: int, base_ts: int = 1_700_000_000_000) -> list[dict[str, Any]]:
    records = []
    for i in range(n):
        record: dict[str, Any] = {
            "value": b"value-%06d" % i if i % 97 else None,
            "key": b"key-%d" % (i % 13) if i % 5 else None,
            "partition": i % PARTITIONS,
            "timestamp": base_ts + i,
        }
        if i % 3 == 0:
            record["headers"] = [("h1", b"x%d" % i), ("h2", None)]
        records.append(record)
    return records


@pytest.fixture(scope="module")
def source_topic(kafka: Kafka) -> str:
    topic = "batch-read-source"
    kafka.create(topic, PARTITIONS)
    kafka.produce(topic, _records(N))
    return topic


def _load(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_whole_topic_equals_confluent_kafka(
    spark: Any, bootstrap: str, kafka: Kafka, source_topic: str
) -> None:
    df = _load(spark, bootstrap, subscribe=source_topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    got = spark_rows(df.collect())
    expected = sorted(kafka.read(source_topic, PARTITIONS), key=lambda t: (t[2], t[3], t[4]))
    assert len(got) == N
    assert got == expected
    # the Arrow path (raw record batches decoded into columns) reads the same rows
    arrow = _load(spark, bootstrap, subscribe=source_topic, includeHeaders="true", arrowDecode="true")
    assert spark_rows(arrow.collect()) == expected


def test_offset_range_json_equals_confluent_kafka(
    spark: Any, bootstrap: str, kafka: Kafka, source_topic: str
) -> None:
    start = {0: 17, 1: -2, 2: 500}
    end = {0: 400, 1: 3, 2: -1}
    df = _load(
        spark,
        bootstrap,
        subscribe=source_topic,
        startingOffsets=json.dumps({source_topic: {str(p): o for p, o in start.items()}}),
        endingOffsets=json.dumps({source_topic: {str(p): o for p, o in end.items()}}),
        minPartitions="7",
    )
    assert "headers" not in df.columns
    got = [t[:7] for t in spark_rows(df.collect())]
    expected = [
        t[:7] for t in kafka.read(source_topic, PARTITIONS, start={0: 17, 2: 500}, end={0: 400, 1: 3})
    ]
    assert got == sorted(expected, key=lambda t: (t[2], t[3], t[4]))
    assert len(got) == (400 - 17) + 3 + (N // PARTITIONS - 500)


def test_assign_pattern_and_timestamp(spark: Any, bootstrap: str, kafka: Kafka, source_topic: str) -> None:
    assigned = _load(spark, bootstrap, assign=json.dumps({source_topic: [1]}))
    assert [r.offset for r in assigned.orderBy("offset").select("offset").collect()] == list(
        range(N // PARTITIONS)
    )
    assert {r.partition for r in assigned.select("partition").distinct().collect()} == {1}

    by_pattern = _load(spark, bootstrap, subscribePattern="batch-read-sou.*")
    assert by_pattern.count() == N

    # record i has timestamp base + i and sits in partition i % 3 at offset i // 3
    since = _load(spark, bootstrap, subscribe=source_topic, startingTimestamp=str(1_700_000_000_000 + 2400))
    got = sorted((r.partition, r.offset) for r in since.select("partition", "offset").collect())
    assert got == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(2400, N))


def test_data_deleted_by_retention_is_reported_per_fail_on_data_loss(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any
) -> None:
    from confluent_kafka.admin import AdminClient

    topic = topic_name("deleted")
    kafka.create(topic, 1)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(100)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 40)])
    for future in futures.values():
        future.result(30)
    starting = json.dumps({topic: {"0": 10}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        _load(spark, bootstrap, subscribe=topic, startingOffsets=starting).collect()
    skipped = _load(spark, bootstrap, subscribe=topic, startingOffsets=starting, failOnDataLoss="false")
    assert [r.offset for r in skipped.orderBy("offset").collect()] == list(range(40, 100))
    # the Arrow path decides it the same way, from the broker's OFFSET_OUT_OF_RANGE answer
    with pytest.raises(Exception, match="failOnDataLoss"):
        _load(spark, bootstrap, subscribe=topic, startingOffsets=starting, arrowDecode="true").collect()
    arrow = _load(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=starting,
        failOnDataLoss="false",
        arrowDecode="true",
        **{"kafka.max.poll.records": "7"},
    )
    assert [r.offset for r in arrow.orderBy("offset").collect()] == list(range(40, 100))


def test_empty_topic_reads_no_rows(spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any) -> None:
    topic = topic_name("empty")
    kafka.create(topic, 2)
    assert _load(spark, bootstrap, subscribe=topic).count() == 0


def test_a_user_schema_is_refused(spark: Any, bootstrap: str, source_topic: str) -> None:
    reader = spark.read.format("tidelog").schema("value string").option("kafka.bootstrap.servers", bootstrap)
    with pytest.raises(Exception, match="fixed schema"):
        reader.option("subscribe", source_topic).load().collect()


def test_read_committed_reads_up_to_the_last_stable_offset(
    spark: Any, bootstrap: str, source_topic: str
) -> None:
    """No transactions in the topic: the last stable offset is the high watermark, every record is read."""
    df = _load(spark, bootstrap, subscribe=source_topic, **{"kafka.isolation.level": "read_committed"})
    assert df.count() == N
