"""Test support for share groups' dead-letter topics (KIP-1191): set a group's configs, read a topic."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(10)


def read_topic(bootstrap: str, topic: str, count: int, deadline: float, partition: int = 0) -> list[Message]:
    """The records of ``topic``'s ``partition`` from its start until ``count`` have come (or ``deadline``,
    ``time.monotonic()``), then up to its high watermark: a duplicate written with them is seen too."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    out: list[Message] = []
    try:
        while len(out) < count and time.monotonic() < deadline:
            out += [m for m in consumer.consume(100, 0.2) if m.error() is None]
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 5)
        while (not out or (out[-1].offset() or 0) + 1 < high) and time.monotonic() < deadline:
            out += [m for m in consumer.consume(100, 0.2) if m.error() is None]
    finally:
        consumer.close()
    return out


def header_map(message: Message) -> dict[str, object]:
    headers = message.headers() or []
    return dict(headers.items() if isinstance(headers, dict) else headers)
