"""A task's read of one offset range against a real broker (no Spark): consumers pooled across reads,
bounded batches, out-of-range answers handled as Spark's connector does."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from tests.spark.conftest import Kafka

from tidelog.spark.consumer_pool import POOL
from tidelog.spark.fetch import DataLossError, fetch_config, read_range
from tidelog.spark.offsets import OffsetRange
from tidelog.spark.options import parse_reader_options

pytestmark = pytest.mark.clients


def _options(bootstrap: str, topic: str, **options: str) -> Any:
    return parse_reader_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "20000",
            **options,
        },
        streaming=True,
    )


def _offsets(options: Any, topic: str, start: int, until: int) -> list[list[int]]:
    return [b.column(4).to_pylist() for b in read_range(options, OffsetRange(topic, 0, start, until))]


def test_consecutive_micro_batches_reuse_one_consumer(bootstrap: str, kafka: Kafka, topic_name: Any) -> None:
    topic = topic_name("pooled")
    kafka.create(topic, 1)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(300)])
    options = _options(bootstrap, topic, **{"kafka.max.poll.records": "40"})
    POOL.clear()
    created, reused = POOL.created, POOL.reused
    got: list[int] = []
    for start, until in ((0, 100), (100, 230), (230, 300)):
        batches = _offsets(options, topic, start, until)
        assert all(len(b) <= 40 for b in batches)  # kafka.max.poll.records
        got += [o for b in batches for o in b]
    assert got == list(range(300))
    assert (POOL.created - created, POOL.reused - reused) == (1, 2)
    assert len(POOL) == 1
    # a start elsewhere seeks the pooled consumer
    assert [o for b in _offsets(options, topic, 10, 15) for o in b] == [10, 11, 12, 13, 14]
    assert POOL.created - created == 1
    POOL.clear()


def test_buffers_are_bounded_unless_the_user_says_otherwise(bootstrap: str) -> None:
    config = fetch_config(_options(bootstrap, "t"), 10_000_000)
    assert (config["queued.max.messages.kbytes"], config["fetch.max.bytes"]) == (16 * 1024, 16 * 1024 * 1024)
    mine = fetch_config(_options(bootstrap, "t", **{"kafka.queued.max.messages.kbytes": "1024"}), 10)
    assert mine["queued.max.messages.kbytes"] == "1024"


def test_out_of_range_skips_to_the_log_start_never_below(
    bootstrap: str, kafka: Kafka, topic_name: Any
) -> None:
    topic = topic_name("trimmed")
    kafka.create(topic, 1)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(100)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 60)]).values():
        future.result(30)
    POOL.clear()
    with pytest.raises(DataLossError, match=f"{topic}:0 offsets 20..59 were deleted"):
        _offsets(_options(bootstrap, topic), topic, 20, 100)
    lenient = _options(bootstrap, topic, failOnDataLoss="false")
    assert [o for b in _offsets(lenient, topic, 20, 100) for o in b] == list(range(60, 100))
    assert _offsets(lenient, topic, 30, 50) == []  # all of it gone: nothing read, nothing from below
    POOL.clear()
