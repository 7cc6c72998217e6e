"""The final state of a run: every record of a topic from its log start to its high watermark (read
with the given isolation level), through a fresh confluent-kafka consumer with no group.

Invariant: the watermarks are asked first, then everything below the high watermark is read; the read
ends when the consumer's position reached the high watermark of every partition (librdkafka moves the
position past aborted records and control markers too) or after ``timeout`` seconds
(:class:`ReadBackError`).
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tidelog.testing.jepsen.analysis import FinalPartition, TopicPartition

__all__ = ["ReadBackError", "read_back"]


class ReadBackError(RuntimeError):
    """The read back did not reach the high watermarks in time."""


def read_back(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    isolation_level: str = "read_uncommitted",
    timeout: float = 60.0,
) -> dict[TopicPartition, FinalPartition]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tidelog-jepsen-read-back",  # assign only
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    deadline = time.monotonic() + timeout
    try:
        logs: dict[TopicPartition, FinalPartition] = {}
        for partition in range(partitions):
            while True:
                try:
                    low, high = consumer.get_watermark_offsets(
                        KafkaTopicPartition(topic, partition), timeout=5, cached=False
                    )
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
            logs[(topic, partition)] = FinalPartition(low, high)
        consumer.assign([KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        done = {tp for tp, log in logs.items() if log.high_watermark <= log.log_start}
        while len(done) < len(logs):
            if time.monotonic() > deadline:
                short = {tp: (max(logs[tp].records, default=None), logs[tp].high_watermark) for tp in logs}
                raise ReadBackError(f"read back of {topic} did not reach the high watermarks: {short}")
            for msg in consumer.consume(500, 0.5):
                msg_topic, msg_partition, msg_offset = msg.topic(), msg.partition(), msg.offset()
                if (
                    msg.error() is None
                    and msg_topic is not None
                    and msg_partition is not None
                    and msg_offset is not None
                ):
                    log = logs[(msg_topic, msg_partition)]
                    if msg_offset < log.high_watermark:
                        log.records[msg_offset] = msg.value()
            for tp, log in logs.items():
                if tp not in done:
                    position = consumer.position([KafkaTopicPartition(*tp)])[0].offset
                    if position >= log.high_watermark:
                        done.add(tp)
        return logs
    finally:
        consumer.close()
