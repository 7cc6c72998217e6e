"""A consume-transform-produce application (confluent-kafka transactional producer, read_committed
consumer, ``send_offsets_to_transaction``) across the kill -9 of its transaction coordinator's broker,
under continuous input from an idempotent producer.

The application handles errors as Kafka's documentation says: a retriable error retries the commit, an
abortable one aborts and rewinds the consumer to the group's committed offsets, a fatal one starts a new
producer (``init_transactions`` fences the old one). Afterwards the output, read with read_committed,
holds each acknowledged input exactly once (transformed), nothing else, and the group's committed
offsets are the input's high watermarks.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from tests.cluster.harness import Scenario
from tests.cluster.workload import ClientThread, ProducerSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

INPUT, OUTPUT, PARTITIONS = "payments", "ledger", 3
GROUP, TRANSACTIONAL_ID = "ledger-app", "ledger-app-0"
TXN_TOPIC = "__transaction_state"

IDLE_MS = 5000
"""The application's producer closes connections idle this long (librdkafka's ``connections.max.idle.ms``).

GROUP_COORDINATOR_HANG: when the killed broker was also the group's coordinator, librdkafka (2.16.0,
confluentinc/librdkafka#5511, #5456) can block ``send_offsets_to_transaction`` for ever, past its timeout:
AddOffsetsToTxn succeeds on the new transaction coordinator, then the TxnOffsetCommit waits for the
group coordinator it cached (the killed broker), which librdkafka has meanwhile decommissioned because
Metadata no longer lists it; the wait is only re-examined when some broker connection goes up or down,
and none does while the application is blocked, so no FindCoordinator for the group (and no
TxnOffsetCommit) is ever sent. A producer that closes its idle connections has one go down within
seconds, which makes librdkafka look the coordinator up again. Kafka answers the same way here (a dead
broker leaves Metadata once its ZooKeeper session expires), so this is the client's, not the broker's."""


def transformed(value: bytes) -> bytes:
    return b"ledger:" + value


class Transformer(ClientThread):
    """The application, in a thread."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__("transformer", join_timeout=90)
        self.scenario = scenario
        self.commits = 0
        self.aborts = 0
        self.new_producers = 0
        self.errors: Counter[str] = Counter()

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.scenario.bootstrap,
                "transactional.id": TRANSACTIONAL_ID,
                "transaction.timeout.ms": 30_000,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 2000,
                # librdkafka (2.16) work-around, see IDLE_MS above
                "connections.max.idle.ms": IDLE_MS,
                "log_level": 3,
            }
        )
        self._retrying(lambda: producer.init_transactions(30))
        return producer

    def _retrying(self, call: Any) -> None:
        """``call`` until it does not raise a retriable error (init, commit and abort may all be retried)."""
        from confluent_kafka import KafkaException

        while True:
            try:
                call()
                return
            except KafkaException as exc:
                error = exc.args[0]
                self.errors[error.name()] += 1
                if not error.retriable() or self.stopping.is_set():
                    raise

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.scenario.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "topic.metadata.refresh.interval.ms": 2000,
                "log_level": 3,
            }
        )
        consumer.subscribe([INPUT])
        producer = self._producer()

        def rewind() -> None:
            assignment = consumer.assignment()
            if not assignment:
                return
            for tp in consumer.committed(assignment, timeout=30):
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

        try:
            while not self.stopping.is_set():
                msgs = [m for m in consumer.consume(200, 0.2) if not m.error()]
                if not msgs:
                    continue
                try:
                    producer.begin_transaction()
                    for m in msgs:
                        producer.produce(OUTPUT, value=transformed(m.value()), partition=m.partition())
                    positions = consumer.position(consumer.assignment())
                    self._retrying(
                        lambda positions=positions, p=producer: p.send_offsets_to_transaction(
                            positions, consumer.consumer_group_metadata(), 30
                        )
                    )
                    self._retrying(lambda p=producer: p.commit_transaction(30))
                    self.commits += 1
                except KafkaException as exc:
                    error = exc.args[0]
                    self.errors[error.name()] += 1
                    if error.txn_requires_abort():
                        self._retrying(lambda p=producer: p.abort_transaction(30))
                        self.aborts += 1
                    else:  # fatal: a new producer fences this one and finishes or aborts what it left
                        producer.flush(5)
                        producer = self._producer()
                        self.new_producers += 1
                    rewind()
        finally:
            consumer.close()
            producer.flush(10)


def test_consume_transform_produce_is_exactly_once_across_a_coordinator_failover(scenario: Scenario) -> None:
    c = scenario.start()
    scenario.create_topic(INPUT, PARTITIONS)
    scenario.create_topic(OUTPUT, PARTITIONS)
    app = Transformer(scenario)
    with scenario.workload(INPUT, producers=[ProducerSpec("idem", rate=200)], readers=[]) as load:
        app.start()
        load.wait_acked(300, "before the fault")
        scenario.wait_for(lambda: app.commits >= 5, "the application committing transactions")
        coordinator_partition = scenario.coordinator_partition(TXN_TOPIC, TRANSACTIONAL_ID)
        old = scenario.state(TXN_TOPIC, coordinator_partition)
        committed_before = app.commits
        c.kill(old.leader)
        scenario.event(f"transaction coordinator {old.leader} killed after {committed_before} commits")
        scenario.wait_new_leader(TXN_TOPIC, coordinator_partition, old)
        scenario.wait_for(
            lambda: app.commits >= committed_before + 5,
            "the application committing on the new coordinator",
            90,
        )
        c.start_broker(old.leader)
        scenario.event(f"broker {old.leader} restarted")
        load.wait_acked(200, "after the restart")
    # every input consumed and its offset committed in a transaction
    scenario.wait_for(
        lambda: scenario.committed_offsets(GROUP, INPUT) == scenario.high_watermarks(INPUT),
        "the application's committed offsets to reach the input's high watermarks",
        90,
    )
    app.stop()
    scenario.event(
        f"application: {app.commits} commits, {app.aborts} aborts, {app.new_producers} new producers"
    )
    scenario.event(f"application errors: {dict(app.errors)}")
    scenario.verify([INPUT])
    output = scenario.read(OUTPUT, isolation_level="read_committed")
    counts = Counter(output)
    acked = {a.value for a in scenario.history.acks}
    expected = {transformed(v) for v in acked}
    inputs = {transformed(v) for v in scenario.history.sent}
    duplicated = sorted(v for v, n in counts.items() if n > 1)
    missing = sorted(expected - set(counts))
    invented = sorted(set(counts) - inputs)
    assert (duplicated, missing, invented) == ([], [], []), (
        f"{scenario.history.summary()}\noutput: {len(output)} records; "
        f"{len(duplicated)} duplicated {duplicated[:5]}, {len(missing)} missing {missing[:5]}, "
        f"{len(invented)} never input {invented[:5]}"
    )
