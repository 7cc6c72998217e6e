"""Client-side assignors over tidelog's classic group protocol, each producing its exact assignment.

Two members (client ids ``member-a`` < ``member-b``, so Kafka's member ids sort the same way) subscribe
to two 3-partition topics X and Y:

- range: each topic split on its own, the first member taking the extra partition -> a: X0 X1 Y0 Y1, b: X2 Y2;
- roundrobin: all partitions in order dealt in turn -> a: X0 X2 Y1, b: X1 Y0 Y2;
- sticky (eager; aiokafka) and cooperative-sticky (confluent-kafka, kafka-python): a third member joins a
  3/3 group and each of the first two keeps two of its three partitions; with cooperative-sticky the
  first two are only ever asked to revoke the partitions that move (never everything).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.server.group_harness import (
    AIOKAFKA,
    CONFLUENT,
    KAFKA_PYTHON,
    Member,
    MemberPool,
    Partition,
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


def two_topics(broker: Broker, prefix: str) -> tuple[str, str]:
    x, y = f"{prefix}-x", f"{prefix}-y"
    create_topic(broker.bootstrap_servers, x, 3)
    create_topic(broker.bootstrap_servers, y, 3)
    return x, y


def start(pool: MemberPool, client: str, group: str, topics: list[str], name: str, assignor: str) -> Member:
    member = pool.start(
        client,
        group,
        topics,
        client_id=f"member-{name}",
        assignors=[assignor],
        session_ms=6000,
        heartbeat_ms=500,
    )
    member.name = f"{client}/{name}"
    return member


@pytest.mark.parametrize(
    ("client", "assignor"),
    [(c, a) for c in (CONFLUENT, KAFKA_PYTHON, AIOKAFKA) for a in ("range", "roundrobin")],
)
def test_range_and_roundrobin(broker: Broker, pool: MemberPool, client: str, assignor: str) -> None:
    x, y = two_topics(broker, f"{assignor}-{client}")
    group = f"{assignor}-{client}"
    a = start(pool, client, group, [x, y], "a", assignor)
    b = start(pool, client, group, [x, y], "b", assignor)
    expected: dict[str, tuple[set[Partition], set[Partition]]] = {
        "range": ({(x, 0), (x, 1), (y, 0), (y, 1)}, {(x, 2), (y, 2)}),
        "roundrobin": ({(x, 0), (x, 2), (y, 1)}, {(x, 1), (y, 0), (y, 2)}),
    }
    want = expected[assignor]
    got = wait_assignments([a, b], lambda current: tuple(current) == want, what=f"{assignor}: {want}")
    assert tuple(got) == want


@pytest.mark.parametrize(
    ("client", "assignor"),
    [(CONFLUENT, "cooperative-sticky"), (KAFKA_PYTHON, "cooperative-sticky"), (AIOKAFKA, "sticky")],
)
def test_sticky_assignors_keep_partitions(
    broker: Broker, pool: MemberPool, client: str, assignor: str
) -> None:
    x, y = two_topics(broker, f"{assignor}-{client}")
    everything = partitions_of(x, 3) | partitions_of(y, 3)
    group = f"{assignor}-{client}"
    a = start(pool, client, group, [x, y], "a", assignor)
    b = start(pool, client, group, [x, y], "b", assignor)
    wait_assignments([a, b], split_evenly(everything), what="3/3")
    wait_settled([a, b])
    before = [a.assignment, b.assignment]
    assert split_evenly(everything)(before)
    marks = [len(a.events), len(b.events)]
    c = start(pool, client, group, [x, y], "c", assignor)
    after = wait_assignments([a, b, c], split_evenly(everything), what="2/2/2")
    assert [len(p) for p in after] == [2, 2, 2]
    assert after[0] <= before[0], (before, after)
    assert after[1] <= before[1], (before, after)
    assert after[2] == everything - after[0] - after[1]
    if assignor == "cooperative-sticky":
        for member, mark, kept, had in zip((a, b), marks, after[:2], before[:2], strict=True):
            revoked = [set(map(tuple, e["partitions"])) for e in member.events[mark:] if e["e"] == "revoke"]
            assert revoked == [had - kept], f"{member.name} revoked {revoked}, expected only {had - kept}"
            # The member kept consuming what it keeps: no assignment in between lacked those partitions.
            seen = [
                {tuple(p) for p in e["partitions"]} for e in member.events[mark:] if e["e"] == "assignment"
            ]
            assert all(kept <= s for s in seen), seen
