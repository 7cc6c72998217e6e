"""Partition reassignment (KIP-455) on a real 4-broker cluster with ZooKeeper, one cluster for the module:

- a partition moved from brokers 1,2,3 to 2,3,4 under continuous acks=all load (kafka-python's admin
  AlterPartitionReassignments): the leader moves to a target replica, broker 4 copies the log by fetching,
  broker 1's replica is deleted, and nothing acknowledged is lost (the checker's full verification);
- a move whose new replica cannot catch up (its broker paused) is listed in progress with its adding and
  removing replicas, then cancelled: the original assignment is back, nothing is listed;
- ``tidelog reassign``: generate proposes a plan over a broker list, execute prints the rollback plan and
  starts it, verify reports it in progress (with its adding replicas' ISR count) and then complete, cancel
  cancels a move in progress;
- a move in progress (its new replica paused) carried on by the next controller after the controller's
  ZooKeeper session expired;
- a throttled move (``tidelog reassign execute --throttle``) copies at no more than 1.2x the throttle, and
  verify removes the throttles once it is complete;
- the errors: INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS, and
  NOT_CONTROLLER from a broker that is not the controller.
- ``tidelog brokers drain 1`` under continuous acks=all load (last: it stops broker 1): refused for an
  unknown broker, a dry run that changes nothing, then every replica of broker 1 (a RF 3 topic's and the
  offsets topic's) moved off in the order the plan says, broker 1 leading nothing (ZooKeeper and
  ``brokers list --json``); broker 1 stopped, produce and consume go on, the group's offsets are still
  there; nothing acknowledged lost.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.harness import Scenario
from tests.cluster.workload import ProducerSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    seed = random.SystemRandom().randrange(1, 1_000_000)
    print(f"reassignment cluster seed {seed}")
    instance = Scenario(seed, tmp_path_factory.mktemp("reassign"), "reassignment")
    try:
        # one replication quota sample: a throttled move is paced from its first bytes (Kafka's default
        # 11 samples let a fresh quota pass 10 windows' worth at full speed first)
        instance.start(brokers=4, config={"replication.quota.window.num": 1})
        yield instance
    finally:
        instance.close()


THROTTLED = "throttled"
"""The throttled-move test's topic: filled with random bytes, not through the checked history."""


def create_topic(scenario: Scenario, name: str, replicas: list[int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    admin.create_topics(
        [NewTopic(name, num_partitions=1, replica_assignment=[replicas])], operation_timeout=30
    )[name].result(60)
    scenario.topics[name] = 1
    scenario.wait_for(lambda: scenario.full_isr(name, 0), f"{name}-0 led with its full ISR")
    scenario.wait_metadata(name, 1)


def admin_for(address: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=30_000)


def topic_znode(scenario: Scenario, topic: str) -> dict[str, Any]:
    data, _stat = scenario.zk().get(f"/brokers/topics/{topic}")
    document: dict[str, Any] = json.loads(data)
    return document


def run_cli(*args: str, code: int = 0) -> str:
    from click.testing import CliRunner

    from tidelog.cli.main import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def ids(values: list[int]) -> str:
    return ",".join(map(str, values))


def has_log(scenario: Scenario, broker: int, topic: str) -> bool:
    return (Path(scenario.c.broker(broker).data_dir) / f"{topic}-0").is_dir()


def test_move_replicas_under_load(scenario: Scenario) -> None:
    from kafka import TopicPartition

    topic = "moving"
    create_topic(scenario, topic, [1, 2, 3])
    assert scenario.leader(topic, 0) == 1
    before = scenario.state(topic, 0)
    admin = admin_for(scenario.bootstrap)
    producers = [ProducerSpec("idem"), ProducerSpec("plain", idempotent=False)]
    with scenario.workload(topic, producers=producers) as load:
        load.wait_acked(300, "before the move")
        result = admin.alter_partition_reassignments({TopicPartition(topic, 0): [2, 3, 4]})
        assert result == {TopicPartition(topic, 0): None}
        scenario.event("reassignment of moving-0 to [2,3,4] accepted")
        scenario.wait_for(
            lambda: scenario.replicas(topic, 0) == [2, 3, 4] and scenario.full_isr(topic, 0),
            "the move to [2,3,4] to complete",
            90,
        )
        scenario.event("reassignment of moving-0 complete")
        load.wait_acked(200, "after the move")
    after = scenario.state(topic, 0)
    assert after.leader == 2
    assert after.leader_epoch > before.leader_epoch
    assert sorted(after.isr) == [2, 3, 4]
    znode = topic_znode(scenario, topic)
    assert znode["partitions"] == {"0": [2, 3, 4]}
    assert znode.get("adding_replicas", {}) == {}
    assert znode.get("removing_replicas", {}) == {}
    assert admin.list_partition_reassignments() == {}
    scenario.wait_for(lambda: not has_log(scenario, 1, topic), "broker 1 to delete its replica of moving-0")
    assert has_log(scenario, 4, topic)
    assert scenario.history.failure_counts() == {}
    scenario.verify([topic])
    admin.close()


def test_cancel_a_move_that_cannot_catch_up(scenario: Scenario, tmp_path: Path) -> None:
    from kafka import TopicPartition

    controller = scenario.controller()
    stuck = max(b for b in scenario.c.brokers if b != controller)  # not the controller: it is paused
    original = sorted(b for b in scenario.c.brokers if b != stuck)
    target = [*original[1:], stuck]
    topic = "cancelled"
    create_topic(scenario, topic, original)
    tp = TopicPartition(topic, 0)
    admin = admin_for(scenario.c.broker(controller).bootstrap_servers)
    assert admin.list_partition_reassignments() == {}  # connected to the controller before the pause
    with scenario.c.paused(stuck):
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        listed = admin.list_partition_reassignments()
        assert listed == {
            tp: {
                "replicas": [*target, original[0]],
                "adding_replicas": [stuck],
                "removing_replicas": [original[0]],
            }
        }
        assert admin.list_partition_reassignments([tp]) == listed
        assert scenario.replicas(topic, 0) == [*target, original[0]]
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]})
        )
        on_controller = ["--bootstrap-server", scenario.c.broker(controller).bootstrap_servers]
        verified = run_cli("reassign", "verify", "--reassignment-json-file", str(plan), *on_controller)
        assert verified.splitlines() == [
            "Status of partition reassignment:",
            (
                f"Reassignment of partition {topic}-0 is still in progress: replicas {ids([*target, original[0]])}, "
                f"adding {stuck} (0/1 in the ISR), removing {original[0]}."
            ),
        ]
        refused = run_cli(
            "reassign", "execute", "--reassignment-json-file", str(plan), *on_controller, code=1
        )
        assert "Cannot execute because there is an existing partition assignment" in refused
        not_drained = run_cli("brokers", "drain", str(stuck), "--dry-run", *on_controller, code=1)
        assert (
            f"partitions being moved have a replica on broker {stuck}: {topic}-0; wait until" in not_drained
        )
        cancelled = run_cli("reassign", "cancel", "--reassignment-json-file", str(plan), *on_controller)
        assert cancelled.splitlines() == [f"Successfully cancelled partition reassignments for: {topic}-0"]
        assert admin.list_partition_reassignments() == {}
        # Kafka's order: the original replicas as they stand in the move's list (target first)
        assert scenario.replicas(topic, 0) == [*original[1:], original[0]]
        assert topic_znode(scenario, topic).get("adding_replicas", {}) == {}
        state = scenario.state(topic, 0)
        assert state.leader in original
        assert set(state.isr) <= set(original)
    scenario.wait_for(lambda: scenario.full_isr(topic, 0), "the original replicas in the ISR")
    scenario.wait_for(
        lambda: not has_log(scenario, stuck, topic), f"no replica of {topic}-0 on broker {stuck}"
    )
    admin.close()


def test_cli_generate_execute_verify(scenario: Scenario, tmp_path: Path) -> None:
    topic = "by-cli"
    create_topic(scenario, topic, [1, 2, 3])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    bootstrap = ["--bootstrap-server", scenario.bootstrap]
    generated = run_cli(
        "reassign",
        "generate",
        "--topics-to-move-json-file",
        str(topics),
        "--broker-list",
        "2,3,4",
        *bootstrap,
    ).splitlines()
    assert generated[0] == "Current partition replica assignment"
    assert json.loads(generated[1]) == {
        "version": 1,
        "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2, 3], "log_dirs": ["any"] * 3}],
    }
    assert generated[2:4] == ["", "Proposed partition reassignment configuration"]
    (proposed,) = json.loads(generated[4])["partitions"]
    assert sorted(proposed["replicas"]) == [2, 3, 4]

    plan = tmp_path / "plan.json"
    plan.write_text(generated[4])
    executed = run_cli("reassign", "execute", "--reassignment-json-file", str(plan), *bootstrap).splitlines()
    assert executed[:3] == ["Current partition replica assignment", "", generated[1]]
    assert executed[3:] == [
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        f"Successfully started partition reassignments for {topic}-0",
    ]
    scenario.wait_for(
        lambda: (
            run_cli("reassign", "verify", "--reassignment-json-file", str(plan), *bootstrap).splitlines()
            == [
                "Status of partition reassignment:",
                f"Reassignment of partition {topic}-0 is completed.",
                "Clearing broker-level throttles on brokers 1,2,3,4",
                f"Clearing topic-level throttles on topic {topic}",
            ]
        ),
        "verify to report the move complete",
    )
    assert scenario.replicas(topic, 0) == proposed["replicas"]
    cancelled = run_cli("reassign", "cancel", "--reassignment-json-file", str(plan), *bootstrap)
    assert cancelled.splitlines() == ["None of the specified partition reassignments are active."]


THROTTLE = 1_000_000
"""Bytes/s: far below what the machine copies unthrottled, even loaded, so the limiter is what is tested."""
THROTTLE_KEYS = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}


def log_bytes(scenario: Scenario, broker: int, topic: str) -> int:
    """The size of the segment files of ``topic``-0's replica on ``broker`` (0 while it has none)."""
    directory = Path(scenario.c.broker(broker).data_dir) / f"{topic}-0"
    return sum(path.stat().st_size for path in directory.glob("*.log")) if directory.is_dir() else 0


def zk_config(scenario: Scenario, entity: str) -> dict[str, str]:
    found = scenario.zk().exists(f"/config/{entity}")
    if found is None:
        return {}
    data, _stat = scenario.zk().get(f"/config/{entity}")
    config: dict[str, str] = json.loads(data)["config"]
    return config


def test_a_throttled_move_holds_its_rate_and_verify_removes_the_throttle(
    scenario: Scenario, tmp_path: Path
) -> None:
    """``reassign execute --throttle 1000000`` moves ~5 MB from [1,2,3] to [1,2,4]: broker 4's copy, polled on
    disk every 50 ms, grows at no more than 1.2x the throttle on average from its first bytes to the last
    (the first fetch is always answered: Kafka measures a fetch after sending it), and at least 0.25x (a
    generous floor: the limiter must not stall the move; unthrottled, even a loaded machine copies many
    times faster). Then verify reports the move complete and removes the throttles it set."""
    import os

    from confluent_kafka import Producer

    topic = THROTTLED
    create_topic(scenario, topic, [1, 2, 3])
    producer = Producer(
        {"bootstrap.servers": scenario.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 3}
    )
    for _ in range(5_000):
        producer.produce(topic, os.urandom(1_000), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    total = log_bytes(scenario, 1, topic)
    assert total > 5_000_000
    scenario.wait_for(lambda: log_bytes(scenario, 3, topic) == total, "broker 3 to hold the whole log")

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2, 4]}]})
    )
    bootstrap = ["--bootstrap-server", scenario.bootstrap]
    executed = run_cli(
        "reassign", "execute", "--reassignment-json-file", str(plan), "--throttle", str(THROTTLE), *bootstrap
    ).splitlines()
    assert executed[-3:] == [
        (
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the"
            " throttle is removed."
        ),
        f"The inter-broker throttle limit was set to {THROTTLE} B/s",
        f"Successfully started partition reassignments for {topic}-0",
    ]
    in_progress = run_cli(
        "reassign", "verify", "--reassignment-json-file", str(plan), *bootstrap
    ).splitlines()
    assert in_progress == [  # the throttles stay while the move is in progress
        "Status of partition reassignment:",
        (
            f"Reassignment of partition {topic}-0 is still in progress: replicas 1,2,4,3, adding 4"
            " (0/1 in the ISR), removing 3."
        ),
    ]
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        size = log_bytes(scenario, 4, topic)
        if size:
            samples.append((time.monotonic(), size))
        if size >= total:
            break
        time.sleep(0.05)  # a sampling period, not a synchronisation
    assert samples, "broker 4 copied nothing"
    assert samples[-1][1] == total, f"the throttled move did not complete: {samples[-1][1]} of {total} bytes"
    for broker in (1, 2, 3, 4):
        assert {k: v for k, v in zk_config(scenario, f"brokers/{broker}").items() if k in THROTTLE_KEYS} == (
            dict.fromkeys(THROTTLE_KEYS, str(THROTTLE))
        ), broker
    assert zk_config(scenario, f"topics/{topic}") == {
        "leader.replication.throttled.replicas": "0:1,0:2,0:3",
        "follower.replication.throttled.replicas": "0:4",
    }
    (first_at, first), (last_at, last) = samples[0], samples[-1]
    rate = (last - first) / (last_at - first_at)
    print(f"throttled move: {last - first} bytes in {last_at - first_at:.2f} s = {rate:.0f} B/s")
    assert rate <= 1.2 * THROTTLE
    assert rate >= 0.25 * THROTTLE

    scenario.wait_for(
        lambda: (
            run_cli("reassign", "verify", "--reassignment-json-file", str(plan), *bootstrap).splitlines()
            == [
                "Status of partition reassignment:",
                f"Reassignment of partition {topic}-0 is completed.",
                "Clearing broker-level throttles on brokers 1,2,3,4",
                f"Clearing topic-level throttles on topic {topic}",
            ]
        ),
        "verify to report the move complete",
    )
    for broker in (1, 2, 3, 4):
        assert not THROTTLE_KEYS & set(zk_config(scenario, f"brokers/{broker}")), broker
    assert zk_config(scenario, f"topics/{topic}") == {}


def wire_listed(address: str) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments sent to the broker at ``address``; raises unless it is the controller."""
    from tidelog.client.wire import connect
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

    with connect(address, timeout=10) as wire:
        listed = wire.call(
            ListPartitionReassignmentsRequest(topics=None), expect=ListPartitionReassignmentsResponse
        )
    assert listed.error_code == ErrorCode.NONE, ErrorCode.name_of(listed.error_code)
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in listed.topics
        for p in t.partitions
    }


def test_a_move_survives_a_controller_failover(scenario: Scenario) -> None:
    from kafka import TopicPartition

    controller = scenario.controller()
    stuck = max(b for b in scenario.c.brokers if b != controller)
    original = sorted(b for b in scenario.c.brokers if b != stuck)
    target = [*(b for b in original if b != controller), stuck]  # the controller's replica moves to `stuck`
    topic = "failover"
    create_topic(scenario, topic, original)
    epoch = scenario.controller_epoch()
    admin = admin_for(scenario.c.broker(controller).bootstrap_servers)
    assert admin.list_partition_reassignments() == {}
    with scenario.c.paused(stuck):
        assert admin.alter_partition_reassignments({TopicPartition(topic, 0): target}) == {
            TopicPartition(topic, 0): None
        }
        admin.close()
        scenario.c.expire_session(controller)
        scenario.event(f"controller {controller}'s session expired")
        scenario.wait_for(
            lambda: scenario.controller_epoch() > epoch and scenario.controller() > 0,
            "a new controller epoch",
        )
        moving = {(topic, 0): ([*target, controller], [stuck], [controller])}
        scenario.wait_for(
            lambda: wire_listed(scenario.c.broker(scenario.controller()).bootstrap_servers) == moving,
            "the new controller to list the move in progress",
        )
    scenario.wait_for(
        lambda: scenario.replicas(topic, 0) == target and scenario.full_isr(topic, 0),
        f"the move to {target} to complete under the new controller",
        60,
    )
    assert topic_znode(scenario, topic).get("adding_replicas", {}) == {}
    scenario.wait_for(
        lambda: not has_log(scenario, controller, topic), f"broker {controller} to delete its replica"
    )


def test_errors(scenario: Scenario) -> None:
    from kafka import TopicPartition

    from tidelog.client.wire import connect
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

    topic = "errors"
    create_topic(scenario, topic, [1, 2, 3])
    tp = TopicPartition(topic, 0)
    admin = admin_for(scenario.bootstrap)
    outcome = admin.alter_partition_reassignments(
        {
            tp: [1, 1, 2],
            TopicPartition(topic, 5): [1, 2, 3],
            TopicPartition("no-such-topic", 0): [1, 2, 3],
        }
    )
    assert {k: v.errno for k, v in outcome.items() if v is not None} == {
        tp: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        TopicPartition(topic, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        TopicPartition("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    outcome = admin.alter_partition_reassignments({tp: [1, 2, 9]})  # broker 9 is not alive
    assert outcome[tp].errno == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    outcome = admin.alter_partition_reassignments({tp: None})
    assert outcome[tp].errno == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert scenario.replicas(topic, 0) == [1, 2, 3]
    admin.close()

    other = next(b for b in scenario.c.brokers if b != scenario.controller())
    with connect(scenario.c.broker(other).bootstrap_servers, timeout=10) as wire:
        listed = wire.call(
            ListPartitionReassignmentsRequest(topics=None), expect=ListPartitionReassignmentsResponse
        )
        assert listed.error_code == ErrorCode.NOT_CONTROLLER
        altered = wire.call(
            AlterPartitionReassignmentsRequest(
                topics=[
                    AlterPartitionReassignmentsRequest.ReassignableTopic(
                        name=topic,
                        partitions=[
                            AlterPartitionReassignmentsRequest.ReassignablePartition(
                                partition_index=0, replicas=[2, 3, 4]
                            )
                        ],
                    )
                ]
            ),
            expect=AlterPartitionReassignmentsResponse,
        )
        assert altered.error_code == ErrorCode.NOT_CONTROLLER
        assert altered.responses[0].partitions[0].error_code == ErrorCode.NOT_CONTROLLER


# ---- tidelog brokers drain (keep this test last: it stops broker 1, then starts it again, empty) ----

OFFSETS = "__consumer_offsets"


def hosted_by(scenario: Scenario, broker: int) -> dict[tuple[str, int], list[int]]:
    """Every partition (internal topics included) with a replica on ``broker``, as ZooKeeper assigns it."""
    found = {}
    for topic in scenario.all_topics():
        data, _stat = scenario.zk().get(f"/brokers/topics/{topic}")
        for partition, replicas in json.loads(data)["partitions"].items():
            if broker in replicas:
                found[(topic, int(partition))] = [int(r) for r in replicas]
    return found


def led_by(scenario: Scenario, broker: int) -> list[tuple[str, int]]:
    return [
        (topic, p)
        for topic in scenario.all_topics()
        for p in range(len(scenario.zk().get_children(f"/brokers/topics/{topic}/partitions")))
        if scenario.leader(topic, p) == broker
    ]


def commit_offsets(scenario: Scenario, group: str, topic: str, offsets: dict[int, int]) -> None:
    """A commit of ``group`` (creates the offsets topic on first use)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": scenario.bootstrap, "group.id": group, "log_level": 3})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_drain_a_broker_under_load_then_stop_it(scenario: Scenario) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import TopicPartition

    topic = "drained"
    layout = [[1, 2, 3], [2, 1, 4], [3, 4, 2]]
    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=layout)], operation_timeout=30)[
        topic
    ].result(60)
    scenario.topics[topic] = 3
    group, committed = "drain-group", {0: 1, 1: 2, 2: 3}
    commit_offsets(scenario, group, topic, committed)
    offsets_count = len(scenario.zk().get_children(f"/brokers/topics/{OFFSETS}/partitions"))
    if not any(1 in scenario.replicas(OFFSETS, p) for p in range(offsets_count)):  # placement is random
        kept = [b for b in scenario.replicas(OFFSETS, 0) if b != 1][:2]
        admin_for(scenario.bootstrap).alter_partition_reassignments({TopicPartition(OFFSETS, 0): [*kept, 1]})
    scenario.wait_for(
        lambda: (
            all(scenario.full_isr(topic, p) for p in range(3))
            and all(
                scenario.full_isr(OFFSETS, p) and scenario.replicas(OFFSETS, p) for p in range(offsets_count)
            )
            and any(1 in scenario.replicas(OFFSETS, p) for p in range(offsets_count))
        ),
        "the drained topic and the offsets topic led with their full ISRs, broker 1 in the offsets topic",
    )
    scenario.wait_metadata(topic, 3)
    before = hosted_by(scenario, 1)
    assert {tp for tp in before if tp[0] == topic} == {(topic, 0), (topic, 1)}
    assert any(t == OFFSETS for t, _p in before)

    bootstrap = ["-b", scenario.bootstrap]
    refused = run_cli("brokers", "drain", "9", *bootstrap, code=1)
    assert "broker 9 is not a known broker (live brokers: 1, 2, 3, 4)" in refused
    dry = run_cli("brokers", "drain", "1", "--dry-run", *bootstrap).splitlines()
    assert dry[:3] == [
        f"Partitions with a replica on broker 1: {len(before)}",
        "Current partition replica assignment",
        "",
    ]
    rollback = {(p["topic"], p["partition"]): p["replicas"] for p in json.loads(dry[3])["partitions"]}
    assert rollback == before
    assert dry[4:8] == [
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Proposed partition reassignment configuration",
        "",
    ]
    proposed = {(p["topic"], p["partition"]): p["replicas"] for p in json.loads(dry[8])["partitions"]}
    assert set(proposed) == set(before)
    for tp, replicas in proposed.items():  # the others' order kept, one new replica appended
        assert replicas[:-1] == [r for r in before[tp] if r != 1]
        assert replicas[-1] not in (1, *before[tp])
    assert proposed[(topic, 0)][:2] == [2, 3]
    assert proposed[(topic, 1)][:2] == [2, 4]
    assert dry[9:] == ["", f"Dry run: nothing was moved ({len(before)} partitions would be)."]
    assert hosted_by(scenario, 1) == before

    # the module's history is shared: producer names (and so values) of their own
    producers = [ProducerSpec("drain-idem"), ProducerSpec("drain-plain", idempotent=False)]
    with scenario.workload(topic, producers=producers) as load:
        load.wait_acked(300, "before the drain")
        scenario.event("draining broker 1")
        drained = run_cli("brokers", "drain", "1", *bootstrap).splitlines()
        scenario.event("broker 1 drained")
        assert drained[:9] == dry[:9]  # the same plan
        names = ",".join(f"{t}-{p}" for t, p in sorted(before))
        assert drained[10] == f"Successfully started partition reassignments for {names}"
        assert drained[11].startswith("Moves complete: ")
        assert drained[-2] == f"Moves complete: {len(before)}/{len(before)}"
        assert drained[-1] == "Broker 1 holds no replicas; it can be stopped."
        assert hosted_by(scenario, 1) == {}
        assert led_by(scenario, 1) == []
        assert {tp: scenario.replicas(*tp) for tp in proposed} == proposed
        # and no ISR names broker 1 again: a removed replica still fetching before it learns of its removal
        # must not be taken back into the ISR by the leader
        assert {tp: set(scenario.state(*tp).isr) - set(proposed[tp]) for tp in proposed} == {
            tp: set() for tp in proposed
        }
        listed = json.loads(run_cli("brokers", "list", "--json", *bootstrap))
        (row,) = [b for b in listed["brokers"] if b["id"] == 1]
        assert (row["alive"], row["leader_partitions"], row["replica_partitions"]) == (True, [], [])
        again = run_cli("brokers", "drain", "1", "--dry-run", *bootstrap)
        assert again.splitlines() == ["Broker 1 holds no replicas: nothing to move."]
        again = run_cli("brokers", "drain", "1", *bootstrap)
        assert again.splitlines() == ["Broker 1 holds no replicas; it can be stopped."]
        load.wait_acked(200, "after the drain")

        scenario.c.stop(1)
        scenario.event("broker 1 stopped")
        load.wait_acked(300, "with broker 1 stopped")
        load.wait_read_up_to(scenario.high_watermarks(topic))
        assert scenario.committed_offsets(group, topic) == committed
        scenario.c.start_broker(1)
        scenario.event("broker 1 started again")
    assert hosted_by(scenario, 1) == {}
    assert scenario.history.failure_counts() == {}
    # every topic of the module (its history holds the earlier tests' records too) but the throttled move's,
    # whose records were written outside the history (random bytes to measure a copy rate)
    scenario.verify([t for t in scenario.topics if t != THROTTLED])
