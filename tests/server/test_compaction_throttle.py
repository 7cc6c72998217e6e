"""``log.cleaner.io.max.bytes.per.second`` in a running broker, driven by confluent-kafka.

At 1 byte/s the cleaner's first rate check (at its first read, once the throttler is older than its 300 ms
check interval) owes thousands of seconds of sleep: the cleaning cannot finish, and stopping the broker
must still be prompt and clean (the sleep waits on the abort event). Restarted at 100 kB/s, the cleaner
compacts the log to exactly each key's last record below the cleaned boundary. DescribeConfigs shows the
configured value both times. Nothing here measures a rate or a duration.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from tests.server.compaction_support import compacted, produce, read_all, wait_cleaned, wait_for
from tests.support.kafka_workload import confluent_create_topic

from tidelog.server.config import ConfigSource
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

KEY = "log.cleaner.io.max.bytes.per.second"
BROKER_CONFIG = {"log.cleaner.backoff.ms": 50, KEY: "1"}
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}


def described(broker: Broker) -> tuple[str | None, ConfigSource]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")], request_timeout=30)
    (future,) = futures.values()
    entry = future.result(timeout=30)[KEY]
    return entry.value, ConfigSource(entry.source)


def test_a_throttled_cleaning_ends_with_the_broker_and_a_faster_one_compacts(
    fresh_broker: Broker, topic: str
) -> None:
    broker = fresh_broker
    # Not a synchronisation: a lower bound on the throttler's age, so that the very first read of the first
    # cleaning is past the 300 ms check interval and is checked (and found far above 1 byte/s).
    time.sleep(0.5)
    assert described(broker) == ("1", ConfigSource.STATIC_BROKER_CONFIG)
    confluent_create_topic(broker.bootstrap_servers, topic, 1, COMPACTED)
    acked = produce(broker, topic, [(b"key-%02d" % (i % 20), b"v%05d" % i + b"." * 40) for i in range(400)])
    wait_for(lambda: f"msg=Cleaning {topic}-0:" in broker.log_path.read_text(), "a cleaning has begun")
    assert broker.stop(timeout=30) == 0
    text = broker.log_path.read_text()
    assert f"msg=Cleaning of {topic}-0 aborted: the broker is stopping" in text
    assert f"msg=Cleaned {topic}-0 " not in text
    assert "shut down cleanly" in text
    partition_dir = broker.data_dir / f"{topic}-0"
    assert not [p.name for p in partition_dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]

    broker.config[KEY] = "100000"
    broker.restart()
    assert described(broker) == ("100000", ConfigSource.STATIC_BROKER_CONFIG)
    boundary = wait_cleaned(broker, topic)
    assert boundary > 300
    assert read_all(broker, topic) == compacted(acked, boundary)
