"""``tidelog transactions describe-producers|find-hanging|abort`` (KIP-664) run as a user runs them (a
subprocess) against a real broker.

- A confluent-kafka transactional producer left open on a partition: ``describe-producers`` shows its
  producer id and epoch (as its coordinator describes them), last sequence, last timestamp and the start
  offset of its transaction exactly; ``find-hanging`` does not list it even though its records are hours
  old, because its coordinator has that partition in the transaction; once it commits, the producer shows
  no open transaction and the marker's coordinator epoch.
- A real hanging transaction: a transactional batch of a producer id no coordinator ever heard of, put
  into the partition's log while the broker was down (KIP-890 verification keeps a live broker from
  taking one; an older broker, a restored backup or a bug leaves exactly this on disk). It holds the last
  stable offset at its first offset. ``find-hanging`` lists exactly it (not with a larger
  ``--max-transaction-timeout``); ``abort --start-offset`` writes an ABORT marker, after which the last
  stable offset is the high watermark and a read_committed consumer reads every committed record past it
  and none of the aborted ones (exact offsets). Aborting it again, or a marker from an older producer
  epoch, is an error naming the partition.
- Errors: an unknown partition names the broker's UNKNOWN_TOPIC_OR_PARTITION, bad option combinations
  exit 2, all without a traceback.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli import cli_support
from tests.cli.cli_support import ok, tidelog_cli
from tests.server.txn_support import create_topics

from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.partition_log import PartitionLog
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

failed = functools.partial(cli_support.failed, marker="Error")


GHOST_PID = 1_000_000_007
"""A producer id far above any block the broker hands out: no coordinator knows it."""
GHOST_EPOCH = 3
HOUR_MS = 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("hanging-cli")
    with Broker({}, data_dir=base / "data", run_dir=base / "run") as running:
        yield running
        assert running.stop(timeout=30) == 0, running.log_tail()
        log = running.log_path.read_text(errors="replace")
        assert "Traceback" not in log
        assert "level=ERROR" not in log


def describe_producers(broker: Broker, topic: str) -> list[dict[str, Any]]:
    args = ("transactions", "describe-producers", "--topic", topic, "--partition", "0")
    return list(json.loads(ok(tidelog_cli(*args, "-b", broker.bootstrap_servers, "-f", "json"))))


def find_hanging(broker: Broker, *options: str) -> list[dict[str, Any]]:
    args = ("transactions", "find-hanging", *options, "-b", broker.bootstrap_servers, "-f", "json")
    return list(json.loads(ok(tidelog_cli(*args))))


def plain_producer(broker: Broker) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, "log_level": 0})


def offsets(broker: Broker, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, from ListOffsets."""
    from tidelog.client.wire import connect
    from tidelog.protocol.messages import ListOffsetsRequest

    found = []
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        for isolation in (1, 0):
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                    )
                ],
            )
            (partition,) = wire.call(request).topics[0].partitions
            assert partition.error_code == 0
            found.append(partition.offset)
    return found[0], found[1]


def read_committed(broker: Broker, topic: str, last_offset: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a read_committed consumer gets from the start up to last_offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"reader-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while not got or got[-1][0] < last_offset:
            assert time.monotonic() < deadline, got
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def test_a_live_transaction_is_described_and_not_hanging(broker: Broker) -> None:
    from confluent_kafka import Producer

    create_topics(broker.bootstrap_servers, {"live": 1})
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "transactional.id": "live-txn",
            "transaction.timeout.ms": 120_000,
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    written = now_ms() - HOUR_MS  # an hour old: a find-hanging candidate, yet not hanging
    for i in range(3):
        producer.produce("live", value=b"v%d" % i, partition=0, timestamp=written + i)
    assert producer.flush(30) == 0
    (described,) = json.loads(
        ok(tidelog_cli("transactions", "describe", "live-txn", "-b", broker.bootstrap_servers, "-f", "json"))
    )
    assert described["partitions"] == ["live-0"]
    pid, epoch = described["producer_id"], described["producer_epoch"]
    assert describe_producers(broker, "live") == [
        {
            "producer_id": pid,
            "producer_epoch": epoch,
            "coordinator_epoch": None,
            "last_sequence": 2,
            "last_timestamp": written + 2,
            "current_txn_start_offset": 0,
        }
    ]
    table = ok(
        tidelog_cli(
            "transactions",
            "describe-producers",
            "--topic",
            "live",
            "--partition",
            "0",
            "-b",
            broker.bootstrap_servers,
        )
    )
    assert "1 producer(s) of live-0" in table
    assert str(pid) in table
    assert find_hanging(broker, "--topic", "live") == []
    assert find_hanging(broker, "--topic", "live", "--max-transaction-timeout", "0") == []

    before = now_ms()
    producer.commit_transaction(30)
    after = now_ms()
    (state,) = describe_producers(broker, "live")
    assert before <= state.pop("last_timestamp") <= after  # the COMMIT marker's
    assert state == {
        "producer_id": pid,
        "producer_epoch": epoch,
        "coordinator_epoch": 0,
        "last_sequence": 2,
        "current_txn_start_offset": None,
    }
    assert offsets(broker, "live") == (4, 4)  # three records and the marker


def write_hanging_batch(data_dir: Path, topic: str, values: list[bytes], timestamp: int) -> int:
    """Append a transactional batch of GHOST_PID to partition 0 of ``topic`` on disk (the broker must be
    down); returns its first offset."""
    log = PartitionLog.open(data_dir / f"{topic}-0", LogConfig(), now_ms=now_ms(), clean_shutdown=False)
    try:
        batch = encode_batch(
            [SimpleRecord(value=v, timestamp=timestamp + i) for i, v in enumerate(values)],
            producer_id=GHOST_PID,
            producer_epoch=GHOST_EPOCH,
            base_sequence=0,
            is_transactional=True,
        )
        info = log.append(batch, leader_epoch=0, now_ms=now_ms())
        log.flush(now_ms())
        return int(info.first_offset)
    finally:
        log.close()


@pytest.fixture(scope="module")
def hanging(broker: Broker) -> int:
    """Topic "hang": a, b (offsets 0-1), the ghost's open transaction x, y (2-3), then c, d (4-5).
    Returns the timestamp of the ghost's last record."""
    create_topics(broker.bootstrap_servers, {"hang": 1})
    producer = plain_producer(broker)
    for value in (b"a", b"b"):
        producer.produce("hang", value=value, partition=0)
    assert producer.flush(30) == 0
    broker.kill()
    written = now_ms() - 2 * HOUR_MS
    assert write_hanging_batch(broker.data_dir, "hang", [b"x", b"y"], written) == 2
    broker.restart()
    producer = plain_producer(broker)
    for value in (b"c", b"d"):
        producer.produce("hang", value=value, partition=0)
    assert producer.flush(30) == 0
    return written + 1


def test_find_and_abort_a_hanging_transaction(broker: Broker, hanging: int) -> None:
    assert describe_producers(broker, "hang") == [
        {
            "producer_id": GHOST_PID,
            "producer_epoch": GHOST_EPOCH,
            "coordinator_epoch": None,
            "last_sequence": 1,
            "last_timestamp": hanging,
            "current_txn_start_offset": 2,
        }
    ]
    assert offsets(broker, "hang") == (2, 6)  # read_committed consumers stall at offset 2
    found = find_hanging(broker)
    assert len(found) == 1
    assert found[0].pop("duration_min") >= 120
    assert found == [
        {
            "topic": "hang",
            "partition": 0,
            "producer_id": GHOST_PID,
            "producer_epoch": GHOST_EPOCH,
            "coordinator_epoch": None,
            "start_offset": 2,
            "last_timestamp": hanging,
        }
    ]
    assert find_hanging(broker, "--max-transaction-timeout", "180") == []  # younger than three hours
    table = ok(tidelog_cli("transactions", "find-hanging", "-b", broker.bootstrap_servers))
    assert "1 hanging transaction(s)" in table
    assert str(GHOST_PID) in table

    abort = ("transactions", "abort", "--topic", "hang", "--partition", "0", "-b", broker.bootstrap_servers)
    assert "no open transaction starts at offset 3 of partition hang-0" in failed(
        tidelog_cli(*abort, "--start-offset", "3")
    )
    before = now_ms()
    result = tidelog_cli(*abort, "--start-offset", "2")
    after = now_ms()
    ok(result)
    assert (
        f"Aborted the transaction of producer {GHOST_PID} (epoch {GHOST_EPOCH}) on partition hang-0."
        in " ".join(result.stderr.decode().split())
    )
    (state,) = describe_producers(broker, "hang")
    assert before <= state.pop("last_timestamp") <= after  # the ABORT marker's
    assert state == {
        "producer_id": GHOST_PID,
        "producer_epoch": GHOST_EPOCH,
        "coordinator_epoch": 0,
        "last_sequence": 1,
        "current_txn_start_offset": None,
    }
    assert offsets(broker, "hang") == (7, 7)  # the marker is offset 6
    assert read_committed(broker, "hang", 5) == [(0, b"a"), (1, b"b"), (4, b"c"), (5, b"d")]
    assert find_hanging(broker) == []
    assert "no open transaction starts at offset 2 of partition hang-0" in failed(
        tidelog_cli(*abort, "--start-offset", "2")
    )
    older_epoch = ("--producer-id", str(GHOST_PID), "--producer-epoch", str(GHOST_EPOCH - 1))
    assert (
        f"cannot abort the transaction of producer {GHOST_PID} (epoch {GHOST_EPOCH - 1}) on partition hang-0:"
        " INVALID_PRODUCER_EPOCH" in failed(tidelog_cli(*abort, *older_epoch, "--coordinator-epoch", "0"))
    )
    assert offsets(broker, "hang") == (7, 7)


def test_errors(broker: Broker) -> None:
    args = ("transactions", "describe-producers", "--topic", "nope", "--partition", "0")
    assert "cannot describe the producers of partition nope-0 on 127.0.0.1:" in failed(
        tidelog_cli(*args, "-b", broker.bootstrap_servers)
    )
    assert "UNKNOWN_TOPIC_OR_PARTITION" in failed(tidelog_cli(*args, "-b", broker.bootstrap_servers))
    assert "topic 'nope'" in failed(
        tidelog_cli("transactions", "find-hanging", "--topic", "nope", "-b", broker.bootstrap_servers)
    )
    abort = ("transactions", "abort", "--topic", "t", "--partition", "0", "-b", broker.bootstrap_servers)
    failed(tidelog_cli(*abort), code=2)
    failed(tidelog_cli(*abort, "--start-offset", "1", "--producer-id", "5"), code=2)
    failed(tidelog_cli(*abort, "--producer-id", "5"), code=2)
    failed(
        tidelog_cli("transactions", "find-hanging", "--partition", "0", "-b", broker.bootstrap_servers),
        code=2,
    )
