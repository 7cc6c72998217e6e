"""A failed log dir on one broker of a cluster moves leadership off its replicas there (KIP-112 in ZooKeeper
mode: the broker writes ``/log_dir_event_notification/log_dir_event_N``, the controller elects other leaders
and shrinks the ISRs), while the broker keeps leading the partitions of its healthy dir.

Broker 2 has two log dirs, one on ext4 on a loop device (root only; skipped otherwise) that the test shuts
down (every later I/O fails with EIO). Every partition is assigned [2, 1, 3], so broker 2 leads them all.
After the shutdown, a produce to a partition in the failed dir meets the EIO: from then on those partitions
are led by broker 1 with ISR [1, 3], the others still by broker 2, every acks=all produce (the clients retry
KAFKA_STORAGE_ERROR and follow the new leaders) is acknowledged, and every acknowledged record is read back.
"""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.kafka_workload import GROUP_ID_UNUSED
from tests.support.small_fs import loop_ext4, shut_down_ext4

from tidelog.testing import Cluster
from tidelog.testing._cluster import ClusterError

pytestmark = [pytest.mark.cluster, pytest.mark.clients, pytest.mark.timeout(300)]

TOPIC = "disks"
PARTITIONS = 4
CONFIG = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
}


def states(bootstrap: str) -> dict[int, tuple[int, list[int]]]:
    """{partition: (leader, sorted ISR)} from a broker's metadata."""
    topic = (
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        .list_topics(TOPIC, timeout=10)
        .topics[TOPIC]
    )
    return {p.id: (p.leader, sorted(p.isrs)) for p in topic.partitions.values()}


def produce(bootstrap: str, label: bytes) -> dict[int, list[tuple[int, bytes]]]:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "log_level": 0}
    )
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        assert err is None, err
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        assert partition is not None
        assert offset is not None
        assert value is not None
        acked[partition].append((offset, value))

    for seq in range(5 * PARTITIONS):
        producer.produce(
            TOPIC, value=label + b"-%d" % seq, partition=seq % PARTITIONS, on_delivery=on_delivery
        )
    assert producer.flush(60) == 0
    return acked


def consume(bootstrap: str, count: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        for _ in range(300):
            if sum(len(v) for v in got.values()) >= count:
                break
            for msg in consumer.consume(100, 0.2):
                assert msg.error() is None, msg.error()
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                assert partition is not None
                assert offset is not None
                assert value is not None
                got[partition].append((offset, value))
    finally:
        consumer.close()
    return got


def test_a_failed_log_dir_moves_leadership_off_its_replicas(tmp_path: Path) -> None:
    with (
        loop_ext4(tmp_path / "disk", tmp_path / "disk.img", size_mb=32) as mount,
        Cluster(3, config=CONFIG, data_dir=tmp_path / "cluster", extra_log_dirs={2: [mount / "data"]}) as c,
    ):
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers, "log_level": 0})
        admin.create_topics(
            [NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=[[2, 1, 3]] * PARTITIONS)],
            operation_timeout=30,
        )[TOPIC].result(60)
        full = {p: (2, [1, 2, 3]) for p in range(PARTITIONS)}
        c.wait_for(lambda: states(c.bootstrap_servers) == full, "every partition led by 2 with its full ISR")
        dirs = [c.broker(2).data_dir, mount / "data"]
        c.wait_for(
            lambda: sum(len(list(d.glob(f"{TOPIC}-*"))) for d in dirs) == PARTITIONS,
            "broker 2 to create its logs",  # the metadata may come from another broker first
        )
        on_disk = sorted(int(d.name.rsplit("-", 1)[1]) for d in (mount / "data").glob(f"{TOPIC}-*"))
        healthy = [p for p in range(PARTITIONS) if p not in on_disk]
        assert on_disk
        assert healthy
        before = produce(c.bootstrap_servers, b"before")

        shut_down_ext4(mount)
        after = produce(c.bootstrap_servers, b"after")  # meets the EIO, retries, follows the new leaders
        moved = {p: (1, [1, 3]) if p in on_disk else (2, [1, 2, 3]) for p in range(PARTITIONS)}
        seen: list[dict[int, tuple[int, list[int]]]] = []

        def moved_off() -> bool:
            seen.append(states(c.bootstrap_servers))
            return seen[-1] == moved

        try:
            c.wait_for(moved_off, "leadership off broker 2's failed dir")
        except ClusterError as exc:
            raise AssertionError(f"expected {moved}, seen last {seen[-1:]}") from exc
        later = produce(c.bootstrap_servers, b"later")
        acked = {p: before[p] + after[p] + later[p] for p in range(PARTITIONS)}
        got = consume(c.bootstrap_servers, sum(len(v) for v in acked.values()))
        assert {p: sorted(v) for p, v in got.items()} == {p: sorted(v) for p, v in acked.items()}
        log = c.broker(2).log_path.read_text()
        assert "announced the failure of log dir" in log, c.broker(2).log_tail()
