"""The driver's questions to a real broker: one Metadata and one batched ListOffsets per trigger however
many partitions, offsets by time, retries, and Spark's rule for offsets JSON (no Spark needed)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.streaming.datasource import ReadMaxRows
from tests.spark.conftest import Kafka

from tidelog.spark import cluster as cluster_module
from tidelog.spark import retry as retry_module
from tidelog.spark.cluster import ClusterView
from tidelog.spark.offsets import OffsetsJsonError
from tidelog.spark.options import parse_reader_options
from tidelog.spark.reader import StreamReader

pytestmark = pytest.mark.clients

PARTITIONS = 200


@pytest.fixture(scope="module")
def wide_topic(kafka: Kafka) -> str:
    topic = "driver-offsets-wide"
    kafka.create(topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        for i in range(p % 4):
            producer.produce(topic, b"%d" % i, partition=p, timestamp=1_700_000_000_000 + 1000 * i)
    assert producer.flush(30) == 0
    return topic


def _options(bootstrap: str, **options: str) -> Any:
    return parse_reader_options({"kafka.bootstrap.servers": bootstrap, **options}, streaming=True)


def test_a_trigger_costs_one_metadata_and_one_list_offsets(bootstrap: str, wide_topic: str) -> None:
    reader = StreamReader(
        _options(bootstrap, subscribe=wide_topic, maxOffsetsPerTrigger="100", startingOffsets="earliest")
    )
    start = reader.initialOffset()
    assert start == {wide_topic: {str(p): 0 for p in range(PARTITIONS)}}
    cluster = reader._view()
    before = cluster.round_trips
    end = reader.latestOffset(start, ReadMaxRows(100))
    latest = reader.reportLatestOffset()
    reader.partitions(start, end)
    assert cluster.round_trips - before == 2  # Metadata + ListOffsets for 200 partitions
    assert latest == {wide_topic: {str(p): p % 4 for p in range(PARTITIONS)}}
    assert sum(sum(v.values()) for v in end.values()) == 100
    reader.stop()


def test_watermarks_and_times_are_batched(bootstrap: str, wide_topic: str) -> None:
    with ClusterView(_options(bootstrap, subscribe=wide_topic)) as cluster:
        tps = cluster.partitions()
        assert len(tps) == PARTITIONS
        watermarks = cluster.watermarks(tps)
        found = cluster.offsets_for_times(dict.fromkeys(tps, 1_700_000_001_000))
        assert cluster.round_trips == 4
    assert watermarks == {(wide_topic, p): (0, p % 4) for p in range(PARTITIONS)}
    assert found == {(wide_topic, p): (1 if p % 4 > 1 else None) for p in range(PARTITIONS)}


def test_read_committed_latest_is_the_last_stable_offset(
    bootstrap: str, kafka: Kafka, topic_name: Any
) -> None:
    topic = topic_name("txn")
    kafka.create(topic, 1)
    kafka.produce(topic, [{"value": b"committed"}])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    assert producer.flush(30) == 0
    try:
        for level, expected in (("read_committed", 1), ("read_uncommitted", 2)):
            options = _options(bootstrap, subscribe=topic, **{"kafka.isolation.level": level})
            with ClusterView(options) as cluster:
                assert cluster.latest([(topic, 0)]) == {(topic, 0): expected}
    finally:
        producer.abort_transaction(30)


def test_offsets_json_that_leaves_out_partitions_fails(bootstrap: str, wide_topic: str) -> None:
    starting = json.dumps({wide_topic: {"0": 0, "1": -2}})
    options = _options(bootstrap, subscribe=wide_topic, startingOffsets=starting)
    reader = StreamReader(options)
    with pytest.raises(OffsetsJsonError, match="you must specify all TopicPartitions"):
        reader.initialOffset()
    reader.stop()


def test_metadata_errors_are_retried_then_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """fetchOffset.numRetries attempts in all, then the last error (nobody listens on port 1)."""
    monkeypatch.setattr(cluster_module, "_TIMEOUT_S", 0.5)
    monkeypatch.setattr(retry_module, "API_TIMEOUT_S", 0.0)  # no riding through within an attempt
    options = _options(
        "127.0.0.1:1", subscribe="t", **{"fetchOffset.numRetries": "2", "kafka.log_level": "0"}
    )
    cluster = ClusterView(options)
    with pytest.raises(KafkaException, match=r"(?i)timed out|transport"):
        cluster.partitions()
    assert cluster.round_trips == 2


def test_a_leader_moving_is_ridden_through_within_one_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE (per partition or for a topic) are asked again, with
    backoff, inside one ``fetchOffset.numRetries`` attempt (as the Java admin client under Spark's
    connector does until default.api.timeout.ms); any other error is not."""
    sleeps: list[float] = []
    monkeypatch.setattr(retry_module, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleeps.append))
    not_leader = cluster_module.UnknownPartitionError("t:0: NOT_LEADER_OR_FOLLOWER")
    not_leader.__cause__ = KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    failures: list[Exception] = [
        not_leader,
        KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)),
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        cluster_module.MetadataUnavailableError("topic t: LEADER_NOT_AVAILABLE"),
    ]
    calls = []

    def attempt() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "offsets"

    assert cluster_module._through_leader_moves("offsets", attempt) == "offsets"
    assert len(calls) == 5
    assert sleeps == [0.1, 0.2, 0.4, 0.8]

    def unknown() -> str:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))

    with pytest.raises(KafkaException):
        cluster_module._through_leader_moves("offsets", unknown)
    assert sleeps == [0.1, 0.2, 0.4, 0.8]
