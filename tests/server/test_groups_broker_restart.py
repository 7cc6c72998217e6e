"""A consumer group outlives a SIGKILL of the broker, with confluent-kafka members.

Two members split a 4-partition topic, consume everything and commit; the broker is killed and restarted
on the same port and data. The group comes back from ``__consumer_offsets`` as it was: the members keep
their partitions without a rebalance (their heartbeats are accepted), their committed offsets are there,
and they go on to receive exactly the messages produced after the restart.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.server.group_harness import (
    CONFLUENT,
    MemberPool,
    create_topic,
    partitions_of,
    produce,
    split_evenly,
    wait_assignments,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}


@pytest.fixture
def pool(fresh_broker: Broker) -> Iterator[MemberPool]:
    members = MemberPool(fresh_broker.bootstrap_servers)
    try:
        yield members
    finally:
        members.close()


def test_group_survives_broker_sigkill(fresh_broker: Broker, pool: MemberPool) -> None:
    topic = group = "survivor"
    bootstrap = fresh_broker.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    settings = {"session_ms": 10_000, "heartbeat_ms": 500, "reset": "earliest"}
    a = pool.start(CONFLUENT, group, [topic], **settings)
    b = pool.start(CONFLUENT, group, [topic], **settings)
    before = wait_assignments([a, b], split_evenly(partitions_of(topic, 4)), what="2/2")
    produce(bootstrap, topic, {p: [f"p{p}-{o}" for o in range(10)] for p in range(4)})
    for member, owned in zip((a, b), before, strict=True):
        member.wait_messages(10 * len(owned))
        assert member.commit() is None
        assert member.committed(sorted(owned)) == dict.fromkeys(owned, 10)
    marks = [len(a.events), len(b.events)]

    fresh_broker.kill()
    fresh_broker.restart()
    assert fresh_broker.bootstrap_servers == bootstrap

    produce(bootstrap, topic, {p: [f"p{p}-10"] for p in range(4)})
    for member, owned in zip((a, b), before, strict=True):
        member.wait_messages(11 * len(owned))
        assert sorted((p, o) for _t, p, o, _v in member.messages() if o >= 10) == sorted(
            (p, 10) for _t, p in owned
        )
        assert member.committed(sorted(owned)) == dict.fromkeys(owned, 10)
    for member, mark, owned in zip((a, b), marks, before, strict=True):
        rebalances = [e for e in member.events[mark:] if e["e"] in ("assign", "revoke")]
        assert rebalances == [], f"{member.name} rebalanced after the restart: {rebalances}"
        assert member.assignment == owned
