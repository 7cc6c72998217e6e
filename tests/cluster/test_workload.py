"""The workload's own machinery: :class:`~tests.cluster.workload.ClientLiveness`, the watchdog that tells a
deadlocked librdkafka reader (confluentinc/librdkafka#5476) from one that has nothing to read."""

from __future__ import annotations

import gc
import time

from tests.cluster.workload import ClientLiveness, abandon

from tidelog.testing import Broker


def test_liveness_stalls_only_after_a_silence_longer_than_its_limit() -> None:
    now = [100.0]
    liveness = ClientLiveness(stalled_after=15.0, clock=lambda: now[0])
    now[0] = 114.9
    assert not liveness.stalled()
    now[0] = 115.1
    assert liveness.stalled()
    liveness.beat('{"name": "rdkafka#consumer-1"}')
    assert not liveness.stalled()
    now[0] = 130.0
    assert not liveness.stalled()
    now[0] = 130.2
    assert liveness.stalled()


def test_a_real_idle_consumer_keeps_beating_through_consume(tidelog_broker: Broker) -> None:
    """The wiring the reader relies on: librdkafka's statistics reach ``beat`` through ``consume()`` while
    the consumer reads nothing (an idle reader must never look deadlocked)."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": tidelog_broker.bootstrap_servers})
    admin.create_topics([NewTopic("idle", 1, 1)])["idle"].result(30)
    beats: list[str] = []
    liveness = ClientLiveness(stalled_after=15.0)

    def beat(stats: str) -> None:
        beats.append(stats)
        liveness.beat(stats)

    consumer = Consumer(
        {
            "bootstrap.servers": tidelog_broker.bootstrap_servers,
            "group.id": "liveness",
            "statistics.interval.ms": 200,
            "stats_cb": beat,
        }
    )
    try:
        consumer.assign([TopicPartition("idle", 0, OFFSET_END)])
        deadline = time.monotonic() + 30
        while len(beats) < 3 and time.monotonic() < deadline:
            assert consumer.consume(10, 0.2) == []
        assert len(beats) >= 3
        assert '"type": "consumer"' in beats[-1] or '"type":"consumer"' in beats[-1]
        assert not liveness.stalled()
    finally:
        consumer.close()


def test_an_abandoned_client_is_never_deallocated() -> None:
    """A deadlocked librdkafka client blocks whoever deallocates it, the interpreter's final collection at
    exit included (a pytest process that never ends): ``abandon`` keeps it for good."""
    deallocated: list[str] = []

    class Client:
        def __init__(self, name: str) -> None:
            self.name = name

        def __del__(self) -> None:
            deallocated.append(self.name)

    kept, dropped = Client("kept"), Client("dropped")
    abandon(kept)
    del kept, dropped
    gc.collect()
    assert deallocated == ["dropped"]
