"""DescribeLogDirs and AlterReplicaLogDirs with kafka-python's admin client against a broker with two log
dirs: sizes and lags, Kafka's errors, a replica moved between the dirs while it is written to, and a broker
killed during and right after a move (every acknowledged record is read back after the restart)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from tests.support.kafka_workload import GROUP_ID_UNUSED, confluent_create_topic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

TOPIC = "jbod"
PARTITIONS = 4
CONFIG = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "replica.fetch.max.bytes": 65536,  # a move copies in many steps
    "log.segment.bytes": 262144,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    root = tmp_path_factory.mktemp("jbod")
    with Broker(CONFIG, data_dir=root / "d0", extra_log_dirs=[root / "d1"], run_dir=root / "run") as running:
        confluent_create_topic(running.bootstrap_servers, TOPIC, PARTITIONS)
        yield running


def admin(broker: Broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10_000)


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> list[int]:
    """The offsets of ``values`` written to one partition (acks=all, each acknowledged)."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "log_level": 0}
    )
    offsets: list[int] = []

    def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        assert err is None, err
        offset = msg.offset()
        assert offset is not None
        offsets.append(offset)

    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return sorted(offsets)


def consume(bootstrap: str, topic: str, partition: int, count: int) -> list[tuple[int, bytes | None]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    got: list[tuple[int, bytes | None]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
        for _ in range(300):
            if len(got) >= count:
                break
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, msg.error()
                offset = msg.offset()
                assert offset is not None
                got.append((offset, msg.value()))
    finally:
        consumer.close()
    return got


def where(
    described: list[dict[str, Any]], topic: str, partition: int
) -> dict[tuple[str, bool], dict[str, Any]]:
    """{(log dir, is_future): the partition's entry} from kafka-python's describe_log_dirs answer."""
    out = {}
    for broker_result in described:
        for log_dir in broker_result["log_dirs"]:
            for t in log_dir["topics"]:
                for p in t["partitions"]:
                    if t["name"] == topic and p["partition_index"] == partition:
                        out[(log_dir["log_dir"], p["is_future_key"])] = p
    return out


def node_id(client: KafkaAdminClient) -> int:
    return int(client.describe_log_dirs()[0]["broker"])


def wait_moved(client: KafkaAdminClient, topic: str, partition: int, target: str) -> None:
    for _ in range(600):
        found = where(client.describe_log_dirs(), topic, partition)
        if list(found) == [(target, False)]:
            return
        assert all(not future or d == target for d, future in found), found
    raise AssertionError(f"{topic}-{partition} did not reach {target}: {found}")


def test_describe_log_dirs_sizes_and_lags(broker: Broker) -> None:
    values = [b"v%04d" % i for i in range(50)]
    produce(broker.bootstrap_servers, TOPIC, 3, values)
    client = admin(broker)
    try:
        described = client.describe_log_dirs()
        assert len(described) == 1
        dirs = described[0]["log_dirs"]
        d0, d1 = str(broker.data_dir.absolute()), str(broker.extra_log_dirs[0].absolute())
        assert [d["log_dir"] for d in dirs] == [d0, d1]
        for d in dirs:
            assert d["error_code"] == 0
            assert d["total_bytes"] > d["usable_bytes"] > 0
        found = where(described, TOPIC, 3)
        [(log_dir, is_future)] = found
        assert is_future is False
        entry = found[(log_dir, False)]
        on_disk = sum(f.stat().st_size for f in (Path(log_dir) / f"{TOPIC}-3").glob("*.log"))
        assert entry["partition_size"] == on_disk > 50 * 5
        assert entry["offset_lag"] == 0
        every_partition = {
            (t["name"], p["partition_index"]) for d in dirs for t in d["topics"] for p in t["partitions"]
        }
        assert {(TOPIC, p) for p in range(PARTITIONS)} <= every_partition
        only = client.describe_log_dirs(topic_partitions={TOPIC: [1]})
        assert [
            (t["name"], [p["partition_index"] for p in t["partitions"]])
            for d in only[0]["log_dirs"]
            for t in d["topics"]
        ] == [(TOPIC, [1])]
    finally:
        client.close()


def test_alter_replica_log_dirs_errors(broker: Broker) -> None:
    client = admin(broker)
    try:
        d1 = str(broker.extra_log_dirs[0].absolute())
        node = node_id(client)
        result = client.alter_replica_log_dirs(
            {
                TopicPartitionReplica(TOPIC, 0, node): "/nowhere/at/all",
                TopicPartitionReplica(TOPIC, 9, node): d1,
                TopicPartitionReplica("no-such-topic", 0, node): d1,
            }
        )
        assert {(tpr.topic, tpr.partition): err.__name__ for tpr, err in result.items()} == {
            (TOPIC, 0): "LogDirNotFoundError",
            (TOPIC, 9): "ReplicaNotAvailableError",
            ("no-such-topic", 0): "ReplicaNotAvailableError",
        }
    finally:
        client.close()


def test_a_replica_moves_between_dirs_while_written(broker: Broker) -> None:
    client = admin(broker)
    try:
        [(source, _)] = where(client.describe_log_dirs(), TOPIC, 0)
        d0, d1 = str(broker.data_dir.absolute()), str(broker.extra_log_dirs[0].absolute())
        target = d1 if source == d0 else d0
        first = [b"first-%05d-" % i + b"x" * 200 for i in range(3000)]
        assert produce(broker.bootstrap_servers, TOPIC, 0, first) == list(range(3000))
        result = client.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 0, node_id(client)): target})
        assert [err.__name__ for err in result.values()] == ["NoError"]
        second = [b"second-%05d" % i for i in range(500)]
        assert produce(broker.bootstrap_servers, TOPIC, 0, second) == list(range(3000, 3500))
        wait_moved(client, TOPIC, 0, target)
        assert (Path(target) / f"{TOPIC}-0").is_dir()
        assert not (Path(source) / f"{TOPIC}-0").exists()
        assert (
            sorted(p.name for p in Path(target).iterdir() if "-future" in p.name or "-delete" in p.name) == []
        )
        # moving it to where it is is accepted and changes nothing
        again = client.alter_replica_log_dirs({TopicPartitionReplica(TOPIC, 0, node_id(client)): target})
        assert [err.__name__ for err in again.values()] == ["NoError"]
    finally:
        client.close()
    third = [b"third-%05d" % i for i in range(10)]
    assert produce(broker.bootstrap_servers, TOPIC, 0, third) == list(range(3500, 3510))
    got = consume(broker.bootstrap_servers, TOPIC, 0, 3510)
    assert got == list(enumerate(first + second + third))


def test_a_broker_killed_during_and_after_a_move_keeps_every_record(tmp_path: Path) -> None:
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    with Broker(
        CONFIG | {"log.flush.offset.checkpoint.interval.ms": 600_000},
        data_dir=d0,
        extra_log_dirs=[d1],
        run_dir=tmp_path / "run",
    ) as broker:
        confluent_create_topic(broker.bootstrap_servers, TOPIC, 2)
        source = d0 if (d0 / f"{TOPIC}-0").is_dir() else d1
        target = d1 if source == d0 else d0
        values = [b"%05d-" % i + b"y" * 300 for i in range(4000)]
        assert produce(broker.bootstrap_servers, TOPIC, 0, values) == list(range(4000))
        client = admin(broker)
        try:
            replica = TopicPartitionReplica(TOPIC, 0, node_id(client))
        finally:
            client.close()
        # 1: killed at once after the move was accepted (mid-copy, or just done): the move goes on after a restart
        client = admin(broker)
        try:
            assert [e.__name__ for e in client.alter_replica_log_dirs({replica: str(target)}).values()] == [
                "NoError"
            ]
        finally:
            client.close()
        broker.kill()
        broker.restart()
        client = admin(broker)
        try:
            wait_moved(client, TOPIC, 0, str(target.absolute()))
        finally:
            client.close()
        assert consume(broker.bootstrap_servers, TOPIC, 0, 4000) == list(enumerate(values))
        # 2: killed right after a move back finished, before any checkpoint names it in its new dir
        more = [b"more-%05d" % i for i in range(100)]
        assert produce(broker.bootstrap_servers, TOPIC, 0, more) == list(range(4000, 4100))
        client = admin(broker)
        try:
            assert [e.__name__ for e in client.alter_replica_log_dirs({replica: str(source)}).values()] == [
                "NoError"
            ]
            wait_moved(client, TOPIC, 0, str(source.absolute()))
        finally:
            client.close()
        broker.kill()
        broker.restart()
        assert (source / f"{TOPIC}-0").is_dir()
        assert not (target / f"{TOPIC}-0").exists()
        assert consume(broker.bootstrap_servers, TOPIC, 0, 4100) == list(enumerate(values + more))
        assert "Traceback" not in broker.log_path.read_text(), broker.log_tail()


def test_cli_describe_and_move(broker: Broker, tmp_path: Path) -> None:
    from tests.cli.cli_support import failed, ok, tidelog_cli

    boot = ["--bootstrap-server", broker.bootstrap_servers]
    described = json.loads(ok(tidelog_cli("log-dirs", "describe", "--topic-list", TOPIC, *boot)))
    [only] = described["brokers"]
    node = only["broker"]
    d0, d1 = str(broker.data_dir.absolute()), str(broker.extra_log_dirs[0].absolute())
    assert [d["logDir"] for d in only["logDirs"]] == [d0, d1]
    assert all(d["error"] is None for d in only["logDirs"])
    placed = {p["partition"]: d["logDir"] for d in only["logDirs"] for p in d["partitions"]}
    assert set(placed) == {f"{TOPIC}-{p}" for p in range(PARTITIONS)}
    assert {p["offsetLag"] for d in only["logDirs"] for p in d["partitions"]} == {0}
    target = d0 if placed[f"{TOPIC}-2"] == d1 else d1
    moved = ok(
        tidelog_cli(
            "log-dirs", "move", "--topic", TOPIC, "--partition", "2", "--dir", target, "--wait", *boot
        )
    )
    assert f"{TOPIC}-2 on broker {node}: moving" in moved
    assert "every replica is in its new log dir" in moved
    back = placed[f"{TOPIC}-2"]
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": TOPIC, "partition": 2, "replicas": [node], "log_dirs": [back]},
                    {"topic": TOPIC, "partition": 1, "replicas": [node], "log_dirs": ["any"]},
                    {"topic": TOPIC, "partition": 0, "replicas": [node], "log_dirs": ["/nowhere"]},
                ],
            }
        )
    )
    refused = tidelog_cli("log-dirs", "move", "--reassignment-json-file", str(plan), "--wait", *boot)
    assert "some replicas were not moved" in failed(refused)
    printed = refused.stdout.decode()
    assert f"{TOPIC}-0 on broker {node}: LOG_DIR_NOT_FOUND" in printed
    assert f"{TOPIC}-2 on broker {node}: moving" in printed
    assert f"{TOPIC}-1 " not in printed  # "any": not moved
    client = admin(broker)
    try:
        wait_moved(client, TOPIC, 2, back)
    finally:
        client.close()
