"""Static membership (``group.instance.id``) and mixed clients in one group.

- Static members a and b split a 6-partition topic; a is killed (SIGKILL, no LeaveGroup) and restarted
  with the same instance id within the session timeout: it gets exactly its old partitions back and b
  sees no rebalance at all (no revoke, no assign, its assignment untouched).
- confluent-kafka and kafka-python members form one group (both offer range and roundrobin; range is
  chosen) and rebalance together as members come and go; an aiokafka member (roundrobin only) joins
  and the group switches to the one protocol all three share.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from tests.server.group_harness import (
    AIOKAFKA,
    CLIENTS,
    CONFLUENT,
    KAFKA_PYTHON,
    MemberPool,
    create_topic,
    partitions_of,
    split_evenly,
    wait_assignments,
    wait_settled,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


@pytest.fixture
def pool(broker: Broker) -> Iterator[MemberPool]:
    members = MemberPool(broker.bootstrap_servers)
    try:
        yield members
    finally:
        members.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restart_keeps_its_partitions(broker: Broker, pool: MemberPool, client: str) -> None:
    topic = group = f"static-{client}"
    create_topic(broker.bootstrap_servers, topic, 6)
    everything = partitions_of(topic, 6)
    settings = {"session_ms": 20_000, "heartbeat_ms": 500, "reset": "earliest"}
    a = pool.start(client, group, [topic], instance_id="instance-a", **settings)
    b = pool.start(client, group, [topic], instance_id="instance-b", **settings)
    wait_assignments([a, b], split_evenly(everything), what="3/3")
    wait_settled([a, b])
    before = [a.assignment, b.assignment]
    assert split_evenly(everything)(before)
    b_events = len(b.events)

    a.kill()
    again = pool.start(client, group, [topic], instance_id="instance-a", **settings)
    wait_assignments([again], lambda x: x[0] == before[0], timeout=15, what=f"a's old partitions {before[0]}")
    # b heard nothing (give a rebalance a few heartbeats to show): the coordinator handed a its
    # assignment without one.
    time.sleep(1.5)
    assert [e for e in b.events[b_events:] if e["e"] in ("assign", "revoke", "assignment")] == []
    assert b.assignment == before[1]


def test_mixed_clients_rebalance_together(broker: Broker, pool: MemberPool) -> None:
    topic = group = "mixed-clients"
    create_topic(broker.bootstrap_servers, topic, 6)
    everything = partitions_of(topic, 6)
    settings = {"session_ms": 6000, "heartbeat_ms": 500, "reset": "earliest"}
    ck = pool.start(CONFLUENT, group, [topic], **settings)
    kp = pool.start(KAFKA_PYTHON, group, [topic], **settings)
    assert sorted(len(x) for x in wait_assignments([ck, kp], split_evenly(everything), what="3/3")) == [3, 3]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})

    def protocol() -> str:
        described = admin.describe_consumer_groups([group])[group].result(20)
        return str(described.partition_assignor)

    assert protocol() == "range"

    ak = pool.start(AIOKAFKA, group, [topic], **settings)  # offers roundrobin only
    assert [len(x) for x in wait_assignments([ck, kp, ak], split_evenly(everything), what="2/2/2")] == [
        2,
        2,
        2,
    ]
    assert protocol() == "roundrobin"

    kp.close()
    wait_assignments([ck, ak], split_evenly(everything), what="3/3 after kafka-python left")
    ak.close()
    wait_assignments([ck], lambda x: x[0] == everything, what="all six for confluent-kafka")
    assert protocol() == "range"
