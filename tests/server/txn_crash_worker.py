"""A consume-transform-produce loop with confluent-kafka transactions, run as its own process by
test_transactions_crash.py while the broker is killed under it.

``python -m tests.server.txn_crash_worker BOOTSTRAP SOURCE SINK GROUP TXN_ID END0,END1,...``

Reads SOURCE's partitions (assigned, read_committed, positions from the group's committed offsets), writes
``b"out:" + value`` to the same partition of SINK keyed ``<attempt>:<index>:<size>`` (one attempt per
transaction), and commits the input positions with the output (send_offsets_to_transaction). On an
abortable error it aborts and rewinds to the committed offsets; on a fatal one (fenced, or a state the
client gives up on) it builds a new producer with the same transactional.id (fencing the old one) and
rewinds. It exits 0 once the committed offsets reach END per partition. Each line on stdout is one event:
``commit <attempt> <size>``, ``abort <attempt>``, ``fatal <attempt> <error>``, ``done``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaException, TopicPartition

COMMON: dict[str, Any] = {
    "log_level": 0,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    # librdkafka 2.16 "re-bootstraps" when every broker is down (here: the one broker was killed) and
    # decommissions the broker handle its group-coordinator lookup still holds: the producer's next
    # TxnOffsetCommit is then never sent (send_offsets_to_transaction times out). Keep the handles.
    "metadata.recovery.strategy": "none",
}
if os.environ.get("TXN_WORKER_DEBUG"):  # librdkafka's own trace on stderr, e.g. "eos,cgrp,protocol"
    COMMON.update({"log_level": 7, "debug": os.environ["TXN_WORKER_DEBUG"]})


def emit(*parts: object) -> None:
    print(*parts, flush=True)


def make_producer(bootstrap: str, txn_id: str) -> Any:
    producer = confluent_kafka.Producer(
        {
            **COMMON,
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 20_000,
            "linger.ms": 2,
            "message.timeout.ms": 20_000,
        }
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            producer.init_transactions(20)
            return producer
        except KafkaException as exc:
            error = exc.args[0]
            if time.monotonic() > deadline or not (error.retriable() or error.code() == error._TIMED_OUT):
                raise
            time.sleep(0.2)


def rewind(consumer: Any, partitions: list[TopicPartition]) -> None:
    """Seek every partition back to the group's committed offset (read with require_stable)."""
    deadline = time.monotonic() + 90
    while True:
        try:
            committed = consumer.committed(partitions, timeout=10)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for tp in committed:
        offset = tp.offset if tp.offset >= 0 else 0
        seek_deadline = time.monotonic() + 30
        while True:
            try:
                consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                break
            except KafkaException:
                # the partition is not yet fetchable after assign: wait
                if time.monotonic() > seek_deadline:
                    raise
                consumer.poll(0.1)


def committed_all(consumer: Any, partitions: list[TopicPartition], ends: list[int]) -> bool:
    try:
        committed = consumer.committed(partitions, timeout=10)
    except KafkaException:
        return False
    return all(tp.offset >= end for tp, end in zip(committed, ends, strict=True))


def main(bootstrap: str, source: str, sink: str, group: str, txn_id: str, ends_text: str) -> int:
    ends = [int(e) for e in ends_text.split(",")]
    partitions = [TopicPartition(source, p) for p in range(len(ends))]
    run = uuid.uuid4().hex[:6]
    consumer = confluent_kafka.Consumer(
        {
            **COMMON,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign(partitions)  # from the committed offsets
    producer = make_producer(bootstrap, txn_id)
    attempt = 0
    while True:
        messages = [m for m in consumer.consume(10, 0.2) if m.error() is None]
        if not messages:
            if committed_all(consumer, partitions, ends):
                emit("done")
                return 0
            continue
        attempt += 1
        tag = f"{run}-{attempt}"
        try:
            producer.begin_transaction()
            for index, message in enumerate(messages):
                producer.produce(
                    sink,
                    key=f"{tag}:{index}:{len(messages)}".encode(),
                    value=b"out:" + message.value(),
                    partition=message.partition(),
                )
            positions = {}
            for message in messages:
                positions[message.partition()] = message.offset() + 1
            offsets = [TopicPartition(source, p, o) for p, o in positions.items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 20)
            commit_deadline = time.monotonic() + 60
            while True:
                try:
                    producer.commit_transaction(20)
                    break
                except KafkaException as exc:
                    if not exc.args[0].retriable() or time.monotonic() > commit_deadline:
                        raise
            emit("commit", tag, len(messages))
            time.sleep(0.03)  # a pace that lets the test's crashes land mid-run
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                emit("abort", tag, error.name())
                try:
                    producer.abort_transaction(30)
                except KafkaException as abort_exc:
                    emit("fatal", tag, abort_exc.args[0].name())
                    producer = make_producer(bootstrap, txn_id)
            else:
                emit("fatal", tag, error.name())
                producer = make_producer(bootstrap, txn_id)
            rewind(consumer, partitions)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
