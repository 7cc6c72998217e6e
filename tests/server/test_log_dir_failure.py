"""A disk that fails with EIO takes its log dir offline, as Kafka does; the broker keeps running.

The broker has two log dirs: one on the machine's disk, one on ext4 on a loop device (root only; skipped
otherwise) that the test shuts down (ext4's shutdown ioctl: every later I/O on it fails with EIO). After
that, produce to the partitions in the failed dir is answered KAFKA_STORAGE_ERROR, the partitions in the
healthy dir take writes and serve reads of everything, the broker logs the dir going offline once and
no traceback (the periodic flush and the checkpoints leave the offline dir alone), and a clean stop
finishes for the healthy dir.
"""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
import pytest
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from tests.support.kafka_workload import GROUP_ID_UNUSED, confluent_create_topic
from tests.support.small_fs import loop_ext4, shut_down_ext4

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

TOPIC = "eio"
PARTITIONS = 4
CONFIG = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "log.flush.interval.ms": 100,  # the periodic flush meets the failed disk too
    "log.flush.scheduler.interval.ms": 100,
}


def produce(bootstrap: str, label: bytes) -> dict[int, list[tuple[int | str, bytes]]]:
    """Two values per partition, no retries: {partition: [(offset or error name, value)]}."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "retries": 0, "enable.idempotence": False, "log_level": 0}
    )
    results: dict[int, list[tuple[int | str, bytes]]] = {p: [] for p in range(PARTITIONS)}

    def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        assert partition is not None
        assert value is not None
        outcome: int | str = err.name() if err is not None else (offset if offset is not None else -1)
        results[partition].append((outcome, value))

    for seq in range(2 * PARTITIONS):
        producer.produce(
            TOPIC, value=label + b"-%d" % seq, partition=seq % PARTITIONS, on_delivery=on_delivery
        )
    assert producer.flush(30) == 0
    return {p: sorted(r, key=lambda x: x[1]) for p, r in results.items()}


def consume(bootstrap: str, partitions: list[int], count: int) -> dict[int, list[tuple[int, bytes | None]]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    got: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in partitions}
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in partitions])
        for _ in range(200):
            if sum(len(v) for v in got.values()) >= count:
                break
            for msg in consumer.consume(100, 0.2):
                partition, offset = msg.partition(), msg.offset()
                assert msg.error() is None, msg.error()
                assert partition is not None
                assert offset is not None
                got[partition].append((offset, msg.value()))
    finally:
        consumer.close()
    return got


def test_eio_takes_only_its_log_dir_offline(tmp_path: Path) -> None:
    with loop_ext4(tmp_path / "disk", tmp_path / "disk.img", size_mb=32) as mount:
        broker = Broker(
            CONFIG,
            data_dir=tmp_path / "good",
            extra_log_dirs=[mount / "data"],
            run_dir=tmp_path / "run",
            startup_timeout=90,
        )
        try:
            broker.start()
            confluent_create_topic(broker.bootstrap_servers, TOPIC, PARTITIONS)
            on_disk = sorted(int(d.name.rsplit("-", 1)[1]) for d in (mount / "data").glob(f"{TOPIC}-*"))
            healthy = [p for p in range(PARTITIONS) if p not in on_disk]
            assert on_disk
            assert healthy
            before = produce(broker.bootstrap_servers, b"before")
            assert all(isinstance(o, int) for r in before.values() for o, _ in r)

            shut_down_ext4(mount)
            after = produce(broker.bootstrap_servers, b"after")
            for p in on_disk:
                assert [o for o, _ in after[p]] == ["KAFKA_STORAGE_ERROR"] * 2, after
            for p in healthy:
                assert [o for o, _ in after[p]] == [2, 3], after
            got = consume(broker.bootstrap_servers, healthy, 4 * len(healthy))
            for p in healthy:
                assert got[p] == [(o, v) for o, v in before[p] + after[p] if isinstance(o, int)]
            assert broker.is_running
            # DescribeLogDirs reports the failed dir, and nothing moves into it (issue 15)
            client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10_000)
            try:
                [described] = client.describe_log_dirs()
                by_dir = {d["log_dir"]: d for d in described["log_dirs"]}
                failed_dir = by_dir[str((mount / "data").absolute())]
                assert (failed_dir["error_code"], failed_dir["topics"]) == (56, [])  # KAFKA_STORAGE_ERROR
                assert by_dir[str((tmp_path / "good").absolute())]["error_code"] == 0
                replica = TopicPartitionReplica(TOPIC, healthy[0], described["broker"])
                moved = client.alter_replica_log_dirs({replica: str((mount / "data").absolute())})
                assert [e.__name__ for e in moved.values()] == ["KafkaStorageError"]
            finally:
                client.close()
            log = broker.log_path.read_text()
            assert log.count(f"log dir {mount / 'data'} is offline after an I/O error") == 1, log
            assert "Traceback" not in log, broker.log_tail()
            # a clean stop leaves the offline dir alone (no flush, no checkpoint, no clean-shutdown marker)
            assert broker.stop() == 0, broker.log_tail()
            assert "Traceback" not in broker.log_path.read_text(), broker.log_tail()
            assert (tmp_path / "good" / ".kafka_cleanshutdown").exists()
        finally:
            broker.close()
