"""Log compaction in a running broker, driven by confluent-kafka.

Topics here have tiny segments, ``min.cleanable.dirty.ratio=0.01`` and a short ``delete.retention.ms``;
the broker's cleaner wakes every 50 ms. What is checked, exactly:

- after the cleaner has caught up, reading from the beginning gives each key's last record below the
  cleaned boundary (the ``cleaner-offset-checkpoint``) and everything above it, each at the offset its
  delivery report named;
- tombstoned keys disappear entirely once ``delete.retention.ms`` has passed, with no new write needed;
- a record without a key is refused on a compacted topic (INVALID_RECORD), accepted elsewhere;
- a consumer reading from the beginning while producer and cleaner run never sees a key go back to an
  older value.
"""

from __future__ import annotations

import threading
import time

import confluent_kafka
import pytest
from tests.server.compaction_support import compacted, produce, producer, read_all, wait_cleaned, wait_for
from tests.support.kafka_workload import confluent_create_topic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

BROKER_CONFIG = {"log.cleaner.backoff.ms": 50}
DELETE_RETENTION_MS = 1500
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}


def test_compacted_topic_reads_back_each_keys_last_value_at_its_offset(broker: Broker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap_servers, topic, 1, COMPACTED)
    items = [(b"key-%02d" % (i % 40), b"value-%05d-" % i + b"x" * (i % 50)) for i in range(4000)]
    acked = produce(broker, topic, items)
    assert [offset for offset, _, _ in acked] == list(range(4000))
    boundary = wait_cleaned(broker, topic)
    assert boundary > 3000
    records = read_all(broker, topic)
    assert records == compacted(acked, boundary)
    assert len(records) < 40 + (4000 - boundary) + 1
    assert "Cleaned " + f"{topic}-0" in broker.log_path.read_text()


def test_tombstoned_keys_disappear_after_delete_retention(broker: Broker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap_servers, topic, 1, COMPACTED)
    acked = produce(broker, topic, [(b"k%d" % (i % 10), b"v%d" % i) for i in range(200)])
    acked += produce(broker, topic, [(b"k%d" % i, None) for i in range(5)])
    # Enough other writes that the tombstones' segment rolls and is cleaned.
    acked += produce(broker, topic, [(b"filler", b"f" * 100) for _ in range(200)])
    boundary = wait_cleaned(broker, topic)
    tombstoned = {b"k%d" % i for i in range(5)}
    first = read_all(broker, topic)
    assert {key for _, key, value in first if value is None} == tombstoned  # kept for now
    time.sleep(DELETE_RETENTION_MS / 1000)
    wait_for(
        lambda: not {key for _, key, _ in read_all(broker, topic)} & tombstoned,
        "the tombstoned keys are gone",
    )
    expected = [r for r in compacted(acked, boundary) if r[0] >= boundary or r[1] not in tombstoned]
    assert read_all(broker, topic) == expected


def test_records_without_a_key_are_refused_on_compacted_topics(broker: Broker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap_servers, topic, 1, COMPACTED)
    confluent_create_topic(broker.bootstrap_servers, topic + "-plain", 1)
    client = producer(broker, **{"message.send.max.retries": 0})
    results: list[object] = []

    def report(err: object, msg: confluent_kafka.Message) -> None:
        results.append(err.code() if err is not None else msg.offset())  # type: ignore[attr-defined]

    client.produce(topic, value=b"no key", partition=0, on_delivery=report)
    assert client.flush(30) == 0
    client.produce(topic + "-plain", value=b"no key", partition=0, on_delivery=report)
    client.produce(topic, key=b"k", value=b"keyed", partition=0, on_delivery=report)
    assert client.flush(30) == 0
    assert results == [confluent_kafka.KafkaError.INVALID_RECORD, 0, 0]
    assert read_all(broker, topic) == [(0, b"k", b"keyed")]


def test_a_reader_never_sees_a_key_go_back_while_the_cleaner_runs(broker: Broker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap_servers, topic, 1, COMPACTED)
    stop = threading.Event()
    acked: dict[int, tuple[bytes | None, bytes | None]] = {}
    errors: list[object] = []

    def write() -> None:
        client = producer(broker)

        def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked[msg.offset()] = (msg.key(), msg.value())

        seq = 0
        while not stop.is_set() and seq < 60_000:
            for _ in range(100):
                key = b"key-%02d" % (seq % 30)
                try:
                    client.produce(
                        topic, key=key, value=b"%s@%08d" % (key, seq), partition=0, on_delivery=on_delivery
                    )
                except BufferError:
                    client.poll(0.05)
                    continue
                seq += 1
            client.poll(0.03)
        client.flush(30)

    thread = threading.Thread(target=write, name="compaction-writer")
    thread.start()
    passes = 0
    try:
        deadline = time.monotonic() + 60

        def cleanings() -> int:
            return broker.log_path.read_text().count(f"Cleaned {topic}-0")

        while passes < 3 or cleanings() < 3:
            assert time.monotonic() < deadline, f"{passes} passes, {cleanings()} cleanings"
            records = read_all(broker, topic)
            seen: dict[bytes | None, int] = {}
            for offset, key, value in records:
                assert value is not None
                seq = int(value.rsplit(b"@", 1)[1])
                assert seq > seen.get(key, -1), f"{key!r} went back from seq {seen[key]} to {seq} at {offset}"
                seen[key] = seq
                if offset in acked:
                    assert acked[offset] == (key, value)
            passes += 1
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors[:3]
    assert passes >= 3


def test_stopping_the_broker_during_a_cleaning_is_clean(fresh_broker: Broker, topic: str) -> None:
    broker = fresh_broker
    confluent_create_topic(broker.bootstrap_servers, topic, 1, {**COMPACTED, "segment.bytes": "16384"})
    acked = produce(
        broker, topic, [(b"key-%03d" % (i % 500), b"v%06d" % i + b"." * 60) for i in range(30_000)]
    )

    def cleaning_under_way() -> bool:
        text = broker.log_path.read_text()
        return text.count(f"msg=Cleaning {topic}-0:") > text.count(f"msg=Cleaned {topic}-0 ")

    wait_for(cleaning_under_way, "a cleaning is under way")
    assert broker.stop(timeout=30) == 0  # SIGTERM: the cleaning is aborted, the shutdown is clean
    text = broker.log_path.read_text()
    assert f"msg=Cleaning of {topic}-0 aborted: the broker is stopping" in text
    assert "shut down cleanly" in text
    partition_dir = broker.data_dir / f"{topic}-0"
    assert not [p.name for p in partition_dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    broker.restart()
    records = read_all(broker, topic)
    assert set(records) <= set(acked)
    assert {key: value for _, key, value in records} == {key: value for _, key, value in acked}
