"""What an fsync policy keeps across a power loss (kill -9 cannot show it: the page cache survives a
process). The data dir is ext4 on a loop device (root only; skipped otherwise); the power loss is modeled
by copying the device's content after killing the broker, without the filesystem's dirty pages
(:func:`tests.support.small_fs.power_loss_copy`), then starting a broker on that copy.

- ``log.flush.interval.messages=1``: every acknowledged record is there after the power loss (the broker
  fsyncs before it answers);
- the default (no fsync until a segment rolls, or the periodic flush, off by default as in Kafka): the
  records acknowledged since the last fsync are lost, but what is left is whole: a prefix of the
  acknowledged records at their offsets, nothing torn or invented.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pytest
from tests.support.kafka_workload import confluent_consume, confluent_create_topic, confluent_high_watermarks
from tests.support.small_fs import loop_ext4, power_loss_copy

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

TOPIC = "power"
RECORDS = 300
Outcome = tuple[dict[int, bytes], dict[int, bytes]]
BASE = {"offsets.topic.num.partitions": 1, "transaction.state.log.num.partitions": 1}


def produce(bootstrap: str) -> dict[int, bytes]:
    """RECORDS values, acks=1, in batches of 10; {offset: value} of those acknowledged."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1, "batch.num.messages": 10, "log_level": 0}
    )
    acked: dict[int, bytes] = {}

    def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        assert err is None, err
        offset, value = msg.offset(), msg.value()
        assert offset is not None
        assert value is not None
        acked[offset] = value

    for seq in range(RECORDS):
        producer.produce(TOPIC, value=b"power-%05d" % seq, partition=0, on_delivery=on_delivery)
        if seq % 10 == 9:
            producer.flush(30)
    assert producer.flush(30) == 0
    return acked


@pytest.fixture
def after_power_loss(tmp_path: Path) -> Iterator[Callable[[dict[str, int]], Outcome]]:
    """``run(config) -> (acknowledged, survived)``: produce on ext4, cut the power, restart on the copy."""
    brokers: list[Broker] = []

    def run(config: dict[str, int]) -> Outcome:
        name = "flush1" if config else "default"
        image, copy = tmp_path / f"{name}.img", tmp_path / f"{name}-after.img"
        with loop_ext4(tmp_path / f"{name}-mnt", image) as mount:
            broker = Broker({**BASE, **config}, data_dir=mount / "data", startup_timeout=90)
            brokers.append(broker)
            broker.start()
            confluent_create_topic(broker.bootstrap_servers, TOPIC, 1)
            acked = produce(broker.bootstrap_servers)
            broker.kill()
            power_loss_copy(image, copy)
        with loop_ext4(tmp_path / f"{name}-after-mnt", copy, fresh=False) as mount:
            again = Broker({**BASE, **config}, data_dir=mount / "data", startup_timeout=90)
            brokers.append(again)
            again.start()
            marks = confluent_high_watermarks(again.bootstrap_servers, TOPIC, 1)
            consumed = confluent_consume(again.bootstrap_servers, TOPIC, 1, marks[0][1], timeout=60)
            again.close()
            return acked, {c.offset: c.value for c in consumed if c.value is not None}

    yield run
    for broker in brokers:
        broker.close()


def test_flush_interval_messages_1_keeps_every_acknowledged_record(
    after_power_loss: Callable[[dict[str, int]], Outcome],
) -> None:
    acked, survived = after_power_loss({"log.flush.interval.messages": 1})
    assert len(acked) == RECORDS
    assert survived == acked


def test_the_default_loses_the_unflushed_tail_but_keeps_a_whole_prefix(
    after_power_loss: Callable[[dict[str, int]], Outcome],
) -> None:
    acked, survived = after_power_loss({})
    assert len(acked) == RECORDS
    assert survived == {offset: acked[offset] for offset in range(len(survived))}
    print(f"default flush policy: {len(survived)} of {RECORDS} acknowledged records survived the power loss")
    assert len(survived) < RECORDS
