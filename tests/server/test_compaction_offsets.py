"""``__consumer_offsets`` stays small under a consumer that commits every 10 ms: its cleaner keeps only the
last commit per (group, topic, partition).

The offsets topic gets 4 KB segments and a single partition here, and the cleaner wakes every 50 ms;
a confluent-kafka consumer in a group commits its position synchronously every 10 ms, for 20 seconds in CI (and
for two and a half minutes in the soak, ``--soak``). The
partition's size on disk, sampled as the commits go on, must stop growing: after the first seconds it
stays below a bound of a few segments, while the commits written meanwhile amount to many times that.
"""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka
import pytest
from tests.server.compaction_support import produce
from tests.support.kafka_workload import confluent_create_topic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

SEGMENT_BYTES = 4096
BROKER_CONFIG = {
    "log.cleaner.backoff.ms": 50,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.segment.bytes": SEGMENT_BYTES,
}


def offsets_size(broker: Broker) -> int:
    """The live ``.log`` files' total size. The cleaner swaps and deletes segments while this runs, so a
    file listed by the glob may be gone by the time it is measured: a vanished file counts for nothing."""
    total = 0
    for path in Path(broker.data_dir, "__consumer_offsets-0").glob("*.log"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


@pytest.mark.parametrize(
    "commit_seconds", [20, pytest.param(150, marks=[pytest.mark.slow, pytest.mark.soak])]
)
def test_consumer_offsets_stay_bounded_under_commits_every_10ms(
    broker: Broker, topic: str, commit_seconds: int
) -> None:
    confluent_create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker, topic, [(b"k%d" % i, b"v%d" % i) for i in range(1000)])
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"{topic}-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    sizes: list[tuple[float, int]] = []
    commits = 0
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.1)
        start = time.monotonic()
        position = 0
        while time.monotonic() - start < commit_seconds:
            position = position % 1000 + 1
            consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, position)], asynchronous=False)
            commits += 1
            if commits % 100 == 0:
                sizes.append((time.monotonic() - start, offsets_size(broker)))
            time.sleep(0.01)
    finally:
        consumer.close()
    assert commits > 500
    later = [size for elapsed, size in sizes if elapsed > commit_seconds / 4]
    # Each commit record is ~100 bytes: the commits alone would be far more than the bound.
    assert commits * 80 > 10 * SEGMENT_BYTES
    assert max(later) < 6 * SEGMENT_BYTES, sizes
    assert "Cleaned __consumer_offsets-0" in broker.log_path.read_text()
