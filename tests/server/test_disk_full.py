"""A full disk: the broker's data dir on a small tmpfs made by the test (root only; skipped otherwise).

Produce on a full disk is answered KAFKA_STORAGE_ERROR, and a refused batch leaves nothing behind (no torn
or half-indexed batch: the offsets given afterwards continue the log). Reads of what is there go on; the
broker keeps running. Every segment file on disk is whole batches with good CRCs. After space is freed
(the tmpfs grown) and the broker restarted, every acknowledged record is at its offset, recovery had
nothing to truncate, and producing works again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from tests.support.kafka_workload import confluent_consume, confluent_create_topic, confluent_high_watermarks
from tests.support.small_fs import grow_tmpfs, small_tmpfs

from tidelog.protocol.records_header import iter_batch_headers, validate_batch
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

TOPIC = "full"
PARTITIONS = 2
VALUE_BYTES = 1000
CONFIG = {
    "log.segment.bytes": 65_536,
    "log.index.interval.bytes": 512,
    "log.index.size.max.bytes": 65_536,
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}


@pytest.fixture
def full_disk_broker(tmp_path: Path) -> Iterator[tuple[Broker, Path]]:
    with small_tmpfs(tmp_path / "fs", "3m") as mount:
        broker = Broker(CONFIG, data_dir=mount / "data", run_dir=tmp_path / "run", startup_timeout=90)
        try:
            broker.start()
            yield broker, mount
        finally:
            broker.close()


def produce_until_full(bootstrap: str) -> tuple[dict[tuple[int, int], bytes], list[str]]:
    """Send 1 KB values (no retries, no idempotence: each error is the broker's answer) until the broker
    refused 20; returns what was acknowledged, {(partition, offset): value}, and the errors."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "linger.ms": 2,
            "batch.size": 16_000,
            "message.timeout.ms": 30_000,
            "log_level": 0,
        }
    )
    acked: dict[tuple[int, int], bytes] = {}
    errors: list[str] = []

    def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err.name())
        else:
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None
            assert offset is not None
            assert value is not None
            acked[(partition, offset)] = value

    seq = 0
    while len(errors) < 20:
        assert seq < 20_000, "the 3 MB disk never filled"
        for _ in range(50):
            producer.produce(
                TOPIC,
                value=b"%08d|" % seq + b"x" * VALUE_BYTES,
                partition=seq % PARTITIONS,
                on_delivery=on_delivery,
            )
            seq += 1
        assert producer.flush(60) == 0
    return acked, errors


def assert_segments_whole(data_dir: Path) -> None:
    """Every .log file of the topic is whole batches, each with a good CRC, up to its last byte."""
    for directory in sorted(data_dir.glob(f"{TOPIC}-*")):
        for path in sorted(directory.glob("*.log")):
            data = path.read_bytes()
            end = 0
            for position, header in iter_batch_headers(data):
                validate_batch(data, position)
                end = position + header.size_in_bytes
            assert end == len(data), f"{path}: {len(data) - end} bytes after the last whole batch"


def watermarks(bootstrap: str) -> dict[int, tuple[int, int]]:
    """ListOffsets, asked again if librdkafka gives up on a connection (seen once in a few runs on a
    loaded machine: "Broker handle destroyed without termination")."""
    for attempt in range(3):
        try:
            return confluent_high_watermarks(bootstrap, TOPIC, PARTITIONS)
        except confluent_kafka.KafkaException:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def assert_log_is(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> None:
    marks = watermarks(bootstrap)
    for partition in range(PARTITIONS):
        offsets = sorted(o for p, o in acked if p == partition)
        assert offsets == list(range(len(offsets))), f"partition {partition}: acknowledged offsets have holes"
        assert marks[partition] == (0, len(offsets))
    consumed = confluent_consume(bootstrap, TOPIC, PARTITIONS, len(acked), timeout=60)
    assert {(c.partition, c.offset): c.value for c in consumed} == acked


def test_a_full_disk_refuses_produce_keeps_reads_and_loses_nothing_acknowledged(
    full_disk_broker: tuple[Broker, Path],
) -> None:
    broker, mount = full_disk_broker
    confluent_create_topic(broker.bootstrap_servers, TOPIC, PARTITIONS)
    acked, errors = produce_until_full(broker.bootstrap_servers)
    assert set(errors) == {"KAFKA_STORAGE_ERROR"}, broker.log_tail()
    assert len(acked) > 1000
    assert broker.is_running, f"exit code {broker.returncode}:\n{broker.log_tail()}"
    # reads go on, and refused batches left no trace; the readers' FindCoordinator (a consumer group's
    # __consumer_offsets cannot be created on the full disk) is answered, not a dropped connection
    try:
        assert_log_is(broker.bootstrap_servers, acked)
    except Exception as exc:
        raise AssertionError(f"{exc}; the broker's log:\n{broker.log_tail()}") from exc
    assert "Traceback" not in broker.log_path.read_text(), broker.log_tail()
    assert_segments_whole(broker.data_dir)

    broker.kill()
    grow_tmpfs(mount, "64m")
    log_before = broker.log_path.read_text()
    broker.restart()
    assert_segments_whole(broker.data_dir)
    assert_log_is(broker.bootstrap_servers, acked)
    restart_log = broker.log_path.read_text()[len(log_before) :]
    assert "truncat" not in restart_log.lower(), restart_log
    assert "Traceback" not in restart_log, restart_log

    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    producer.produce(TOPIC, value=b"after", partition=0)
    assert producer.flush(30) == 0
    marks = watermarks(broker.bootstrap_servers)
    assert marks[0] == (0, sum(1 for p, _ in acked if p == 0) + 1)
