"""Fixtures for the Spark tests: one SparkSession (local[2]) and one tidelog broker for the whole session.

Spark starts once (a JVM start costs seconds); every test uses its own topics (``topic_name``) and its
own checkpoint directory (``tmp_path``). The broker is checked like the server tests' brokers at the end:
still running, a graceful stop, no traceback or ERROR line in its log.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("spark-broker")
    # The tests produce event-time fixtures dated in the past (2023, 2026-01-01): with Kafka's default
    # retention (7 days) the broker's periodic retention check would delete them mid-test.
    broker = Broker(
        {"num.partitions": 1, "log.retention.ms": -1}, data_dir=base / "data", run_dir=base / "run"
    )
    broker.start()
    try:
        yield broker
        assert broker.is_running, f"broker died during the Spark tests:\n{broker.log_tail()}"
        code = broker.stop(timeout=30)
        assert code == 0, f"broker exit code {code}:\n{broker.log_tail()}"
        text = broker.log_path.read_text(errors="replace")
        problems = [line for line in text.splitlines() if "Traceback" in line or "level=ERROR" in line]
        assert not problems, "broker logged errors:\n" + "\n".join(problems[:20])
    finally:
        broker.close()


@pytest.fixture(scope="session")
def bootstrap(spark_broker: Broker) -> str:
    return spark_broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from tidelog.spark import session

    spark = session(
        "local[2]",
        app_name="tidelog-tests",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "1g",
            "spark.sql.streaming.minBatchesToRetain": "10",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``topic_name("in")`` -> a topic name unique to this test."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:150]

    def name(suffix: str) -> str:
        return f"{base}-{suffix}"

    return name


class Kafka:
    """confluent-kafka helpers against the session broker."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def create(self, topic: str, partitions: int = 1) -> None:
        futures = self.admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        futures[topic].result(30)

    def produce(self, topic: str, records: list[dict[str, Any]]) -> None:
        """Each record: value, and optionally key, partition, timestamp (ms), headers."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        for r in records:
            kwargs = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if r.get(k) is not None}
            producer.produce(topic, value=r["value"], **kwargs)
        assert producer.flush(30) == 0

    def read(
        self,
        topic: str,
        partitions: int,
        *,
        start: dict[int, int] | None = None,
        end: dict[int, int] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Every record of [start, end) per partition (default: all), as Spark's row tuples."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "spark-tests",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        rows: list[tuple[Any, ...]] = []
        try:
            for p in range(partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                first = (start or {}).get(p, low)
                last = (end or {}).get(p, high)
                if first >= last:
                    continue
                consumer.assign([TopicPartition(topic, p, first)])
                while True:
                    m = consumer.poll(10)
                    assert m is not None, f"timed out reading {topic}:{p}"
                    if m.error():
                        continue
                    offset = m.offset()
                    assert offset is not None
                    if offset >= last:
                        break
                    kind, ts = m.timestamp()
                    headers = m.headers()
                    rows.append(
                        (
                            m.key(),
                            m.value(),
                            m.topic(),
                            m.partition(),
                            m.offset(),
                            ts,
                            kind - 1,
                            tuple(headers) if headers else None,
                        )
                    )
                    if m.offset() == last - 1:
                        break
        finally:
            consumer.close()
        return rows


@pytest.fixture(scope="session")
def kafka(bootstrap: str) -> Kafka:
    return Kafka(bootstrap)


def spark_rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Spark rows of the tidelog schema -> the tuples ``Kafka.read`` gives (timestamp in ms)."""
    result = []
    for r in rows:
        ts_ms = round(r.timestamp.timestamp() * 1000)
        headers = getattr(r, "headers", None)
        result.append(
            (
                r.key,
                r.value,
                r.topic,
                r.partition,
                r.offset,
                ts_ms,
                r.timestampType,
                tuple((h.key, h.value) for h in headers) if headers else None,
            )
        )
    return sorted(result, key=lambda t: (t[2], t[3], t[4]))


def read_committed_messages(bootstrap: str, topic: str, partitions: int = 1) -> list[Any]:
    """Every message of ``topic``'s first ``partitions`` partitions up to their last stable offsets, read
    read_committed, partition by partition in offset order."""
    consumer: Any = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "read-committed-check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    messages = []
    try:
        for p in range(partitions):
            consumer.assign([TopicPartition(topic, p, 0)])
            while True:
                m = consumer.poll(15)
                assert m is not None, "timed out reading the sink topic"
                if m.error():
                    break  # partition EOF (at the last stable offset)
                messages.append(m)
    finally:
        consumer.close()
    return messages


def read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes]:
    """The values of :func:`read_committed_messages`."""
    return [m.value() for m in read_committed_messages(bootstrap, topic, partitions)]
