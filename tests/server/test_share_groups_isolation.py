"""Share groups and transactions, with confluent-kafka's transactional ``Producer`` and ``ShareConsumer``:

- a group with ``share.isolation.level=read_committed`` gets exactly the committed records, in offset
  order, never an aborted one, and nothing at or past an open transaction until it commits;
- a ``read_uncommitted`` group on the same records gets the aborted ones too (the default, as in Kafka);
- neither ever gets a transaction marker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from tests.support.share_groups import value_of

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    config = {
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.num.partitions": 1,
    }
    with Broker(config) as b:
        yield b


def _set_group_configs(admin: AdminClient, group: str, configs: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)


def _consumer(broker: Broker, admin: AdminClient, topic: str, isolation: str) -> ShareConsumer:
    group = f"g-{isolation}-{topic}"
    _set_group_configs(
        admin, group, {"share.auto.offset.reset": "earliest", "share.isolation.level": isolation}
    )
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    consumer.subscribe([topic])
    return consumer


def _receive(consumer: ShareConsumer, got: list[bytes], until: set[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not until <= set(got):
        assert time.monotonic() < deadline, f"still missing {sorted(until - set(got))}, got {got}"
        got += [value_of(m) for m in consumer.poll(0.2) if m.error() is None]


def test_read_committed_share_group_skips_aborted_and_waits_for_open_transactions(broker: Broker) -> None:
    topic = f"txq-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)

    def transaction(values: list[bytes], commit: bool | None) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value)
        producer.flush(30)
        if commit is True:
            producer.commit_transaction(30)
        elif commit is False:
            producer.abort_transaction(30)

    committed = [b"c%d" % i for i in range(6)]
    aborted = [b"a%d" % i for i in range(3)]
    pending = [b"p0", b"p1"]
    transaction(committed[:3], commit=True)
    transaction(aborted, commit=False)
    transaction(committed[3:], commit=True)
    transaction(pending, commit=None)  # open: read_committed stops at its first record

    reader = _consumer(broker, admin, topic, "read_committed")
    dirty = _consumer(broker, admin, topic, "read_uncommitted")
    try:
        got: list[bytes] = []
        _receive(reader, got, set(committed), 30)
        window = time.monotonic() + 1.0  # what it gets while the transaction stays open: nothing more
        while time.monotonic() < window:
            got += [value_of(m) for m in reader.poll(0.2) if m.error() is None]
        assert got == committed

        dirty_got: list[bytes] = []
        _receive(dirty, dirty_got, {*committed, *aborted, *pending}, 30)
        assert dirty_got == committed[:3] + aborted + committed[3:] + pending

        producer.commit_transaction(30)
        _receive(reader, got, set(pending), 30)
        assert got == committed + pending
    finally:
        reader.close()
        dirty.close()
