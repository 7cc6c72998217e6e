"""A share group across the kill -9 of its share-partition leader (KIP-932 in a cluster): three brokers, an
RF 3 topic, ``__share_group_state`` at RF 3 led by another broker than the topic, so every state write
of the share-partition leader goes to the share coordinator over WriteShareGroupState, and the next leader
(the third broker) reads it back with ReadShareGroupState.

A ``ShareConsumer`` (explicit mode) acknowledges 10 records and holds the others it acquired; the
partition's leader is killed; a second consumer of the group, whose bootstrap list still names the dead
broker, is routed to the new leader (which loads the state from the share coordinator) and gets exactly
the records not acknowledged: no acknowledged record again, none lost (the held ones' acquisitions died
with the leader).

The soak (``--soak``; ~30 s more) kills the share coordinator's broker first, then the leader's; another soak
(~45 s) kills the group coordinator's broker, whose successor loads the share group's membership.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cli.cli_support import failed, ok, tidelog_cli
from tests.cluster.harness import Scenario
from tests.server.test_share_groups_admin import _squashed
from tests.support.dead_letters import header_map, read_topic, set_group_configs
from tests.support.share_groups import PRIMER, pass_by, prime_acknowledging, value_of

pytestmark = [pytest.mark.cluster, pytest.mark.clients, pytest.mark.timeout(180)]

TOPIC = "jobs"
STATE_TOPIC = "__share_group_state"
OFFSETS_TOPIC = "__consumer_offsets"
GROUP = "workers"
CONFIG = {
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.num.partitions": 1,
}


def _start(scenario: Scenario, state_min_isr: int = 2) -> tuple[int, int, int]:
    """Three brokers: ``__share_group_state`` led by the first, the topic by the second, the third a
    follower of both (next in line for each)."""
    c = scenario.start(config=CONFIG)
    coordinator, leader, third = sorted(c.brokers)
    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    futures = admin.create_topics(
        [
            NewTopic(
                STATE_TOPIC,
                num_partitions=1,
                replica_assignment=[[coordinator, third, leader]],
                config={"cleanup.policy": "compact", "min.insync.replicas": str(state_min_isr)},
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
    return coordinator, leader, third


def _share_consumer(scenario: Scenario) -> ShareConsumer:
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
    return consumer


def _mid_stream(
    scenario: Scenario, values: list[bytes], deadline: float
) -> tuple[ShareConsumer, list[Message]]:
    """A consumer that has received at least 20 of ``values`` (and acknowledged none of them)."""
    producer = Producer(
        {"bootstrap.servers": scenario.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3}
    )
    consumer = _share_consumer(scenario)
    prime_acknowledging(producer, TOPIC, consumer, deadline)
    for value in values:
        producer.produce(TOPIC, value)
    producer.flush(10)
    batch: list[Message] = []
    while len(batch) < 20 and time.monotonic() < deadline:
        batch += [m for m in consumer.poll(0.5) if m.error() is None and value_of(m) != PRIMER]
    return consumer, batch


def _acknowledge(consumer: ShareConsumer, messages: list[Message]) -> set[bytes]:
    for message in messages:
        consumer.acknowledge(message)
    consumer.commit_sync()
    return {value_of(m) for m in messages}


def _rest(scenario: Scenario, remaining: set[bytes], deadline: float) -> list[bytes]:
    """What a new consumer of the group receives (and acknowledges) until it has seen ``remaining``."""
    second = _share_consumer(scenario)
    after: list[bytes] = []
    while not remaining <= set(after) and time.monotonic() < deadline:
        for message in second.poll(0.5):
            second.acknowledge(message)
            if message.error() is None and value_of(message) != PRIMER:
                after.append(value_of(message))
    second.commit_sync()
    second.close()
    return after


def test_share_partition_leader_kill_loses_no_acknowledgement_and_no_record(scenario: Scenario) -> None:
    _coordinator, leader, third = _start(scenario)
    deadline = time.monotonic() + 90
    values = [b"job-%02d" % i for i in range(30)]
    consumer, batch = _mid_stream(scenario, values, deadline)
    acked = _acknowledge(consumer, batch[:10])  # mid-stream: 10 acknowledged, the rest held
    held = {value_of(m) for m in batch[10:]}
    assert len(acked) == 10
    assert held

    old = scenario.state(TOPIC, 0)
    scenario.c.kill(leader)
    scenario.event(f"share-partition leader {leader} killed")
    new = scenario.wait_new_leader(TOPIC, 0, old)
    assert new.leader == third  # it reads the state from the share coordinator on another broker

    remaining = set(values) - acked
    after = _rest(scenario, remaining, deadline)
    with contextlib.suppress(KafkaException):
        consumer.close()
    assert not acked & set(after), "an acknowledged record came again"
    assert held <= set(after)
    assert sorted(after) == sorted(remaining)


@pytest.mark.soak
def test_share_coordinator_kill_then_leader_kill(scenario: Scenario) -> None:
    """The share coordinator's broker dies first: acknowledgements made after it are written to the next
    coordinator (which loaded the replicated state); then the leader dies too and the last broker, leader
    of both, serves exactly what was never acknowledged (``__share_group_state`` at min.insync.replicas 1,
    so its last replica may write)."""
    coordinator, leader, third = _start(scenario, state_min_isr=1)
    deadline = time.monotonic() + 120
    values = [b"job-%02d" % i for i in range(30)]
    consumer, batch = _mid_stream(scenario, values, deadline)
    # the last broker also takes the second consumer into the group: its ShareGroup* records go to
    # __consumer_offsets, which must accept writes from one replica too (else NOT_ENOUGH_REPLICAS for ever,
    # or only while the controller has not yet taken the dead brokers out of its ISR)
    _min_isr_one(scenario, OFFSETS_TOPIC, third)
    acked = _acknowledge(consumer, batch[:10])

    old_state = scenario.state(STATE_TOPIC, 0)
    scenario.c.kill(coordinator)
    scenario.event(f"share coordinator {coordinator} killed")
    assert scenario.wait_new_leader(STATE_TOPIC, 0, old_state).leader == third
    acked |= _acknowledge(consumer, batch[10:15])  # answered once the new coordinator committed them
    assert len(acked) == 15

    old = scenario.state(TOPIC, 0)
    scenario.c.kill(leader)
    scenario.event(f"share-partition leader {leader} killed")
    assert scenario.wait_new_leader(TOPIC, 0, old).leader == third

    remaining = set(values) - acked
    after = _rest(scenario, remaining, deadline)
    with contextlib.suppress(KafkaException):
        consumer.close()
    assert not acked & set(after), "an acknowledged record came again"
    assert sorted(after) == sorted(remaining)


def _min_isr_one(scenario: Scenario, topic: str, broker: int) -> None:
    """``topic``'s min.insync.replicas set to 1, once ``broker`` shows it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entry = ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(30)
    at = AdminClient({"bootstrap.servers": scenario.c.brokers[broker].bootstrap_servers, "log_level": 3})

    def shown() -> bool:
        (described,) = at.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
        return bool(described.result(10)["min.insync.replicas"].value == "1")

    scenario.wait_for(shown, f"broker {broker} to show {topic}'s min.insync.replicas 1")


def _group_coordinated_by(scenario: Scenario, broker: int) -> str:
    """A share group id whose ``__consumer_offsets`` partition ``broker`` leads (the topic created first)."""
    from tidelog.cli._txn_wire import GROUP_KEY_TYPE, find_coordinator
    from tidelog.client.wire import connect

    with connect(scenario.bootstrap, timeout=30) as wire:
        find_coordinator(wire, "any", key_type=GROUP_KEY_TYPE)  # creates __consumer_offsets, waits for it
    scenario.wait_for(lambda: all(scenario.full_isr(OFFSETS_TOPIC, p) for p in range(3)), "offsets topic ISR")
    for i in range(100):
        group = f"{GROUP}-{i}"
        if scenario.leader(OFFSETS_TOPIC, scenario.coordinator_partition(OFFSETS_TOPIC, group)) == broker:
            return group
    raise AssertionError(f"no group id coordinated by broker {broker}")


def test_share_group_admin_at_a_broker_that_is_not_the_coordinator(scenario: Scenario) -> None:
    """``tidelog share-groups`` bootstrapped at the share coordinator's broker, while the third broker is the
    group coordinator and another leads the topic: reset, describe, pending, list and delete all land where
    Kafka routes them, and the state the group coordinator writes is what the partition's leader reads."""
    share_coordinator, _leader, third = _start(scenario)
    group = _group_coordinated_by(scenario, third)
    b = ["-b", scenario.c.brokers[share_coordinator].bootstrap_servers]
    producer = Producer({"bootstrap.servers": scenario.bootstrap, "acks": "all", "log_level": 3})
    for i in range(10):
        producer.produce(TOPIC, b"job-%02d" % i)
    producer.flush(10)

    reset = ["share-groups", "reset-offsets", "--group", group, "--topic", TOPIC, "--to-offset", "6"]
    assert _squashed(ok(tidelog_cli(*reset, "--execute", *b)))[-1] == f"{group} | {TOPIC} | 0 | 6"
    assert _squashed(ok(tidelog_cli("share-groups", "describe", group, *b))) == [
        f"share group {group}: Empty, epoch 0",  # known from its state, at the share coordinator
        "member | client id | host | epoch | partitions",
        f"start offsets of {group}",
        "topic | partition | start offset",
        f"{TOPIC} | 0 | 6",
    ]
    consumer = ShareConsumer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "client.id": "worker-1",
            "log_level": 3,
        }
    )
    consumer.subscribe([TOPIC])
    got: list[Message] = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        got += [m for m in consumer.poll(0.5) if m.error() is None]
    assert [(m.offset(), m.value()) for m in got] == [(o, b"job-%02d" % o) for o in range(6, 10)]
    consumer.acknowledge(got[0])
    consumer.commit_sync()

    described = _squashed(ok(tidelog_cli("share-groups", "describe", group, *b)))
    (member_row,) = [line for line in described if "worker-1" in line]
    member_id = member_row.split(" | ")[0]
    assert member_row.split(" | ")[4] == f"{TOPIC}:0"
    pending = _squashed(ok(tidelog_cli("share-groups", "pending", group, *b)))
    assert [row.split(" | ")[:5] for row in pending[2:]] == [[TOPIC, "0", "7-9", member_id, "1"]]
    assert group in ok(tidelog_cli("share-groups", "list", *b)).splitlines()
    consumer.close()

    assert (
        ok(tidelog_cli("share-groups", "delete", "--group", group, *b)) == f"Deleted share group {group}.\n"
    )
    assert failed(tidelog_cli("share-groups", "describe", group, *b)) == (
        f"Error: share group not found: {group} (GROUP_ID_NOT_FOUND)"
    )


DLQ = "jobs.dlq"


def _reject_all(consumer: ShareConsumer, producer: Producer, prefix: bytes, deadline: float) -> set[int]:
    """Produce 20 records and an end marker; REJECT the 20 as they come: their offsets."""
    end = prefix + b"-end"
    for i in range(20):
        producer.produce(TOPIC, prefix + b"-%02d" % i)
    producer.produce(TOPIC, end)
    producer.flush(10)
    rejected: set[int] = set()
    done = False
    while not done:
        assert time.monotonic() < deadline, f"{end!r} never came"
        for message in consumer.poll(0.5):
            if message.error() is not None:
                continue
            value = value_of(message)
            bad = value.startswith(prefix) and value != end
            consumer.acknowledge(message, AcknowledgeType.REJECT if bad else AcknowledgeType.ACCEPT)
            if bad:
                rejected.add(message.offset() or 0)
            done = done or value == end
        consumer.commit_sync()
    assert len(rejected) == 20
    return rejected


def _copied_offsets(scenario: Scenario, count: int, deadline: float) -> list[int]:
    copies = read_topic(scenario.bootstrap, DLQ, count, deadline)
    return [int(header_map(m)["__dlq.errors.offset"]) for m in copies]  # type: ignore[call-overload]


def test_dead_letter_copies_go_to_another_brokers_leader_and_follow_its_failover(scenario: Scenario) -> None:
    """The dead-letter partition is led by a broker that does not lead the share-partition: the copies are
    produced to it (acks=all, idempotent) and each REJECTed record is there exactly once; its leader is
    killed, and the next REJECTs are copied to the new leader, again exactly once each."""
    coordinator, leader, third = _start(scenario)
    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    (future,) = admin.create_topics(
        [NewTopic(DLQ, num_partitions=1, replica_assignment=[[third, coordinator, leader]])]
    ).values()
    future.result(60)
    scenario.wait_for(lambda: scenario.full_isr(DLQ, 0), f"{DLQ}: led with its full ISR")
    scenario.wait_metadata(DLQ, 1)
    assert scenario.leader(DLQ, 0) == third
    group = "dlq-workers"
    set_group_configs(
        scenario.bootstrap,
        group,
        {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": DLQ},
    )
    deadline = time.monotonic() + 120
    producer = Producer({"bootstrap.servers": scenario.bootstrap, "acks": "all", "log_level": 3})
    consumer = ShareConsumer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 3,
        }
    )
    consumer.subscribe([TOPIC])
    try:
        first = _reject_all(consumer, producer, b"a", deadline)
        assert sorted(_copied_offsets(scenario, 20, deadline)) == sorted(first)

        old = scenario.state(DLQ, 0)
        scenario.c.kill(third)
        scenario.event(f"dead-letter partition leader {third} killed")
        assert scenario.wait_new_leader(DLQ, 0, old).leader == coordinator
        second = _reject_all(consumer, producer, b"b", deadline)
        assert sorted(_copied_offsets(scenario, 40, deadline)) == sorted(first | second)
    finally:
        with contextlib.suppress(KafkaException):
            consumer.close()


def _described_members(bootstrap: str, group: str) -> list[tuple[str, int]] | None:
    """The group's (member id, member epoch) at the broker ``bootstrap`` (None: it does not serve it yet)."""
    from tidelog.client.wire import connect
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse

    with connect(bootstrap, timeout=10) as wire:
        (described,) = wire.call(
            ShareGroupDescribeRequest(group_ids=[group]), 0, expect=ShareGroupDescribeResponse
        ).groups
    if described.error_code != ErrorCode.NONE:
        return None
    return [(m.member_id, m.member_epoch) for m in described.members]


@pytest.mark.soak
def test_group_coordinator_kill_keeps_the_share_groups_members(scenario: Scenario) -> None:
    """The group coordinator's broker dies: the next leader of the group's ``__consumer_offsets`` partition
    loads the share group from its replicated ShareGroup* records, and the member carries on with its member
    id and epoch (6, after another member came and went; one that joined again would be at 3)."""

    _share_coordinator, _leader, third = _start(scenario)
    group = _group_coordinated_by(scenario, third)
    at_third = scenario.c.brokers[third].bootstrap_servers
    deadline = time.monotonic() + 120
    producer = Producer(
        {"bootstrap.servers": scenario.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3}
    )
    consumer = ShareConsumer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 3,
        }
    )
    consumer.subscribe([TOPIC])
    prime_acknowledging(producer, TOPIC, consumer, deadline)
    pass_by(at_third, group, TOPIC)
    while (members := _described_members(at_third, group)) is None or members[0][1] != 6:
        assert time.monotonic() < deadline, f"the worker's epoch never became 6: {members}"
        consumer.poll(0.5)
    [(member_id, _epoch)] = members

    partition = scenario.coordinator_partition(OFFSETS_TOPIC, group)
    old = scenario.state(OFFSETS_TOPIC, partition)
    scenario.c.kill(third)
    scenario.event(f"group coordinator {third} killed")
    new = scenario.wait_new_leader(OFFSETS_TOPIC, partition, old)

    values = [b"after-%02d" % i for i in range(10)]
    for value in values:
        producer.produce(TOPIC, value)
    producer.flush(10)
    got: list[bytes] = []
    while not set(values) <= set(got):
        assert time.monotonic() < deadline, f"received only {got}"
        for message in consumer.poll(0.5):  # the share-partition's leader kept it across the ISR change
            if message.error() is None:
                consumer.acknowledge(message)
                if value_of(message) != PRIMER:
                    got.append(value_of(message))
    consumer.commit_sync()
    assert got == values
    at_new = scenario.c.brokers[new.leader].bootstrap_servers
    while (members := _described_members(at_new, group)) is None:
        assert time.monotonic() < deadline, "the new coordinator never served the group"
        time.sleep(0.2)
    assert members == [(member_id, 6)]
    consumer.close()


def test_isr_shrink_and_expand_under_a_share_consumer_delivers_each_record_once(scenario: Scenario) -> None:
    """The third broker, a follower of the topic, of ``__share_group_state`` and of the group's
    ``__consumer_offsets`` partition, is killed while a ShareConsumer consumes and acknowledges: the
    controller takes it out of each ISR (a new leader epoch, same leader), then it comes back and the
    leaders take it in again (same leader epoch). No leadership moved, so nothing is reloaded: the consumer
    gets every record exactly once, and no poll or message fails (COORDINATOR_LOAD_IN_PROGRESS was raised
    from poll() while the leaders reloaded their share-partitions, coordinators and groups, and acquired
    records were dropped with the share-partition and delivered again)."""
    coordinator, leader, third = _start(scenario)
    group = _group_coordinated_by(scenario, coordinator)
    offsets_partition = scenario.coordinator_partition(OFFSETS_TOPIC, group)
    watched = [(TOPIC, 0), (STATE_TOPIC, 0), (OFFSETS_TOPIC, offsets_partition)]
    deadline = time.monotonic() + 150
    producer = Producer(
        {"bootstrap.servers": scenario.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3}
    )
    consumer = ShareConsumer(
        {
            "bootstrap.servers": scenario.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "topic.metadata.refresh.interval.ms": 1000,
            "log_level": 3,
        }
    )
    consumer.subscribe([TOPIC])
    prime_acknowledging(producer, TOPIC, consumer, deadline)
    before = {t: scenario.state(t, p) for t, p in watched}
    sent: list[bytes] = []
    got: list[bytes] = []
    failures: list[str] = []

    def consume_until(condition: Callable[[], bool], what: str, *, produce: bool = True) -> None:
        """Produce a record (unless not ``produce``) and poll, acknowledging what came, until ``condition``."""
        while not condition():
            assert time.monotonic() < deadline, (
                f"timed out waiting for {what}; received {len(got)}/{len(sent)}"
            )
            if produce:
                value = b"job-%03d" % len(sent)
                producer.produce(TOPIC, value)
                producer.poll(0)
                sent.append(value)
            try:
                messages = consumer.poll(0.2)
            except KafkaException as exc:
                failures.append(str(exc))
                continue
            for message in messages:
                if message.error() is not None:
                    failures.append(str(message.error()))
                    continue
                consumer.acknowledge(message)
                if value_of(message) != PRIMER:
                    got.append(value_of(message))

    consume_until(lambda: len(got) >= 10, "10 records")
    producer.produce(TOPIC, b"held")
    sent.append(b"held")
    producer.flush(10)
    held: list[Message] = []
    while not held:  # records acquired and held (not acknowledged, no poll) across the ISR change
        assert time.monotonic() < deadline, "the held record never came"
        for message in consumer.poll(0.5):
            assert message.error() is None, message.error()
            held.append(message)
    scenario.c.kill(third)
    scenario.event(f"follower {third} killed")
    scenario.wait_for(
        lambda: all(third not in scenario.state(t, p).isr for t, p in watched), f"{third} out of the ISRs"
    )
    for broker in (coordinator, leader):  # the leaders applied the new leader epochs
        at = AdminClient({"bootstrap.servers": scenario.c.brokers[broker].bootstrap_servers, "log_level": 3})
        scenario.wait_for(
            lambda at=at: all(  # type: ignore[misc]
                third not in at.list_topics(t, timeout=5).topics[t].partitions[p].isrs for t, p in watched
            ),
            f"broker {broker}'s metadata without {third} in the ISRs",
        )
    for message in held:
        consumer.acknowledge(message)
    committed = consumer.commit_sync()
    assert all(error is None for error in committed.values()), committed
    got += [value_of(m) for m in held if value_of(m) != PRIMER]
    consume_until(lambda: len(got) >= len(sent) - 5, "the consumer to catch up")
    scenario.c.start_broker(third)
    scenario.event(f"follower {third} restarted")
    consume_until(lambda: all(scenario.full_isr(t, p) for t, p in watched), f"{third} back in the ISRs")
    producer.flush(30)
    consume_until(lambda: set(sent) <= set(got), "every record", produce=False)
    consumer.commit_sync()
    consumer.close()

    after = {t: scenario.state(t, p) for t, p in watched}
    for topic, state in after.items():  # the ISR changed, the leaders did not
        assert state.leader == before[topic].leader, topic
        assert state.leader_epoch > before[topic].leader_epoch, topic
    assert failures == []
    assert sorted(got) == sorted(set(got)), "a record came twice"
    assert sorted(got) == sorted(sent)
