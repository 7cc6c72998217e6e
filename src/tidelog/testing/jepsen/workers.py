"""The checker's clients: idempotent producers of the three Python Kafka clients, a transactional
producer, and consumers, each a thread that records what it does and is told into a shared
:class:`~tidelog.testing.jepsen.history.History`.

Invariants:

- A value is recorded as sent before the client library gets it, and its acknowledgement (with the
  offset the client was told) or failure only from the client's own callback or future.
- Producers pick the partition themselves (``seq % partitions``), so the three clients' partitioners play
  no part; a producer told a fatal error records it and stops (it cannot go on by Kafka's rules).
- A transaction's values are recorded with its id; acknowledgements inside a transaction are not
  recorded (a transaction is acknowledged by its commit); its outcome is ``commit`` or ``abort`` when the
  client was told so, ``unknown`` when a fault left it unable to tell.
- A consumer records every record it gets, with the offset, from an assignment of all partitions from
  the beginning (no group), and stops once :meth:`Consumer.drain` was given targets and its position
  reached every one of them (or the drain timeout passed: :attr:`Worker.errors` says so).
- kafka-python and aiokafka are imported only when their worker runs (they are test dependencies).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tidelog.testing.jepsen.history import History

__all__ = [
    "AiokafkaProducer",
    "ConfluentConsumer",
    "ConfluentProducer",
    "ConfluentTransactions",
    "KafkaPythonProducer",
    "Worker",
]

BURST = 2  # values per send burst
PACE = 0.02  # seconds between bursts
FLUSH_SECONDS = 60.0


class Worker:
    """A client in its own thread: :meth:`start`, :meth:`stop` (finish what is in flight), :meth:`join`."""

    def __init__(self, name: str, history: History, bootstrap: str) -> None:
        self.name = name
        self.history = history
        self.bootstrap = bootstrap
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"jepsen-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append(f"{self.name} did not finish within {timeout:g} s")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _main(self) -> None:
        try:
            self.run()
        except Exception as exc:  # noqa: BLE001 - reported by the runner
            self.errors.append(f"{self.name} crashed: {exc!r}")

    def run(self) -> None:
        raise NotImplementedError


class _Producer(Worker):
    def __init__(self, name: str, history: History, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name, history, bootstrap)
        self.topic = topic
        self.partitions = partitions
        self.seq = 0

    def next_value(self) -> tuple[int, bytes]:
        partition = self.seq % self.partitions
        value = History.value(self.name, self.seq)
        self.seq += 1
        self.history.send(self.name, self.topic, partition, value)
        return partition, value

    def acked(self, partition: int, offset: int | None, value: bytes) -> None:
        self.history.ack(self.name, self.topic, partition, offset, value)


class ConfluentProducer(_Producer):
    """confluent-kafka (librdkafka), ``enable.idempotence=true``, acks=all."""

    def run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "retry.backoff.ms": 50,
                "retry.backoff.max.ms": 500,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 500,
                "log_level": 0,
            }
        )
        fatal: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            value: bytes = msg.value()
            if err is not None:
                self.history.fail(self.name, value, err.name(), fatal=err.fatal())
                if err.fatal():
                    fatal.append(err.name())
                return
            self.acked(msg.partition(), msg.offset(), value)

        while not self.stopping and not fatal:
            for _ in range(BURST):
                partition, value = self.next_value()
                while True:
                    try:
                        producer.produce(
                            self.topic, value=value, partition=partition, on_delivery=on_delivery
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.poll(PACE)
        left = producer.flush(FLUSH_SECONDS)
        if left:
            self.errors.append(f"{self.name}: {left} messages neither acknowledged nor failed")


class KafkaPythonProducer(_Producer):
    """kafka-python, ``enable_idempotence=True``, acks=all."""

    def run(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError as PythonKafkaError

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            delivery_timeout_ms=120_000,
            request_timeout_ms=10_000,
            retry_backoff_ms=50,
            reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=500,
        )
        try:
            while not self.stopping:
                for _ in range(BURST):
                    partition, value = self.next_value()
                    try:
                        future = producer.send(self.topic, value=value, partition=partition)
                    except PythonKafkaError as exc:
                        self.history.fail(self.name, value, type(exc).__name__, fatal=True)
                        return
                    future.add_callback(self._on_ack, value)
                    future.add_errback(self._on_error, value)
                time.sleep(PACE)
            producer.flush(FLUSH_SECONDS)
        finally:
            producer.close(timeout=10)

    def _on_ack(self, value: bytes, metadata: Any) -> None:
        self.acked(metadata.partition, metadata.offset, value)

    def _on_error(self, value: bytes, exc: BaseException) -> None:
        self.history.fail(self.name, value, type(exc).__name__)


class AiokafkaProducer(_Producer):
    """aiokafka, ``enable_idempotence=True`` (acks=all), in its own event loop."""

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=60_000,
            retry_backoff_ms=50,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                await producer.start()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        pending: set[asyncio.Future[Any]] = set()
        try:
            while not self.stopping:
                for _ in range(BURST):
                    partition, value = self.next_value()
                    future = await producer.send(self.topic, value=value, partition=partition)
                    pending.add(future)
                    future.add_done_callback(lambda f, v=value: self._done(f, v, pending))
                await asyncio.sleep(PACE)
            if pending:
                await asyncio.wait(pending, timeout=FLUSH_SECONDS)
            if pending:
                self.errors.append(f"{self.name}: {len(pending)} sends neither acknowledged nor failed")
        finally:
            await producer.stop()

    def _done(self, future: asyncio.Future[Any], value: bytes, pending: set[asyncio.Future[Any]]) -> None:
        pending.discard(future)
        exc = future.exception()
        if exc is not None:
            self.history.fail(self.name, value, type(exc).__name__)
            return
        metadata = future.result()
        self.acked(metadata.partition, metadata.offset, value)


class ConfluentTransactions(_Producer):
    """confluent-kafka transactional producer: transactions of 2-6 values over the topic's partitions,
    committed or (one in four, by the seeded ``rng``) aborted."""

    def __init__(
        self, name: str, history: History, bootstrap: str, topic: str, partitions: int, rng: random.Random
    ) -> None:
        super().__init__(name, history, bootstrap, topic, partitions)
        self.rng = rng
        self.producer: Producer | None = None

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"jepsen-{self.name}",
                # librdkafka 2.16 re-bootstraps after a single broker restarts and may then never send
                # the next transactional request (see README, Delivery guarantees)
                "metadata.recovery.strategy": "none",
                "transaction.timeout.ms": 60_000,
                "message.timeout.ms": 60_000,
                "linger.ms": 5,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 500,
                "log_level": 0,
            }
        )
        self._retry(lambda: producer.init_transactions(10))
        return producer

    def _retry(self, call: Any, seconds: float = 60.0) -> None:
        deadline = time.monotonic() + seconds
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or time.monotonic() > deadline:
                    raise

    def run(self) -> None:
        producer = self._new_producer()
        number = 0
        while not self.stopping:
            txn = f"{self.name}-{number}"
            number += 1
            commit = self.rng.random() >= 0.25
            values = []
            try:
                self._retry(producer.begin_transaction)
                for _ in range(self.rng.randint(2, 6)):
                    partition = self.seq % self.partitions
                    value = History.value(self.name, self.seq)
                    self.seq += 1
                    self.history.send(self.name, self.topic, partition, value, txn=txn)
                    values.append(value)
                    producer.produce(self.topic, value=value, partition=partition)
                    producer.poll(0)
                outcome = self._finish(producer, commit)
            except KafkaException as exc:
                err = exc.args[0]
                self.history.fail(self.name, None, f"{txn}: {err.name()}", fatal=err.fatal())
                outcome = "unknown"
                if err.fatal():
                    self.history.txn(self.name, txn, outcome, values)
                    return
                producer = self._new_producer()  # the next init_transactions resolves this one
            self.history.txn(self.name, txn, outcome, values)
            time.sleep(PACE)

    def _finish(self, producer: Producer, commit: bool) -> str:
        if not commit:
            self._retry(lambda: producer.abort_transaction(10))
            return "abort"
        deadline = time.monotonic() + 60
        while True:
            try:
                producer.commit_transaction(10)
                return "commit"
            except KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    self._retry(lambda: producer.abort_transaction(10))
                    return "abort"
                if not err.retriable() or time.monotonic() > deadline:
                    raise


class ConfluentConsumer(Worker):
    """confluent-kafka consumer of every partition of ``topic`` from the beginning (no group)."""

    def __init__(
        self, name: str, history: History, bootstrap: str, topic: str, partitions: int, isolation_level: str
    ) -> None:
        super().__init__(name, history, bootstrap)
        self.topic = topic
        self.partitions = partitions
        self.isolation_level = isolation_level
        self._targets: dict[int, int] | None = None
        self._drain_deadline = 0.0

    def drain(self, targets: Mapping[int, int], timeout: float = 60.0) -> None:
        """Stop once the position of each partition reached ``targets[partition]``."""
        self._drain_deadline = time.monotonic() + timeout
        self._targets = dict(targets)
        self.stop()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "tidelog-jepsen-unused",  # assign only: never joined or committed
                "enable.auto.commit": False,
                "isolation.level": self.isolation_level,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 500,
                "log_level": 0,
            }
        )
        partitions = [KafkaTopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)]
        consumer.assign(partitions)
        try:
            while True:
                for msg in consumer.consume(200, 0.2):
                    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                    if (
                        msg.error() is None
                        and topic is not None
                        and partition is not None
                        and offset is not None
                    ):
                        self.history.read(self.name, topic, partition, offset, msg.value())
                if self.stopping and self._reached(consumer):
                    return
        finally:
            consumer.close()

    def _reached(self, consumer: Consumer) -> bool:
        targets = self._targets
        if targets is None:
            return False
        positions = consumer.position([KafkaTopicPartition(self.topic, p) for p in range(self.partitions)])
        behind = {
            tp.partition: (tp.offset, targets.get(tp.partition, 0))
            for tp in positions
            if max(tp.offset, 0) < targets.get(tp.partition, 0)
        }
        if not behind:
            return True
        if time.monotonic() > self._drain_deadline:
            self.errors.append(f"{self.name} did not reach the high watermarks: (position, target) {behind}")
            return True
        return False
