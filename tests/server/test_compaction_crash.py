"""SIGKILL the broker at random moments while its cleaner compacts a topic; the log always reads right.

Five rounds: produce a few thousand acknowledged updates (and some tombstones) of a few hundred keys,
wait until the broker logs that a cleaning of the topic began, wait a random 0-300 ms more, SIGKILL,
restart on the same data directory. After every restart, reading the partition from the beginning must
give only acknowledged records, each at its acknowledged offset, in offset order, and for every key its
last acknowledged value (a key whose last write was a tombstone may be gone altogether); no ``.cleaned``
or ``.swap`` file may be left. At the end the cleaner catches up and the log is exactly compacted. At
least one kill must have hit a cleaning under way (else the test proves nothing).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from tests.server.compaction_support import (
    Record,
    active_base,
    cleaner_checkpoint,
    compacted,
    produce,
    read_all,
    wait_for,
)
from tests.support.kafka_workload import confluent_create_topic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.slow, pytest.mark.timeout(300)]

BROKER_CONFIG = {"log.cleaner.backoff.ms": 20}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}
ROUNDS = 5
KEYS = 300


def cleaner_lines(broker: Broker, topic: str) -> tuple[int, int]:
    """(cleanings begun, cleanings finished) of the topic's partition in the broker log."""
    text = broker.log_path.read_text()
    return text.count(f"msg=Cleaning {topic}-0:"), text.count(f"msg=Cleaned {topic}-0 ")


def check_reads_right(records: list[Record], acked: list[Record]) -> None:
    by_offset = {offset: (key, value) for offset, key, value in acked}
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets))
    for offset, key, value in records:
        assert by_offset.get(offset) == (key, value), f"offset {offset} holds {key!r}={value!r}"
    last_acked = {key: value for _, key, value in acked}
    last_read = {key: value for _, key, value in records}
    for key, value in last_acked.items():
        if value is None:
            assert last_read.get(key) is None, f"tombstoned {key!r} reads back as {last_read[key]!r}"
        else:
            assert last_read.get(key) == value, f"{key!r}: last value {last_read.get(key)!r}, acked {value!r}"


def test_sigkill_during_cleaning_keeps_the_log_readable(fresh_broker: Broker, topic: str) -> None:
    broker = fresh_broker
    confluent_create_topic(broker.bootstrap_servers, topic, 1, TOPIC_CONFIG)
    rng = random.Random(20251122)
    acked: list[Record] = []
    interrupted = 0
    seq = 0
    for _ in range(ROUNDS):
        items: list[tuple[bytes | None, bytes | None]] = []
        for _ in range(8000):
            key = b"key-%03d" % rng.randrange(KEYS)
            value = None if rng.random() < 0.02 else b"%s=%07d-" % (key, seq) + b"v" * rng.randrange(80)
            items.append((key, value))
            seq += 1
        begun_before, _ = cleaner_lines(broker, topic)
        acked += produce(broker, topic, items)
        wait_for(lambda b=begun_before: cleaner_lines(broker, topic)[0] > b, "a cleaning begins", timeout=60)
        time.sleep(rng.uniform(0.0, 0.3))
        begun, finished = cleaner_lines(broker, topic)
        broker.kill()
        interrupted += begun > finished
        broker.restart()
        partition_dir = Path(broker.data_dir, f"{topic}-0")
        assert not [p.name for p in partition_dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
        check_reads_right(read_all(broker, topic), acked)
    assert interrupted >= 1, "no kill hit a cleaning under way"
    # The cleaner catches up: the log is exactly compacted (tombstones may be gone by now).
    wait_for(
        lambda: cleaner_checkpoint(broker, topic) == active_base(broker, topic), "the log is cleaned", 60
    )
    boundary = active_base(broker, topic)
    records = read_all(broker, topic)
    expected = compacted(acked, boundary)
    assert [r for r in records if r[2] is not None or r[0] >= boundary] == [
        r for r in expected if r[2] is not None or r[0] >= boundary
    ]
    assert set(records) <= set(expected)
