"""A share group across the kill -9 of its share-partition leader (KIP-932 in a cluster): three brokers, an
RF 3 topic, ``__share_group_state`` at RF 3 led by another broker than the topic, so every state write
of the share-partition leader goes to the share coordinator over WriteShareGroupState, and the next leader
(the third broker) reads it back with ReadShareGroupState.

A ``ShareConsumer`` (explicit mode) acknowledges 10 records and holds the others it acquired; the
partition's leader is killed; a second consumer of the group, whose bootstrap list still names the dead
broker, is routed to the new leader (which loads the state from the share coordinator) and gets exactly
the records not acknowledged: no acknowledged record again, none lost (the held ones' acquisitions died
with the leader).
"""

from __future__ import annotations

import contextlib
import time

import pytest
from confluent_kafka import KafkaException, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cluster.harness import Scenario
from tests.support.share_groups import PRIMER, prime_acknowledging, value_of

pytestmark = [pytest.mark.cluster, pytest.mark.clients, pytest.mark.timeout(180)]

TOPIC = "jobs"
STATE_TOPIC = "__share_group_state"
GROUP = "workers"
CONFIG = {
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.num.partitions": 1,
}


def test_share_partition_leader_kill_loses_no_acknowledgement_and_no_record(scenario: Scenario) -> None:
    c = scenario.start(config=CONFIG)
    coordinator, leader, third = sorted(c.brokers)
    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    futures = admin.create_topics(
        [
            NewTopic(
                STATE_TOPIC,
                num_partitions=1,
                replica_assignment=[[coordinator, third, leader]],
                config={"cleanup.policy": "compact"},
            ),
            NewTopic(TOPIC, num_partitions=1, replica_assignment=[[leader, third, coordinator]]),
        ],
        operation_timeout=30,
    )
    for future in futures.values():
        future.result(60)
    for topic in (STATE_TOPIC, TOPIC):
        scenario.wait_for(lambda t=topic: scenario.full_isr(t, 0), f"{topic}: led with its full ISR")  # type: ignore[misc]
        scenario.wait_metadata(topic, 1)
    assert scenario.leader(STATE_TOPIC, 0) == coordinator
    assert scenario.leader(TOPIC, 0) == leader

    producer = Producer(
        {"bootstrap.servers": scenario.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3}
    )
    consumer = ShareConsumer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "group.id": GROUP,
            "share.acknowledgement.mode": "explicit",
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 3,
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 90
    prime_acknowledging(producer, TOPIC, consumer, deadline)
    values = [b"job-%02d" % i for i in range(30)]
    for value in values:
        producer.produce(TOPIC, value)
    producer.flush(10)
    batch: list[Message] = []
    while len(batch) < 20 and time.monotonic() < deadline:  # mid-stream: 10 acknowledged, the rest held
        batch += [m for m in consumer.poll(0.5) if m.error() is None and value_of(m) != PRIMER]
    for message in batch[:10]:
        consumer.acknowledge(message)
    consumer.commit_sync()
    acked = {value_of(m) for m in batch[:10]}
    held = {value_of(m) for m in batch[10:]}
    assert len(acked) == 10
    assert held

    old = scenario.state(TOPIC, 0)
    c.kill(leader)
    scenario.event(f"share-partition leader {leader} killed")
    new = scenario.wait_new_leader(TOPIC, 0, old)
    assert new.leader == third  # it reads the state from the share coordinator on another broker

    second = ShareConsumer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "group.id": GROUP,
            "share.acknowledgement.mode": "explicit",
            "log_level": 3,
        }
    )
    second.subscribe([TOPIC])
    after: list[bytes] = []
    remaining = set(values) - acked
    while not remaining <= set(after) and time.monotonic() < deadline:
        for message in second.poll(0.5):
            second.acknowledge(message)
            if message.error() is None and value_of(message) != PRIMER:
                after.append(value_of(message))
    second.commit_sync()
    second.close()
    with contextlib.suppress(KafkaException):
        consumer.close()
    assert not acked & set(after), "an acknowledged record came again"
    assert held <= set(after)
    assert sorted(after) == sorted(remaining)
