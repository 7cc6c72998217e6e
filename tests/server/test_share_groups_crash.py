"""A share group across a broker crash: the share-partition state is in ``__share_group_state``.

A ``ShareConsumer`` in explicit mode acknowledges (and commits) 10 records of a stream, holds the others it
acquired unacknowledged, then the broker is SIGKILLed and restarted: a new consumer of the group receives exactly
the records that were not acknowledged (held ones again), never an acknowledged one; a record waiting for
its delivery time (``tidelog.deliver.after.ms``, an hour) still waits after the restart.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.share_groups import PRIMER, prime_acknowledging, value_of

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]


def test_broker_kill_loses_no_acknowledgement_and_no_record() -> None:
    config = {"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 1}
    with Broker(config) as broker:
        bootstrap = broker.bootstrap_servers
        topic, group = f"q-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        first = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
        )
        first.subscribe([topic])
        deadline = time.monotonic() + 60
        prime_acknowledging(producer, topic, first, deadline)
        producer.produce(topic, b"delayed", headers=[("tidelog.deliver.after.ms", b"3600000")])
        producer.flush(10)
        values = [b"r%02d" % i for i in range(40)]
        for value in values:
            producer.produce(topic, value)
        producer.flush(10)
        batch: list[Message] = []
        while len(batch) < 20 and time.monotonic() < deadline:  # mid-stream: half acknowledged, half held
            batch += [m for m in first.poll(0.5) if value_of(m) != PRIMER]
        for m in batch[:10]:
            first.acknowledge(m)
        first.commit_sync()
        acked = {value_of(m) for m in batch[:10]}
        held = {value_of(m) for m in batch[10:]}
        broker.kill()
        broker.restart()
        with contextlib.suppress(KafkaException):
            first.close()
        second = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
        second.subscribe([topic])
        after: list[bytes] = []
        remaining = set(values) - acked
        while not remaining <= set(after) and time.monotonic() < deadline:
            after += [value_of(m) for m in second.poll(0.5) if value_of(m) != PRIMER]
        second.close()
        # it sits below every other record in the window: deliverable, it would have come first
        assert b"delayed" not in after
        assert len(acked) == 10
        assert held
        assert held <= remaining
        assert not acked & set(after), "an acknowledged record came again"
        assert sorted(after) == sorted(remaining)
