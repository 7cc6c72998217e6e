"""Transactions end to end with real clients against a broker process.

confluent-kafka, kafka-python and aiokafka transactional producers: a committed transaction is visible to
read_committed, an aborted one only to read_uncommitted; a read_committed consumer waits behind an open
transaction; a transaction over several topics is atomic; a second producer with the same transactional.id
fences the first (whose next call fails as fenced, its open transaction aborted); transaction.timeout.ms
aborts a stalled transaction; consume-transform-produce with send_offsets_to_transaction outputs exactly the
transformed input and commits the input offsets exactly with the output. DescribeTransactions and
ListTransactions are checked at the wire and through kafka-python's admin client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.server.group_harness import Wire
from tests.server.txn_support import CLIENTS, TxnProducer, create_topics, fenced_errors, read_values

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {"num.partitions": 1, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture
def producers() -> Iterator[list[TxnProducer]]:
    made: list[TxnProducer] = []
    yield made
    for producer in made:
        producer.close()


def new_producer(made: list[TxnProducer], client: str, broker: Broker, txn_id: str, **kw: Any) -> TxnProducer:
    producer = TxnProducer(client, broker.bootstrap_servers, txn_id, **kw)
    made.append(producer)
    producer.init()
    return producer


def describe(broker: Broker, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
    wire = Wire(broker.bootstrap_servers)
    try:
        response = wire.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0)
        assert isinstance(response, DescribeTransactionsResponse)
        (state,) = response.transaction_states
        return state
    finally:
        wire.close()


def wait_for_state(broker: Broker, transactional_id: str, state: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        current = describe(broker, transactional_id).transaction_state
        if current == state:
            return
        assert time.monotonic() < deadline, f"{transactional_id} stays {current}, expected {state}"
        time.sleep(0.05)


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_is_visible_and_abort_only_to_read_uncommitted(
    broker: Broker, topic: str, client: str, producers: list[TxnProducer]
) -> None:
    create_topics(broker.bootstrap_servers, {topic: 1})
    producer = new_producer(producers, client, broker, f"{topic}-txn")
    producer.begin()
    for i in range(5):
        producer.send(topic, 0, b"committed-%d" % i)
    producer.commit()
    producer.begin()
    for i in range(3):
        producer.send(topic, 0, b"aborted-%d" % i)
    producer.flush()  # on the broker before the abort (clients drop unsent records on abort)
    producer.abort()
    producer.begin()
    producer.send(topic, 0, b"after")
    producer.commit()
    tp = (topic, 0)
    committed = [b"committed-%d" % i for i in range(5)] + [b"after"]
    assert read_values(broker.bootstrap_servers, [tp], committed=True)[tp] == committed
    assert read_values(broker.bootstrap_servers, [tp], committed=False)[tp] == (
        committed[:5] + [b"aborted-%d" % i for i in range(3)] + [b"after"]
    )
    state = describe(broker, f"{topic}-txn")
    assert (state.error_code, state.transaction_state, state.topics) == (ErrorCode.NONE, "CompleteCommit", [])


def test_read_committed_consumer_waits_behind_an_open_transaction(
    broker: Broker, topic: str, producers: list[TxnProducer]
) -> None:
    import confluent_kafka

    create_topics(broker.bootstrap_servers, {topic: 1})
    producer = new_producer(producers, "confluent-kafka", broker, f"{topic}-txn")
    producer.begin()
    for i in range(3):
        producer.send(topic, 0, b"txn-%d" % i)
    producer.flush()
    plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    plain.produce(topic, value=b"plain", partition=0)
    assert plain.flush(10) == 0

    got: list[bytes] = []
    done = threading.Event()

    def consume() -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": "waiter",
                "isolation.level": "read_committed",
                "log_level": 0,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        try:
            while len(got) < 4 and time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    got.append(message.value())
        finally:
            consumer.close()
            done.set()

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(1.5)
    assert got == []  # everything, the plain record too, is behind the open transaction
    producer.commit()
    reader.join(25)
    assert done.is_set()
    assert got == [b"txn-0", b"txn-1", b"txn-2", b"plain"]


def test_a_transaction_over_several_topics_is_atomic(
    broker: Broker, topic: str, producers: list[TxnProducer]
) -> None:
    topics = {f"{topic}-a": 2, f"{topic}-b": 3}
    create_topics(broker.bootstrap_servers, topics)
    partitions = [(t, p) for t, n in topics.items() for p in range(n)]
    producer = new_producer(producers, "confluent-kafka", broker, f"{topic}-txn")
    for round_ in range(4):
        producer.begin()
        for t, p in partitions:
            producer.send(t, p, b"%d:%s:%d" % (round_, t.encode(), p))
        producer.flush()
        if round_ % 2:
            producer.abort()
        else:
            producer.commit()
    committed = read_values(broker.bootstrap_servers, partitions, committed=True)
    uncommitted = read_values(broker.bootstrap_servers, partitions, committed=False)
    for t, p in partitions:
        assert committed[(t, p)] == [b"%d:%s:%d" % (r, t.encode(), p) for r in (0, 2)]
        assert uncommitted[(t, p)] == [b"%d:%s:%d" % (r, t.encode(), p) for r in range(4)]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_second_producer_fences_the_first(
    broker: Broker, topic: str, client: str, producers: list[TxnProducer]
) -> None:
    create_topics(broker.bootstrap_servers, {topic: 1})
    txn_id = f"{topic}-txn"
    zombie = new_producer(producers, client, broker, txn_id)
    zombie.begin()
    zombie.send(topic, 0, b"zombie")
    zombie.flush()
    successor = new_producer(producers, client, broker, txn_id)  # aborts the zombie's transaction
    zombie.send(topic, 0, b"zombie-2")  # clients learn of the fencing at their next request
    with pytest.raises(fenced_errors(client)) as raised:
        zombie.commit()
    assert "fenc" in str(raised.value).lower() or "epoch" in str(raised.value).lower(), raised.value
    successor.begin()
    successor.send(topic, 0, b"successor")
    successor.commit()
    tp = (topic, 0)
    assert read_values(broker.bootstrap_servers, [tp], committed=True)[tp] == [b"successor"]
    assert read_values(broker.bootstrap_servers, [tp], committed=False)[tp] == [b"zombie", b"successor"]


def test_transaction_timeout_aborts_a_stalled_transaction(
    broker: Broker, topic: str, producers: list[TxnProducer]
) -> None:
    create_topics(broker.bootstrap_servers, {topic: 1})
    txn_id = f"{topic}-txn"
    producer = new_producer(producers, "confluent-kafka", broker, txn_id, timeout_ms=1000)
    producer.begin()
    producer.send(topic, 0, b"stalled")
    producer.flush()
    assert describe(broker, txn_id).transaction_state == "Ongoing"
    wait_for_state(broker, txn_id, "CompleteAbort", timeout=10)
    state = describe(broker, txn_id)
    tp = (topic, 0)
    assert read_values(broker.bootstrap_servers, [tp], committed=True)[tp] == []
    assert read_values(broker.bootstrap_servers, [tp], committed=False)[tp] == [b"stalled"]
    with pytest.raises(fenced_errors("confluent-kafka")):
        producer.commit()  # its epoch was bumped by the abort
    assert state.producer_epoch >= 1


@pytest.mark.parametrize("client", CLIENTS)
def test_consume_transform_produce_commits_input_offsets_with_the_output(
    broker: Broker, topic: str, client: str, producers: list[TxnProducer]
) -> None:
    import confluent_kafka

    source, sink, group = f"{topic}-in", f"{topic}-out", f"{topic}-group"
    create_topics(broker.bootstrap_servers, {source: 2, sink: 2})
    plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    inputs = {p: [b"v-%d-%d" % (p, i) for i in range(30)] for p in range(2)}
    for p, values in inputs.items():
        for value in values:
            plain.produce(source, value=value, partition=p)
    assert plain.flush(10) == 0

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    producer = new_producer(producers, client, broker, f"{topic}-txn")
    try:
        consumer.subscribe([source])
        seen = 0
        batch = 0
        deadline = time.monotonic() + 40
        while seen < 60:
            assert time.monotonic() < deadline, f"consumed {seen} of 60"
            messages = consumer.consume(10, 0.5)
            messages = [m for m in messages if m.error() is None]
            if not messages:
                continue
            producer.begin()
            positions: dict[tuple[str, int], int] = {}
            for m in messages:
                producer.send(sink, m.partition(), m.value().upper())
                positions[(m.topic(), m.partition())] = m.offset() + 1
            producer.send_offsets(group, positions, consumer)
            if batch == 1:  # one transaction aborted: its output disappears, its input is read again
                producer.flush()
                producer.abort()
                for t, p in positions:
                    first = min(m.offset() for m in messages if m.partition() == p)
                    consumer.seek(confluent_kafka.TopicPartition(t, p, first))
            else:
                producer.commit()
                seen += len(messages)
            batch += 1
    finally:
        consumer.close()
    out = read_values(broker.bootstrap_servers, [(sink, 0), (sink, 1)], committed=True)
    for p in range(2):
        assert out[(sink, p)] == [v.upper() for v in inputs[p]]
    committed = offsets_of(broker, group, source)
    assert committed == {0: 30, 1: 30}


def offsets_of(broker: Broker, group: str, topic: str) -> dict[int, int]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 0}
    )
    try:
        tps = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(2)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def test_describe_and_list_transactions_at_the_wire(
    broker: Broker, topic: str, producers: list[TxnProducer]
) -> None:
    create_topics(broker.bootstrap_servers, {topic: 2})
    txn_id = f"{topic}-txn"
    producer = new_producer(producers, "confluent-kafka", broker, txn_id)
    producer.begin()
    producer.send(topic, 1, b"x")
    producer.flush()
    state = describe(broker, txn_id)
    assert (state.error_code, state.transaction_state, [(t.topic, t.partitions) for t in state.topics]) == (
        ErrorCode.NONE,
        "Ongoing",
        [(topic, [1])],
    )
    assert state.transaction_timeout_ms == 60_000
    assert state.transaction_start_time_ms > 0
    wire = Wire(broker.bootstrap_servers)
    try:
        for version in (0, 1):
            listed = wire.call(ListTransactionsRequest(state_filters=["Ongoing"]), version)
            assert isinstance(listed, ListTransactionsResponse)
            assert listed.error_code == ErrorCode.NONE
            assert (txn_id, state.producer_id, "Ongoing") in [
                (t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states
            ]
        listed = wire.call(ListTransactionsRequest(state_filters=["Bogus"], producer_id_filters=[-5]), 1)
        assert (listed.error_code, listed.unknown_state_filters, listed.transaction_states) == (
            ErrorCode.NONE,
            ["Bogus"],
            [],
        )
        unknown = wire.call(DescribeTransactionsRequest(transactional_ids=["never-used"]), 0)
        assert unknown.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    finally:
        wire.close()
    import kafka

    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        listed_by_broker = admin.list_transactions(state_filters=["Ongoing"])
        assert (txn_id, state.producer_id, "Ongoing") in [
            (t.transactional_id, t.producer_id, t.state.value) for t in listed_by_broker[1]
        ]
        described = admin.describe_transactions([txn_id])[txn_id]
        assert (described.coordinator_id, described.state.value, described.producer_epoch) == (
            1,
            "Ongoing",
            0,
        )
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {(topic, 1)}
    finally:
        admin.close()
    producer.commit()
    assert describe(broker, txn_id).transaction_state == "CompleteCommit"


def test_wire_find_coordinator_and_init_producer_id(broker: Broker) -> None:
    wire = Wire(broker.bootstrap_servers)
    try:
        for version in range(1, 4):
            found = wire.call(FindCoordinatorRequest(key="wire-txn", key_type=1), version)
            assert (found.error_code, found.node_id, found.port) == (ErrorCode.NONE, 1, broker.port)
        found = wire.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["a", "b"]), 4)
        assert [(c.key, c.error_code, c.node_id) for c in found.coordinators] == [
            ("a", ErrorCode.NONE, 1),
            ("b", ErrorCode.NONE, 1),
        ]
        epochs = []
        for version in range(6):
            response = wire.call(
                InitProducerIdRequest(transactional_id="wire-txn", transaction_timeout_ms=10_000), version
            )
            assert response.error_code == ErrorCode.NONE
            epochs.append((response.producer_id, response.producer_epoch))
        assert len({pid for pid, _ in epochs}) == 1
        assert [e for _, e in epochs] == list(range(6))  # each InitProducerId bumps the epoch
        too_long = wire.call(
            InitProducerIdRequest(transactional_id="wire-txn", transaction_timeout_ms=10**9), 4
        )
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    finally:
        wire.close()
