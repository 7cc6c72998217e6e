"""SIGKILL in the middle of a produce run loses nothing that was acknowledged, and moves nothing.

A confluent-kafka producer (idempotence off, acks=1 or acks=all) produces keyed messages to 3 partitions
without pause while the broker subprocess is killed with SIGKILL and restarted on the same data dir and
port, four times. librdkafka retries what was in flight, so every message is eventually acknowledged.

What is asserted, after the run and again after one more crash of the idle broker:

- every delivery report (no error, with its offset) names a (partition, offset) that holds exactly that
  message: acknowledged data survives the crash at the offset it was given (offsets never change);
- each partition's offsets run 0..high watermark - 1 with no gap, and every record is one the producer
  sent (no torn or invented records);
- duplicates are only the client's retries: a message whose produce() and delivery report both fell
  between the same two crashes (so no connection it used was cut) appears exactly once; a message that was
  in flight across a crash may appear more than once (idempotence is off, librdkafka resends it), but only
  in its own partition, and one copy sits at its acknowledged offset;
- each crash really cut traffic: some message produced before it was acknowledged only after it;
- the broker log of the final clean shutdown is free of tracebacks (fixture).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass

import confluent_kafka
import pytest
from tests.support.kafka_workload import confluent_consume, confluent_create_topic, confluent_high_watermarks

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(240)]

PARTITIONS = 3
CRASHES = 4


@dataclass
class Sent:
    seq: int
    key: bytes
    value: bytes
    epoch_at_produce: int
    partition: int = -1
    offset: int = -1
    epoch_at_ack: int = -1
    error: object = None


class CrashClock:
    """Epochs: even while the broker runs, odd from just before a SIGKILL until the restart is done.

    The epoch is raised *before* the signal is sent, so a message whose produce() and delivery report
    saw the same epoch cannot have had a crash in between."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch = 0

    @property
    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def bump(self) -> None:
        with self._lock:
            self._epoch += 1


def produce_while_crashing(broker: Broker, topic: str, acks: str) -> list[Sent]:
    clock = CrashClock()
    sent: list[Sent] = []
    errors: list[str] = []
    stop = threading.Event()
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "acks": acks,
            "enable.idempotence": False,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 500,
            "log_level": 0,
        }
    )

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        record = sent[int(msg.value()[6:14])]
        record.epoch_at_ack = clock.epoch
        if err is not None:
            record.error = err
            return
        record.partition, record.offset = msg.partition(), msg.offset()

    def run() -> None:
        try:
            seq = 0
            while not stop.is_set():
                for _ in range(50):
                    value = b"crash-%08d-" % seq + b"x" * (seq % 64)
                    key = b"key-%02d" % (seq % 32)
                    sent.append(Sent(seq, key, value, clock.epoch))
                    while True:
                        try:
                            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                            break
                        except BufferError:
                            producer.poll(0.05)
                    seq += 1
                producer.poll(0.002)
            remaining = producer.flush(150)
            if remaining:
                errors.append(f"{remaining} messages still undelivered")
        except Exception as exc:  # reported in the main thread
            errors.append(repr(exc))

    thread = threading.Thread(target=run, name="crash-producer")
    thread.start()
    rng = random.Random(20240601)
    try:
        time.sleep(1.0)
        for _ in range(CRASHES):
            time.sleep(rng.uniform(0.3, 1.2))
            clock.bump()
            broker.kill()
            time.sleep(rng.uniform(0.0, 0.4))
            broker.restart()
            clock.bump()
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(200)
    assert not thread.is_alive(), "producer did not finish"
    assert not errors, errors
    return sent


def read_log(broker: Broker, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bytes | None]]:
    marks = confluent_high_watermarks(broker.bootstrap_servers, topic, PARTITIONS)
    assert {p: low for p, (low, _) in marks.items()} == dict.fromkeys(range(PARTITIONS), 0)
    total = sum(high for _, high in marks.values())
    consumed = confluent_consume(broker.bootstrap_servers, topic, PARTITIONS, total)
    assert len(consumed) == total, f"consumed {len(consumed)} of {total} records"
    for partition in range(PARTITIONS):
        offsets = [c.offset for c in consumed if c.partition == partition]
        assert offsets == list(range(marks[partition][1])), f"partition {partition}: offsets not 0..hw-1"
    return {(c.partition, c.offset): (c.key, c.value) for c in consumed}


def verify(sent: list[Sent], log: dict[tuple[int, int], tuple[bytes | None, bytes | None]]) -> None:
    failed = [s for s in sent if s.error is not None or s.offset < 0]
    assert not failed, f"{len(failed)} messages not acknowledged, e.g. {failed[:3]}"
    by_value = {s.value: s for s in sent}
    # every acknowledged message at exactly its acknowledged offset
    for s in sent:
        assert log.get((s.partition, s.offset)) == (s.key, s.value), (
            f"seq {s.seq} acked at ({s.partition}, {s.offset}) but the log holds {log.get((s.partition, s.offset))}"
        )
    # nothing else in the log but copies of sent messages, in their own partition
    copies: Counter[bytes] = Counter()
    for (partition, offset), (key, value) in log.items():
        assert value in by_value, f"({partition}, {offset}) holds a record nobody sent: {value!r}"
        s = by_value[value]
        assert key == s.key
        assert partition == s.partition, (
            f"seq {s.seq} copied into partition {partition} (acked in {s.partition})"
        )
        copies[value] += 1
    # duplicates only where a crash cut the message's connection
    quiet = [s for s in sent if s.epoch_at_produce == s.epoch_at_ack]
    duplicated_quiet = [s.seq for s in quiet if copies[s.value] != 1]
    assert not duplicated_quiet, (
        f"{len(duplicated_quiet)} messages with no crash in their lifetime are not stored exactly once, e.g. {duplicated_quiet[:5]}"
    )
    assert len(quiet) > 10_000, (
        f"only {len(quiet)} messages lived between two crashes: the uniqueness check is too thin"
    )
    # every crash interrupted traffic
    for crash in range(CRASHES):
        odd = 2 * crash + 1  # the epoch during crash number `crash`
        interrupted = [s for s in sent if s.epoch_at_produce < odd <= s.epoch_at_ack]
        assert interrupted, f"crash {crash + 1} hit no message in flight"


@pytest.mark.slow
@pytest.mark.parametrize("acks", ["1", "all"])
def test_sigkill_during_produce_loses_nothing_acknowledged(fresh_broker: Broker, acks: str) -> None:
    topic = f"crash-acks-{acks}"
    confluent_create_topic(fresh_broker.bootstrap_servers, topic, PARTITIONS)
    sent = produce_while_crashing(fresh_broker, topic, acks)
    assert len(sent) > 5000
    log = read_log(fresh_broker, topic)
    verify(sent, log)
    # an idle crash changes nothing at all
    fresh_broker.kill()
    fresh_broker.restart()
    assert read_log(fresh_broker, topic) == log
