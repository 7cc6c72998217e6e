"""The at-least-once writer writes exactly the DataFrame's rows (no retries), where the columns say."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType
from tests.spark.conftest import Kafka

pytestmark = pytest.mark.clients

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("headers", HEADERS),
    ]
)


def test_batch_write_writes_exactly_the_rows(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any
) -> None:
    a, b = topic_name("a"), topic_name("b")
    kafka.create(a, 3)
    kafka.create(b, 1)
    rows = []
    for i in range(2000):
        headers = [("n", b"%d" % i), ("empty", None)] if i % 4 == 0 else None
        key = b"k%d" % i if i % 7 else None
        value = b"v%d" % i if i % 11 else None
        rows.append((key, value, a if i % 2 else b, (i % 3) if i % 2 else 0, headers))
    spark.createDataFrame(rows, SCHEMA).repartition(4).write.format("tidelog").option(
        "kafka.bootstrap.servers", bootstrap
    ).mode("append").save()

    written = kafka.read(a, 3) + kafka.read(b, 1)
    got = sorted(((r[0], r[1], r[2], r[3], r[7]) for r in written), key=repr)
    expected = sorted(((k, v, t, p, tuple(h) if h else None) for k, v, t, p, h in rows), key=repr)
    assert got == expected  # every row once, in its partition, with its headers
    for topic, partitions in ((a, 3), (b, 1)):
        for p in range(partitions):
            offsets = [r[4] for r in written if r[2] == topic and r[3] == p]
            assert offsets == list(range(len(offsets)))


def test_topic_option_and_string_columns(spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any) -> None:
    out = topic_name("out")
    kafka.create(out, 1)
    df = spark.createDataFrame(
        [("k1", "héllo", "ignored"), (None, "x", "ignored")], "key string, value string, topic string"
    )
    df.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", out).mode(
        "append"
    ).save()
    assert sorted(((r[0], r[1]) for r in kafka.read(out, 1)), key=repr) == [
        (None, b"x"),
        (b"k1", "héllo".encode()),
    ]


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("value binary, extra int", {"topic": "t"}, "unexpected columns"),
        ("key binary", {"topic": "t"}, "needs a value column"),
        ("value binary", {}, "topic option or a topic column"),
        ("value int", {"topic": "t"}, "column value must be binary or string"),
        ("value binary", {"topic": "t", "deliveryGuarantee": "exactly-once"}, "is for streaming writes"),
    ],
)
def test_bad_writes_fail_at_plan_time(
    spark: Any, bootstrap: str, ddl: str, options: dict[str, str], message: str
) -> None:
    df = spark.createDataFrame([], ddl)
    writer = df.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.save()


def test_exactly_once_without_broker_transactions_is_a_typed_error_naming_the_feature() -> None:
    from tidelog.spark.exactly_once import ExactlyOnceUnavailableError
    from tidelog.spark.options import parse_writer_options
    from tidelog.spark.transactional import probe_transactions

    nobody = parse_writer_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    with pytest.raises(ExactlyOnceUnavailableError, match=r"InitProducerId with a transactional\.id") as info:
        probe_transactions(nobody, timeout_s=2)
    assert isinstance(info.value, NotImplementedError)
    assert "deliveryGuarantee=at-least-once" in str(info.value)
