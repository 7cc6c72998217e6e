"""Thousands of partitions on one broker: create, produce, consume, restart (clean and after kill -9), with the
broker's descriptors and memory maps on its data files held under ``log.max.open.segments`` all along.

CI runs 1,000 partitions with a bound of 32 open segments; the soak runs 10,000 (``--soak``). The data dir
is on tmpfs when the machine has one (``/dev/shm``): an fsync there costs nothing, and creating a partition
costs a few fsyncs (its directory, its leader epoch checkpoint), which on a shared disk is what would take
the time, not what is under test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker

MAX_OPEN_SEGMENTS = 32
RECORDS_PER_PARTITION = 2


@pytest.fixture
def data_dir() -> Iterator[Path]:
    parent = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="tidelog-many-", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _open_data_files(pid: int, data_dir: Path) -> tuple[int, int]:
    """The broker's descriptors and memory maps on files under ``data_dir``."""
    prefix = str(data_dir)
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        fds += target.startswith(prefix)
    with open(f"/proc/{pid}/maps") as maps:
        mapped = sum(1 for line in maps if prefix in line)
    return fds, mapped


def _assert_bounded(broker: Broker, data_dir: Path) -> None:
    """Each open segment holds its .log, two index mappings (a descriptor each) and a transaction index at
    most, plus the log dir's lock file. Reads in flight hold their files until sent (a fetch response just
    answered to a consumer that closed meanwhile) and a flush round holds a batch of plans' descriptors, so
    the bound is waited for: what is asserted is that nothing keeps a descriptor or a map per partition."""
    assert broker.pid is not None
    fds, mapped = _open_data_files(broker.pid, data_dir)
    deadline = time.monotonic() + 30
    while (fds > 4 * MAX_OPEN_SEGMENTS + 1 or mapped > 2 * MAX_OPEN_SEGMENTS) and time.monotonic() < deadline:
        time.sleep(0.05)
        fds, mapped = _open_data_files(broker.pid, data_dir)
    assert fds <= 4 * MAX_OPEN_SEGMENTS + 1, fds
    assert mapped <= 2 * MAX_OPEN_SEGMENTS, mapped


def _value(partition: int, i: int) -> bytes:
    return f"p{partition}-r{i}".encode()


def _produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(RECORDS_PER_PARTITION):
        for p in range(partitions):
            while True:
                try:
                    producer.produce(topic, _value(p, i), partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(120) == 0


def _consume(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "log_level": 3,
        }
    )
    got: dict[int, list[tuple[int, bytes]]] = {}
    expected = partitions * RECORDS_PER_PARTITION
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        count = 0
        for _ in range(2_000):
            if count >= expected:
                break
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                assert message.error() is None, message.error()
                partition, offset, value = message.partition(), message.offset(), message.value()
                assert partition is not None
                assert offset is not None
                assert value is not None
                got.setdefault(partition, []).append((offset, value))
                count += 1
    finally:
        consumer.close()
    return got


def _expected(partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    return {p: [(i, _value(p, i)) for i in range(RECORDS_PER_PARTITION)] for p in range(partitions)}


def _run(partitions: int, data_dir: Path) -> None:
    config = {"log.max.open.segments": MAX_OPEN_SEGMENTS, "num.partitions": 1}
    with Broker(config, data_dir=data_dir, startup_timeout=300) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "socket.timeout.ms": 300_000})
        topic = NewTopic("wide", num_partitions=partitions, replication_factor=1)
        admin.create_topics([topic], request_timeout=300, operation_timeout=300)["wide"].result(300)
        _assert_bounded(broker, data_dir)
        _produce(broker.bootstrap_servers, "wide", partitions)
        _assert_bounded(broker, data_dir)
        assert _consume(broker.bootstrap_servers, "wide", partitions) == _expected(partitions)
        _assert_bounded(broker, data_dir)

        broker.restart()  # clean: every log loaded without revalidation
        assert _consume(broker.bootstrap_servers, "wide", partitions) == _expected(partitions)
        _assert_bounded(broker, data_dir)

        broker.kill()  # unclean: every log revalidated, indexes rebuilt where they were never trimmed
        broker.start()
        _assert_bounded(broker, data_dir)
        assert _consume(broker.bootstrap_servers, "wide", partitions) == _expected(partitions)
        _assert_bounded(broker, data_dir)


def test_a_thousand_partitions_with_bounded_files(data_dir: Path) -> None:
    _run(1_000, data_dir)


@pytest.mark.soak
def test_ten_thousand_partitions_with_bounded_files(data_dir: Path) -> None:
    _run(10_000, data_dir)
