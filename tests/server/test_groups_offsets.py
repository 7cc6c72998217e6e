"""Committed offsets with real clients: where a group member starts, resumes and seeks.

For confluent-kafka, kafka-python and aiokafka, each on a 2-partition topic holding 10 messages per
partition (values ``p<partition>-<offset>``):

- a member consumes everything, commits offset 6 of partition 0 and 3 of partition 1, and closes; the next
  member of the group gets exactly offsets 6-9 and 3-9 again (uncommitted ones redelivered, committed ones
  not); after it commits its consumed positions and closes, a third member gets only newly produced messages;
- with no committed offset, ``auto.offset.reset`` earliest starts at 0, latest at the end (none of the
  messages from before arrives, every one from the moment it started does), and none (librdkafka's ``error``) reports an error instead;
- ``seek`` rewinds an assigned partition to an exact offset.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.server.group_harness import (
    CLIENTS,
    CONFLUENT,
    Member,
    MemberPool,
    create_topic,
    produce,
    wait_assignments,
    wait_settled,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}

PARTITIONS = 2
PER_PARTITION = 10


@pytest.fixture
def pool(broker: Broker) -> Iterator[MemberPool]:
    members = MemberPool(broker.bootstrap_servers)
    try:
        yield members
    finally:
        members.close()


def filled_topic(broker: Broker, name: str) -> str:
    create_topic(broker.bootstrap_servers, name, PARTITIONS)
    produce(
        broker.bootstrap_servers,
        name,
        {p: [f"p{p}-{o}" for o in range(PER_PARTITION)] for p in range(PARTITIONS)},
    )
    return name


def received(member: Member) -> dict[int, list[int]]:
    """Offsets delivered per partition, in delivery order."""
    by_partition: dict[int, list[int]] = {}
    for _topic, partition, offset, value in member.messages():
        assert value == f"p{partition}-{offset}"
        by_partition.setdefault(partition, []).append(offset)
    return by_partition


def start(pool: MemberPool, client: str, group: str, topic: str, reset: str = "earliest") -> Member:
    return pool.start(client, group, [topic], reset=reset, session_ms=6000, heartbeat_ms=500)


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_then_restart_resumes_after_the_commit(broker: Broker, pool: MemberPool, client: str) -> None:
    topic = filled_topic(broker, f"resume-{client}")
    group = f"resume-{client}"
    first = start(pool, client, group, topic)
    first.wait_messages(2 * PER_PARTITION)
    assert received(first) == {0: list(range(10)), 1: list(range(10))}
    assert first.commit([(topic, 0, 6), (topic, 1, 3)]) is None
    assert first.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 6, (topic, 1): 3}
    first.close()

    second = start(pool, client, group, topic)
    second.wait_messages(4 + 7)
    assert received(second) == {0: [6, 7, 8, 9], 1: [3, 4, 5, 6, 7, 8, 9]}
    assert second.commit() is None  # the consumed positions: 10 and 10
    assert second.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 10, (topic, 1): 10}
    second.close()

    produce(broker.bootstrap_servers, topic, {0: ["p0-10"], 1: ["p1-10", "p1-11"]})
    third = start(pool, client, group, topic)
    third.wait_messages(3)
    assert received(third) == {0: [10], 1: [10, 11]}
    third.close()
    assert third.count("msg") == 3


@pytest.mark.parametrize("client", CLIENTS)
def test_auto_offset_reset(broker: Broker, pool: MemberPool, client: str) -> None:
    topic = filled_topic(broker, f"reset-{client}")
    earliest = start(pool, client, f"reset-earliest-{client}", topic, "earliest")
    earliest.wait_messages(2 * PER_PARTITION)
    assert received(earliest) == {0: list(range(10)), 1: list(range(10))}

    latest = start(pool, client, f"reset-latest-{client}", topic, "latest")
    wait_assignments([latest], lambda a: len(a[0]) == PARTITIONS, what="both partitions")
    assert latest.committed([(topic, 0), (topic, 1)]) == {(topic, 0): None, (topic, 1): None}
    # The client resolves "latest" some time after the assignment: keep producing one message per
    # partition until both partitions deliver. Nothing from before may ever arrive, nothing after is lost.
    produced = PER_PARTITION
    while {p for _t, p, _o, _v in latest.messages()} != {0, 1}:
        assert produced < PER_PARTITION + 40, latest.describe()
        produce(broker.bootstrap_servers, topic, {p: [f"p{p}-{produced}"] for p in range(PARTITIONS)})
        produced += 1
        time.sleep(0.25)
    latest.wait_for(
        lambda events: received(latest).get(0, [None])[-1] == produced - 1, what="the last message"
    )
    latest.wait_for(
        lambda events: received(latest).get(1, [None])[-1] == produced - 1, what="the last message"
    )
    for offsets in received(latest).values():
        assert offsets[0] >= PER_PARTITION
        assert offsets == list(range(offsets[0], produced))

    none = start(pool, client, f"reset-none-{client}", topic, "none")
    error = none.wait_event("error", timeout=30)
    expected = "_AUTO_OFFSET_RESET" if client == CONFLUENT else "NoOffsetForPartitionError"
    assert error["name"] == expected, error
    assert none.count("msg") == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_seek(broker: Broker, pool: MemberPool, client: str) -> None:
    topic = filled_topic(broker, f"seek-{client}")
    member = start(pool, client, f"seek-{client}", topic)
    member.wait_messages(2 * PER_PARTITION)
    # A rebalance after the seek would move the position back to the committed offset (kafka-python's
    # leader may rejoin once on its own right after its first assignment): seek in a settled group.
    wait_settled([member])
    member.seek(topic, 1, 7)
    member.wait_messages(2 * PER_PARTITION + 3)
    assert received(member) == {0: list(range(10)), 1: [*range(10), 7, 8, 9]}
