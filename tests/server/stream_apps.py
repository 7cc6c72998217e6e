"""Helpers for the tests that run a stream-processing app (quixstreams, Faust) as a subprocess against a
real broker: find the app's own virtualenv, wait for a condition while the app must keep running, follow
the app's output, read a topic to its end, check the group committed the whole input, look at the
cleaner's checkpoint and a topic's configs.

Every wait has a deadline and fails the test with what it waited for (and the app's log tail, given the
app); every reader assigns partitions itself and never joins or commits for its group id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from tests.support.kafka_workload import GROUP_ID_UNUSED

from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.storage.cleaner_checkpoint import CLEANER_OFFSET_CHECKPOINT_FILE
from tidelog.testing import Broker


class AppProcess(Protocol):
    """What ``wait_for`` needs of an app subprocess to fail early and say why."""

    def check_running(self) -> None:
        """Fails the test if the app has exited."""

    def log_tail(self) -> str:
        """The last lines of the app's log."""


def venv_python(venv: Path, missing: str) -> Path:
    """``venv``'s python; if it is missing the test is skipped, or fails under CI, saying ``missing``
    (how to build it)."""
    python = venv / "bin" / "python"
    if not python.exists():
        message = f"{python} missing: {missing}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def wait_for(
    condition: Callable[[], object], what: str, timeout: float, app: AppProcess | None = None
) -> None:
    """Polls ``condition`` until it holds; fails after ``timeout`` seconds, or as soon as ``app`` exits."""
    deadline = time.monotonic() + timeout
    while not condition():
        if app is not None:
            app.check_running()
        if time.monotonic() > deadline:
            tail = f"\napp log:\n{app.log_tail()}" if app is not None else ""
            pytest.fail(f"timed out waiting until {what}{tail}")
        time.sleep(0.1)


class OutputWatcher:
    """Follows an app's output topic, whose records are a key and its new count (``count`` reads it from
    the value): the latest count per key seen so far."""

    def __init__(
        self, broker: Broker, topic: str, count: Callable[[bytes], int], isolation: str = "read_committed"
    ) -> None:
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": GROUP_ID_UNUSED,
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "topic.metadata.refresh.interval.ms": 500,
                "log_level": 3,
            }
        )
        self.topic = topic
        self.count = count
        self.latest: dict[str, int] = {}
        self.assigned = False

    def poll(self) -> int:
        """Reads what arrived; returns the progress."""
        if not self.assigned:
            metadata = self.consumer.list_topics(self.topic, timeout=10).topics[self.topic]
            if metadata.error is not None or not metadata.partitions:
                return self.progress
            self.consumer.assign(
                [
                    confluent_kafka.TopicPartition(self.topic, p, confluent_kafka.OFFSET_BEGINNING)
                    for p in metadata.partitions
                ]
            )
            self.assigned = True
        for message in self.consumer.consume(num_messages=10_000, timeout=0.2):
            assert message.error() is None, message.error()
            self.latest[message.key().decode()] = self.count(message.value())
        return self.progress

    @property
    def progress(self) -> int:
        """How many events the app has counted, as far as its output shows (sum of latest counts)."""
        return sum(self.latest.values())

    def close(self) -> None:
        self.consumer.close()


def read_records(
    broker: Broker, topic: str, isolation: str = "read_committed"
) -> list[tuple[bytes, bytes | None]]:
    """Every record (key, value) of ``topic`` as a consumer with that isolation level sees it, each
    partition in offset order, to its end (read_committed: its last stable offset)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions]
        )
        records: list[tuple[bytes, bytes | None]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                pytest.fail(f"could not read {topic} to its end")
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                error = message.error()
                if error is not None and error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                assert error is None, error
                records.append((message.key(), message.value()))
        return records
    finally:
        consumer.close()


def committed_everything(broker: Broker, group: str, topic: str, partitions: int) -> bool:
    """Whether ``group`` has committed (stable) offsets at the end of every partition of ``topic``."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 3}
    )
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
        committed = consumer.committed(tps, timeout=10)
        for tp in committed:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            if tp.offset != high:
                return False
        return True
    except confluent_kafka.KafkaException:
        return False  # e.g. UNSTABLE_OFFSET_COMMIT while a transaction is open
    finally:
        consumer.close()


def cleaned_offsets(broker: Broker, topic: str) -> dict[int, int]:
    """The cleaner's checkpoint for ``topic``'s partitions (partition -> first uncleaned offset)."""
    checkpoint = read_offsets_checkpoint(broker.data_dir / CLEANER_OFFSET_CHECKPOINT_FILE)
    return {tp.partition: offset for tp, offset in checkpoint.items() if tp.topic == topic}


def describe_topic_config(broker: Broker, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=20)
    return {name: entry.value for name, entry in entries.items()}
