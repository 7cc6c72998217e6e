"""The at-least-once writer writes exactly the DataFrame's rows (no retries), where the columns say."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from tests.spark.conftest import Kafka
from tests.support.murmur2 import PUBLISHED, java_murmur2, java_partition

from tidelog.spark.options import OptionError, parse_writer_options
from tidelog.spark.writer import check_input_schema

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
        ("key binary", {"topic": "t"}, "Required attribute 'value' not found"),
        ("value binary", {}, "topic option required when no 'topic' attribute is present"),
        ("value int", {"topic": "t"}, "value attribute unsupported type int"),
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


def _schema(**columns: Any) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])


@pytest.mark.parametrize(
    ("columns", "topic", "message"),
    [
        (
            {"topic": IntegerType()},
            None,
            "topic attribute unsupported type int. topic attribute type must be a string",
        ),
        (
            {"key": IntegerType()},
            "t",
            "key attribute unsupported type int. key attribute type must be a string or binary",
        ),
        ({"partition": LongType()}, "t", "partition attribute unsupported type bigint"),
        ({"headers": ArrayType(StringType())}, "t", "headers attribute unsupported type array<string>"),
        ({"timestamp": StringType()}, "t", "timestamp attribute unsupported type string"),
    ],
)
def test_column_types_are_checked_as_spark_does(
    columns: dict[str, Any], topic: str | None, message: str
) -> None:
    options = parse_writer_options({"kafka.bootstrap.servers": "h:1", **({"topic": topic} if topic else {})})
    with pytest.raises(OptionError, match=re.escape(message)):
        check_input_schema(_schema(value=BinaryType(), **columns), options)


def test_other_columns_and_a_timestamp_are_accepted() -> None:
    options = parse_writer_options({"kafka.bootstrap.servers": "h:1", "topic": "t"})
    schema = _schema(
        key=BinaryType(),
        value=BinaryType(),
        topic=IntegerType(),  # the topic option wins, and the column is not checked, as in Spark
        offset=LongType(),
        timestamp=TimestampType(),
        timestampType=IntegerType(),
        headers=HEADERS,
        extra=MapType(StringType(), IntegerType()),
    )
    check_input_schema(schema, options)


def test_exactly_once_without_broker_transactions_is_a_typed_error_naming_the_feature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tidelog.spark import retry
    from tidelog.spark.exactly_once import ExactlyOnceUnavailableError
    from tidelog.spark.options import parse_writer_options
    from tidelog.spark.transactional import probe_transactions

    monkeypatch.setattr(retry, "API_TIMEOUT_S", 4.0)  # an unreachable broker is asked again for 4 s, not 60
    nobody = parse_writer_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    with pytest.raises(ExactlyOnceUnavailableError, match=r"InitProducerId with a transactional\.id") as info:
        probe_transactions(nobody, timeout_s=2)
    assert isinstance(info.value, NotImplementedError)
    assert "deliveryGuarantee=at-least-once" in str(info.value)


def test_a_transactions_probe_refused_is_not_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Authorization or an unsupported version fails the probe at its first answer; a broker away for now
    (a lost connection, a timeout, the coordinator moving or loading) is asked again."""
    from confluent_kafka import KafkaError, KafkaException

    from tidelog.spark import retry, transactional
    from tidelog.spark.exactly_once import ExactlyOnceUnavailableError
    from tidelog.spark.options import parse_writer_options

    answers = [
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._TIMED_OUT,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ]
    asked: list[float] = []

    class Producer:
        def __init__(self, config: dict[str, str]) -> None:
            assert config["transactional.id"] == "tidelog-spark-probe"

        def init_transactions(self, timeout: float) -> None:
            asked.append(timeout)
            raise KafkaException(KafkaError(answers.pop(0)))

    sleeps: list[float] = []
    monkeypatch.setattr(transactional, "Producer", Producer)
    monkeypatch.setattr(retry, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleeps.append))
    options = parse_writer_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    with pytest.raises(ExactlyOnceUnavailableError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        transactional.probe_transactions(options)
    assert (len(asked), sleeps, answers) == (3, [0.1, 0.2], [])
    assert asked[0] == 15.0

    for code, retriable in [
        (KafkaError._TRANSPORT, True),
        (KafkaError.NOT_COORDINATOR, True),
        (KafkaError.COORDINATOR_NOT_AVAILABLE, True),
        (KafkaError.REQUEST_TIMED_OUT, True),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, False),
        (KafkaError.UNSUPPORTED_VERSION, False),
    ]:
        assert retry.kafka_unreachable(KafkaException(KafkaError(code))) is retriable, code


def test_murmur2_port_matches_kafkas_published_values() -> None:
    assert {key: java_murmur2(key) for key in PUBLISHED} == PUBLISHED
    assert java_murmur2(b"kafka") & 0xFFFFFFFF == 0xD067CF64  # librdkafka's rdmurmur2.c vector


def test_keys_land_where_the_java_client_puts_them(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any
) -> None:
    """The sink's default partitioner is Kafka's: toPositive(murmur2(key)) % partitions, as format("kafka")."""
    out = topic_name("keyed")
    kafka.create(out, 7)
    keys = [*PUBLISHED, *(b"user-%d" % i for i in range(200))]
    df = spark.createDataFrame([(k, b"v") for k in keys], "key binary, value binary")
    df.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", out).mode(
        "append"
    ).save()
    got = {r[0]: r[3] for r in kafka.read(out, 7)}
    assert got == {k: java_partition(k, 7) for k in keys}


def test_a_sources_rows_are_written_as_they_are(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any
) -> None:
    """load().write mirrors a topic: offset, partition, timestampType ... are ignored as Spark does, and the
    timestamp column (Spark 4) becomes the record's CreateTime."""
    source, mirror = topic_name("src"), topic_name("mirror")
    kafka.create(source, 1)
    kafka.create(mirror, 1)
    kafka.produce(
        source,
        [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": 1_700_000_000_000 + i} for i in range(20)],
    )
    rows = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("includeHeaders", "true")
        .load()
        .drop("topic")
    )
    rows.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", mirror).mode(
        "append"
    ).save()
    got = sorted((r[0], r[1], r[5], r[6]) for r in kafka.read(mirror, 1))
    assert got == sorted((b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, 0) for i in range(20))
