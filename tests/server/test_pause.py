"""SIGSTOP faults: the broker frozen (a hung process, a long GC or VM pause) for longer than the clients'
timeouts, then continued, while real confluent-kafka clients keep working against it.

While the broker is stopped the kernel still accepts connections and buffers what clients send: clients
time their requests out, drop the connection and resend on a new one, and when the broker resumes it finds
the abandoned requests waiting in its sockets beside the retries, and its own timers (group sessions,
transaction timeouts) overdue. Asserted, exactly:

- idempotent producer (acks=all): every message acknowledged, each partition holds exactly the messages
  sent to it, once each, in send order, at offsets 0..hw-1, each at its acknowledged offset; every pause
  held up messages (acknowledged only after it) and made ProduceRequests time out in the client;
- acks=all producer without idempotence: nothing acknowledged is lost (each message at its acknowledged
  offset, offsets contiguous, nothing stored that was not sent, copies only in their own partition);
  duplicates are Kafka's semantics there (the client resends what timed out) and are only counted;
- consumer group of two members committing after processing, paused mid-consumption for longer than the
  session timeout: every message is consumed at least once, the committed offsets end at the high
  watermarks and the group settles with the partitions split between both members. Classic protocol: both
  members lose their partitions (librdkafka ends the session itself) and rejoin under new member ids, and
  the group settles well within the rebalance timeout (the broker expired the old members). Consumer
  protocol (KIP-848): the broker may count a heartbeat sent during the pause as proof of life, as Kafka
  would, so whether the group rebalances is not asserted;
- transactional consume-transform-produce paused mid-transaction for longer than transaction.timeout.ms:
  after resume the coordinator aborts it (CompleteAbort, epoch bumped), the producer cannot commit it and
  the loop aborts or re-initialises and redoes the batch; read_committed output is each input exactly once,
  in order, and the aborted attempt's records are in the log yet never visible to read_committed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import pytest
from tests.server.group_harness import Wire
from tests.server.txn_crash_worker import committed_all, rewind
from tests.server.txn_support import create_topics, end_offsets, read_values
from tests.support.kafka_workload import confluent_consume, confluent_create_topic, confluent_high_watermarks

from tidelog.protocol.messages import DescribeTransactionsRequest
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

SESSION_MS = 2000  # group sessions, of both protocols
BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.session.timeout.ms": 500,
    "group.consumer.heartbeat.interval.ms": 250,
    "group.consumer.min.heartbeat.interval.ms": 250,
}

PAUSE_SECONDS = 2.5  # the producers' requests time out after 1 s
# Timeouts small enough that the clients really give up on requests to the frozen broker and retry.
CLIENT_TIMEOUTS: dict[str, Any] = {
    "socket.timeout.ms": 1000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 300,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 300,
}


def wait_for(condition: Callable[[], bool], timeout: float, what: Callable[[], str] | str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
        time.sleep(0.05)


class ClientLog(logging.Handler):
    """librdkafka's log lines for one client (delivered by poll(), in order with its delivery reports)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"tests.pause.{name}")
        self.logger.handlers = [self]
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))


# ---- producers ---------------------------------------------------------------------------------------

PARTITIONS = 3


@dataclass
class Sent:
    seq: int
    partition: int
    value: bytes
    epoch_at_produce: int
    offset: int = -1
    epoch_at_ack: int = -1
    error: object = None


class PauseClock:
    """Epochs: even while the broker runs, odd from just before a pause until just after its resume, so a
    message produced in a pause's epoch or before and acknowledged after it was held up by it."""

    def __init__(self) -> None:
        self.epoch = 0  # written by the test thread only

    def bump(self) -> None:
        self.epoch += 1


def produce_while_pausing(
    broker: Broker, topic: str, *, idempotent: bool, pauses: int
) -> tuple[list[Sent], list[int]]:
    """Produce numbered messages (partition = seq % PARTITIONS) without pause while the broker is paused
    ``pauses`` times; returns what was sent and, per pause, how many ProduceRequests timed out in it."""
    clock = PauseClock()
    sent: list[Sent] = []
    acked = [0]
    failures: list[str] = []
    stop = threading.Event()
    log = ClientLog(topic)
    producer = confluent_kafka.Producer(
        {
            **CLIENT_TIMEOUTS,
            "bootstrap.servers": broker.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": idempotent,
            "request.timeout.ms": 1000,
            "message.timeout.ms": 120_000,  # messages outlive every pause: only requests time out
            "linger.ms": 5,
            "logger": log.logger,
        }
    )

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        record = sent[int(msg.value()[6:14])]
        record.epoch_at_ack = clock.epoch
        if err is not None:
            record.error = err
            return
        record.offset = msg.offset()
        acked[0] += 1

    def run() -> None:
        try:
            seq = 0
            while not stop.is_set():
                for _ in range(20):
                    value = b"pause-%08d" % seq
                    sent.append(Sent(seq, seq % PARTITIONS, value, clock.epoch))
                    producer.produce(topic, value=value, partition=seq % PARTITIONS, on_delivery=on_delivery)
                    seq += 1
                producer.poll(0.01)  # about 2000 messages a second
            remaining = producer.flush(60)
            if remaining:
                failures.append(f"{remaining} messages still undelivered")
        except Exception as exc:  # reported in the test thread
            failures.append(repr(exc))

    timeouts: list[int] = []
    thread = threading.Thread(target=run, name=f"producer-{topic}")
    thread.start()
    try:
        wait_for(lambda: acked[0] >= 500, 30, "the first acknowledgements")
        for _ in range(pauses):
            before_acks, before_timeouts = acked[0], log.count("Timed out ProduceRequest")
            clock.bump()
            with broker.paused(PAUSE_SECONDS):
                pass
            clock.bump()
            wait_for(
                lambda before=before_acks: acked[0] >= before + 500,
                30,
                lambda: f"acknowledgements after the pause ({acked[0]}; {failures})",
            )
            timeouts.append(log.count("Timed out ProduceRequest") - before_timeouts)
    finally:
        stop.set()
        thread.join(90)
    assert not thread.is_alive(), "the producer did not finish"
    assert not failures, failures
    return sent, timeouts


def read_log(broker: Broker, topic: str) -> dict[int, list[bytes]]:
    """Every partition's values, offsets 0..hw-1 (asserted contiguous)."""
    marks = confluent_high_watermarks(broker.bootstrap_servers, topic, PARTITIONS)
    assert {p: low for p, (low, _) in marks.items()} == dict.fromkeys(range(PARTITIONS), 0)
    total = sum(high for _, high in marks.values())
    consumed = confluent_consume(broker.bootstrap_servers, topic, PARTITIONS, total, timeout=60)
    assert len(consumed) == total, f"consumed {len(consumed)} of {total} records"
    log: dict[int, list[bytes]] = {}
    for partition in range(PARTITIONS):
        rows = [c for c in consumed if c.partition == partition]
        assert [c.offset for c in rows] == list(range(marks[partition][1])), f"partition {partition}"
        log[partition] = [c.value or b"" for c in rows]
    return log


def assert_pauses_cut_traffic(sent: list[Sent], timeouts: list[int]) -> None:
    for pause in range(len(timeouts)):
        odd = 2 * pause + 1
        assert [s for s in sent if s.epoch_at_produce <= odd < s.epoch_at_ack], (
            f"pause {pause + 1} held up no message"
        )
    # librdkafka's log lines reach the callback late under load, so a pause's timeouts may be counted in the
    # next one's window: the pauses together must show them, one by one they need not.
    assert sum(timeouts) > 0, f"no ProduceRequest timed out during the pauses: {timeouts}"


def test_idempotent_producer_paused_stores_every_message_once_in_order(broker: Broker) -> None:
    topic = "pause-idempotent"
    confluent_create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    sent, timeouts = produce_while_pausing(broker, topic, idempotent=True, pauses=3)
    failed = [s for s in sent if s.error is not None or s.offset < 0]
    assert not failed, f"{len(failed)} messages not acknowledged, e.g. {failed[:3]}"
    assert_pauses_cut_traffic(sent, timeouts)
    log = read_log(broker, topic)
    for partition in range(PARTITIONS):
        mine = [s for s in sent if s.partition == partition]
        assert log[partition] == [s.value for s in mine], f"partition {partition} is not the sent sequence"
        assert [s.offset for s in mine] == list(range(len(mine))), (
            f"partition {partition} acknowledged offsets"
        )


def test_producer_without_idempotence_paused_loses_nothing_acknowledged(
    broker: Broker, record_property: Callable[[str, object], None]
) -> None:
    topic = "pause-at-least-once"
    confluent_create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    sent, timeouts = produce_while_pausing(broker, topic, idempotent=False, pauses=2)
    failed = [s for s in sent if s.error is not None or s.offset < 0]
    assert not failed, f"{len(failed)} messages not acknowledged, e.g. {failed[:3]}"
    assert_pauses_cut_traffic(sent, timeouts)
    log = read_log(broker, topic)
    by_value = {s.value: s for s in sent}
    for s in sent:  # every acknowledged message at exactly its acknowledged offset
        stored = log[s.partition][s.offset] if s.offset < len(log[s.partition]) else None
        assert stored == s.value, (
            f"seq {s.seq} acked at ({s.partition}, {s.offset}), the log holds {stored!r}"
        )
    copies: Counter[bytes] = Counter()
    for partition, values in log.items():
        for offset, value in enumerate(values):
            assert value in by_value, f"({partition}, {offset}) holds a record nobody sent: {value!r}"
            assert by_value[value].partition == partition, f"{value!r} copied into partition {partition}"
            copies[value] += 1
    duplicates = sum(n - 1 for n in copies.values())
    record_property("duplicates", duplicates)  # resent after timeouts: allowed without idempotence
    print(f"{len(sent)} messages, {duplicates} duplicate copies")


# ---- consumer group --------------------------------------------------------------------------------

REBALANCE_MS = (
    60_000  # max.poll.interval.ms: a broker that never expired the old members would stall this long
)


class GroupMember(threading.Thread):
    """A confluent-kafka group member in its own thread: poll, process, commit that message synchronously."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, protocol: str) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.topic = topic
        # the consumer protocol (KIP-848) takes its session timeout from the broker (BROKER_CONFIG)
        timing = (
            {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 250} if protocol == "classic" else {}
        )
        self.consumer = confluent_kafka.Consumer(
            {
                **CLIENT_TIMEOUTS,
                **timing,
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": protocol,
                "client.id": name,
                "max.poll.interval.ms": REBALANCE_MS,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "log_level": 0,
            }
        )
        self.consumed: list[tuple[int, int, bytes]] = []
        self.assignment: set[int] = set()
        self.member_id = ""
        self.lost = 0
        self.commits: list[tuple[float, float]] = []  # (called, returned), monotonic
        self.failure: str | None = None
        self.stop = threading.Event()

    def _assigned(self, consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self.member_id = consumer.memberid()  # in the member's thread: the handle is not shared
        self.assignment |= {tp.partition for tp in partitions}  # all of them, or the increment

    def _revoked(self, _consumer: object, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self.assignment -= {tp.partition for tp in partitions}

    def _lost(self, _consumer: object, _partitions: list[confluent_kafka.TopicPartition]) -> None:
        self.assignment = set()
        self.lost += 1

    def run(self) -> None:
        try:
            self.consumer.subscribe(
                [self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
            )
            while not self.stop.is_set():
                message = self.consumer.poll(0.1)
                if message is None or message.error() is not None:
                    continue
                time.sleep(0.005)  # processing
                self.consumed.append((message.partition(), message.offset(), message.value()))
                started = time.monotonic()
                with contextlib.suppress(confluent_kafka.KafkaException):
                    # fails against the frozen broker or in a rebalance: then the message comes again
                    self.consumer.commit(message=message, asynchronous=False)
                self.commits.append((started, time.monotonic()))
        except Exception as exc:
            self.failure = repr(exc)
        finally:
            self.consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_group_paused_past_session_timeout_rebalances_and_loses_nothing(
    broker: Broker, protocol: str
) -> None:
    topic = group = f"pause-group-{protocol}"
    partitions = 4
    bootstrap = broker.bootstrap_servers
    confluent_create_topic(bootstrap, topic, partitions)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})

    def produce(first: int, count: int) -> list[bytes]:
        values = [b"g-%05d" % n for n in range(first, first + count)]
        for n, value in enumerate(values, first):
            producer.produce(topic, value=value, partition=n % partitions)
        assert producer.flush(30) == 0
        return values

    checker = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]

    def committed() -> dict[int, int]:
        try:
            return {tp.partition: tp.offset for tp in checker.committed(tps, timeout=5)}
        except confluent_kafka.KafkaException:
            return {}

    def high_watermarks() -> dict[int, int]:
        return {p: high for p, (_, high) in confluent_high_watermarks(bootstrap, topic, partitions).items()}

    members = [GroupMember(bootstrap, topic, group, name, protocol) for name in ("a", "b")]
    try:
        for member in members:
            member.start()
        produced = produce(0, 200)
        wait_for(
            lambda: all(m.assignment for m in members) and committed() == high_watermarks(),
            30,
            lambda: f"both members assigned and the first messages committed ({committed()})",
        )
        member_ids = {m.member_id for m in members}
        produced += produce(200, 400)
        wait_for(lambda: any(v >= b"g-00200" for m in members for _, _, v in m.consumed), 15, "phase 2")

        paused = time.monotonic()
        with broker.paused(SESSION_MS / 1000 + 2):  # past the session timeout, mid-consumption
            pass
        resumed = time.monotonic()

        def done() -> bool:
            consumed = {v for m in members for _, _, v in m.consumed}
            return consumed >= set(produced) and committed() == high_watermarks()

        wait_for(done, 25, lambda: f"consumption to complete (committed {committed()})")
        wait_for(
            lambda: (
                all(m.assignment for m in members)
                and sorted(p for m in members for p in m.assignment) == list(range(partitions))
            ),
            15,
            lambda: f"a settled group (assignments {[m.assignment for m in members]})",
        )
        if protocol == "classic":
            # librdkafka ends a classic session itself after session.timeout.ms without a heartbeat
            # response, and rejoins under a new member id; the group settled within the deadlines
            # above, well within the rebalance timeout, so the broker expired the old members
            assert [m.lost for m in members] == [1, 1], "each member lost its partitions once, in the pause"
            new_ids = {m.member_id for m in members}
            assert len(new_ids) == 2, new_ids
            assert not new_ids & member_ids, (member_ids, new_ids)
        # KIP-848: the client keeps its session; a heartbeat it sent during the pause and the broker read
        # after it may count as proof of life (as in Kafka), so a rebalance may or may not happen
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.join(30)
        checker.close()
    assert [m.failure for m in members] == [None, None]
    assert not [m.name for m in members if m.is_alive()]
    consumed = Counter(v for m in members for _, _, v in m.consumed)
    assert set(consumed) == set(produced), "consumed exactly the produced messages"
    assert [(a, b) for m in members for a, b in m.commits if a < resumed and b > paused], (
        "the pause held up no commit: it did not hit the members mid-consumption"
    )


# ---- transactions ------------------------------------------------------------------------------------

TXN_TIMEOUT_MS = 2000
PAUSED_ATTEMPT = 3  # the transaction the broker freezes in
TXN_CLIENT: dict[str, Any] = {
    "log_level": 0,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 300,
    "metadata.recovery.strategy": "none",  # see txn_crash_worker: keep the coordinator's broker handle
}


def retrying(call: Callable[[], object], timeout: float = 30.0) -> None:
    """Repeat a transactional call while its error is retriable (librdkafka's advice), up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except confluent_kafka.KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() >= deadline:
                raise


def send_offsets_and_commit(
    producer: Any, positions: list[confluent_kafka.TopicPartition], group_metadata: object
) -> None:
    retrying(lambda: producer.send_offsets_to_transaction(positions, group_metadata, 20))
    retrying(lambda: producer.commit_transaction(20))


def describe_transaction(bootstrap: str, transactional_id: str) -> tuple[str, int]:
    """(state, producer epoch) as the coordinator has them."""
    wire = Wire(bootstrap)
    try:
        (state,) = wire.call(
            DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0
        ).transaction_states
    finally:
        wire.close()
    return state.transaction_state, state.producer_epoch


def test_transaction_paused_past_its_timeout_is_aborted_and_redone(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    source, sink, group, txn_id = "pause-txn-in", "pause-txn-out", "pause-txn-group", "pause-txn"
    partitions, per_partition = 2, 60
    create_topics(bootstrap, {source: partitions, sink: partitions})
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    inputs = {p: [b"%d-%03d" % (p, i) for i in range(per_partition)] for p in range(partitions)}
    for p, values in inputs.items():
        for value in values:
            plain.produce(source, value=value, partition=p)
    assert plain.flush(30) == 0

    def new_producer() -> Any:
        producer = confluent_kafka.Producer(
            {
                **TXN_CLIENT,
                "bootstrap.servers": bootstrap,
                "transactional.id": txn_id,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
                "linger.ms": 2,
            }
        )
        producer.init_transactions(30)
        return producer

    consumer = confluent_kafka.Consumer(
        {
            **TXN_CLIENT,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
    )
    tps = [confluent_kafka.TopicPartition(source, p) for p in range(partitions)]
    consumer.assign(tps)
    producer = new_producer()
    committed: list[str] = []
    failed: dict[str, str] = {}
    written: dict[str, list[bytes]] = {}  # per attempt
    paused_state: tuple[str, int] | None = None
    attempt = 0
    deadline = time.monotonic() + 60
    try:
        while True:
            assert time.monotonic() < deadline, f"the loop did not finish: {committed} {failed}"
            messages = [m for m in consumer.consume(10, 0.2) if m.error() is None]
            if not messages:
                if committed_all(consumer, tps, [per_partition] * partitions):
                    break
                continue
            attempt += 1
            tag = f"a{attempt}"
            try:
                producer.begin_transaction()
                written[tag] = [b"out:" + m.value() + b"@" + tag.encode() for m in messages]
                for message, value in zip(messages, written[tag], strict=True):
                    producer.produce(sink, value=value, partition=message.partition())
                if attempt == PAUSED_ATTEMPT:
                    assert producer.flush(10) == 0  # the records are in the log, the transaction open
                    state, epoch = describe_transaction(bootstrap, txn_id)
                    assert state == "Ongoing"
                    with broker.paused(TXN_TIMEOUT_MS / 1000 + 1.5):
                        pass

                    def aborted(epoch: int = epoch) -> bool:
                        nonlocal paused_state
                        paused_state = describe_transaction(bootstrap, txn_id)
                        return paused_state[0] == "CompleteAbort" and paused_state[1] > epoch

                    wait_for(aborted, 15, lambda: f"the coordinator to abort the transaction: {paused_state}")
                offsets = {}
                for message in messages:
                    offsets[message.partition()] = message.offset() + 1
                positions = [confluent_kafka.TopicPartition(source, p, o) for p, o in offsets.items()]
                send_offsets_and_commit(producer, positions, consumer.consumer_group_metadata())
                committed.append(tag)
            except confluent_kafka.KafkaException as exc:  # the usual pattern: abort, or start over
                error = exc.args[0]
                failed[tag] = f"{error.name()}: {error.str()}"
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(20)
                    except confluent_kafka.KafkaException:
                        producer = new_producer()
                else:
                    producer = new_producer()
                rewind(consumer, tps)
    finally:
        producer.flush(1)
        consumer.close()

    paused_tag = f"a{PAUSED_ATTEMPT}"
    assert paused_tag not in committed
    assert list(failed) == [paused_tag], failed  # the paused transaction only, and it never committed
    outputs = [(sink, p) for p in range(partitions)]
    assert end_offsets(bootstrap, outputs, committed=True) == end_offsets(bootstrap, outputs, committed=False)
    visible = read_values(bootstrap, outputs, committed=True)
    for p in range(partitions):
        assert [v.split(b"@")[0] for v in visible[(sink, p)]] == [b"out:" + v for v in inputs[p]]
        assert {v.split(b"@")[1].decode() for v in visible[(sink, p)]} <= set(committed)
    everything = read_values(bootstrap, outputs, committed=False)
    aborted = [v for vs in everything.values() for v in vs if v.endswith(b"@" + paused_tag.encode())]
    assert sorted(aborted) == sorted(written[paused_tag]), "the paused transaction's records, once each"
    assert committed_all_offsets(bootstrap, group, tps) == [per_partition] * partitions


def committed_all_offsets(bootstrap: str, group: str, tps: list[confluent_kafka.TopicPartition]) -> list[int]:
    checker = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        return [tp.offset for tp in checker.committed(tps, timeout=10)]
    finally:
        checker.close()
