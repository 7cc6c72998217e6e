"""Classic consumer groups with real clients: members split partitions, join, leave, die.

Each client (confluent-kafka, kafka-python, aiokafka) runs its consumers as separate processes
(``group_member.py``) in one group over a 6-partition topic:

- two members split the partitions 3/3; a third joins and each has 2;
- the third closes (LeaveGroup): its partitions move at once, 3/3 again;
- one is killed with SIGKILL (no LeaveGroup): after its session timeout the survivor has all 6.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.server.group_harness import (
    CLIENTS,
    MemberPool,
    create_topic,
    partitions_of,
    split_evenly,
    wait_assignments,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


@pytest.fixture
def pool(broker: Broker) -> Iterator[MemberPool]:
    members = MemberPool(broker.bootstrap_servers)
    try:
        yield members
    finally:
        members.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_members_split_join_leave_and_die(broker: Broker, pool: MemberPool, client: str) -> None:
    topic = f"membership-{client}"
    group = f"membership-{client}"
    create_topic(broker.bootstrap_servers, topic, 6)
    everything = partitions_of(topic, 6)
    settings = {"session_ms": 4000, "heartbeat_ms": 500, "reset": "earliest"}
    a = pool.start(client, group, [topic], **settings)
    b = pool.start(client, group, [topic], **settings)
    first = wait_assignments([a, b], split_evenly(everything), what="3/3")
    assert sorted(len(x) for x in first) == [3, 3]

    c = pool.start(client, group, [topic], **settings)
    second = wait_assignments([a, b, c], split_evenly(everything), what="2/2/2")
    assert [len(x) for x in second] == [2, 2, 2]

    c.close()
    third = wait_assignments([a, b], split_evenly(everything), timeout=20, what="3/3 after a close")
    assert sorted(len(x) for x in third) == [3, 3]

    b.kill()
    killed_at = time.monotonic()
    wait_assignments([a], lambda x: x[0] == everything, timeout=30, what="everything after a SIGKILL")
    # The group waited for the dead member's session to expire (4 s), not for a LeaveGroup.
    assert time.monotonic() - killed_at >= 2.5
