"""Continuous load from real clients while faults happen, recorded in a :class:`~tests.cluster.checker.History`.

A :class:`Workload` runs, each in a thread of its own:

- producers (:class:`ProducerSpec`): confluent-kafka (acks=all, idempotent or not), kafka-python or
  aiokafka, each sending its own deterministic values ``label/name/seq`` (seq 0, 1, 2, ...) round-robin
  over the topic's partitions at a steady rate; every value is recorded as sent before the client has it,
  then as acknowledged (partition, offset) or failed (the error the client reported);
- readers (``"confluent"``, ``"kafka-python"``): a consumer assigned every partition from the beginning,
  recording each record it reads (partition, offset, value). A confluent-kafka reader whose librdkafka
  deadlocks (:class:`ClientLiveness`) is abandoned and a new consumer resumes after the last record read,
  with an event saying so.

Invariants: no thread decides anything by wall-clock sleeps beyond pacing its own rate; :meth:`stop`
stops sending, flushes (every value sent gets its outcome, or stays unknown if the flush times out) and
joins every thread; an exception in a client thread is re-raised by :meth:`stop` (and by the waits).
The only randomness is the ``random.Random`` passed in (the scenario's seed).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tests.cluster.checker import History, seed_banner

__all__ = [
    "ClientLiveness",
    "ClientThread",
    "ProducerSpec",
    "Workload",
    "abandon",
    "confluent_producer_config",
]


def abandon(client: object) -> None:
    """Leave a deadlocked confluent-kafka client alive for good: destroying it (its ``close()``, or its
    deallocation, even by the interpreter's final collection at exit) would block the destroying thread on
    the lock its own threads hold, so it gets a reference nothing ever releases."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(client))


class ClientLiveness:
    """Whether a confluent-kafka client's librdkafka main thread still runs, from the statistics it emits
    every ``statistics.interval.ms`` (:meth:`beat` is its ``stats_cb``, served by the application's
    ``consume()``/``poll()``): none for ``stalled_after`` seconds while the application keeps polling means
    that thread is blocked for good.

    librdkafka 2.16 deadlocks so when a leader dies while an OffsetForLeaderEpoch request (KIP-320 offset
    validation) to it is in flight (confluentinc/librdkafka#5476, fix proposed in #5304): ``rdk:main``,
    failing that request, holds the partition's lock and waits for the handle's write lock, while the dead
    broker's thread, being decommissioned, holds the handle's read lock and waits for the partition's lock.
    The client then never fetches again and never answers its statistics, whatever the brokers do. Seen in
    this suite as a reader that stopped at the first leader kill (a native backtrace of both threads confirmed
    it). The application's side is what a user would do too: replace the client."""

    def __init__(self, stalled_after: float = 15.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._stalled_after = stalled_after
        self._clock = clock
        self._last = clock()

    def beat(self, _stats: str = "") -> None:
        self._last = self._clock()

    def stalled(self) -> bool:
        return self._clock() - self._last > self._stalled_after


class ClientThread:
    """A client application in a daemon thread: :meth:`run` until :attr:`stopping` is set; :meth:`stop`
    joins it and re-raises whatever ended it early."""

    def __init__(self, name: str, join_timeout: float = 60.0) -> None:
        self.stopping = threading.Event()
        self._join_timeout = join_timeout
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> ClientThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(self._join_timeout)
        if self._error is not None:
            raise self._error

    def run(self) -> None:
        raise NotImplementedError

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self._error = exc


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    name: str
    client: str = "confluent"  # "confluent" | "kafka-python" | "aiokafka"
    idempotent: bool = True
    rate: float = 150.0  # messages per second
    config: tuple[tuple[str, object], ...] = ()


def confluent_producer_config(bootstrap: str, *, idempotent: bool, **extra: object) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        "message.timeout.ms": 60_000,
        "retry.backoff.ms": 100,
        "retry.backoff.max.ms": 500,
        "reconnect.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 2000,
        "log_level": 3,
        **extra,
    }


class Workload:
    """Producers and readers over one topic; a context manager (start on enter, stop on exit)."""

    def __init__(
        self,
        history: History,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        producers: Sequence[ProducerSpec] = (
            ProducerSpec("idem"),
            ProducerSpec("plain", idempotent=False),
        ),
        readers: Sequence[str] = ("confluent",),
        rng: random.Random | None = None,
        flush_timeout: float = 60.0,
    ) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producers = list(producers)
        self.readers = list(readers)
        self.rng = rng or random.Random(history.seed)
        self.flush_timeout = flush_timeout
        self._stop_sending = threading.Event()
        self._stop_reading = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self.unflushed: dict[str, int] = {}
        self.sent_by: dict[str, int] = {}

    # ---- lifecycle ----

    def start(self) -> Workload:
        for spec in self.producers:
            run = {
                "confluent": self._confluent_producer,
                "kafka-python": self._kafka_python_producer,
                "aiokafka": self._aiokafka_producer,
            }[spec.client]
            self._spawn(f"producer-{spec.name}", lambda run=run, spec=spec: run(spec))
        for index, kind in enumerate(self.readers):
            run_reader = {"confluent": self._confluent_reader, "kafka-python": self._kafka_python_reader}[
                kind
            ]
            self._spawn(f"reader-{index}-{kind}", run_reader)
        return self

    def stop_producing(self) -> None:
        """Stop sending and wait for every producer's flush."""
        self._stop_sending.set()
        for thread in self._threads:
            if thread.name.startswith("producer-"):
                thread.join(self.flush_timeout + 30)
        self._raise_errors()

    def stop(self) -> None:
        """Stop producers (flushing) and readers; re-raise a client thread's exception."""
        self._stop_sending.set()
        for thread in self._threads:
            if thread.name.startswith("producer-"):
                thread.join(self.flush_timeout + 30)
        self._stop_reading.set()
        for thread in self._threads:
            thread.join(30)
        self._raise_errors()

    def __enter__(self) -> Workload:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Producers stop at the end of the block; readers go on until :meth:`stop` (the scenario's
        verify stops them once they have read up to the final high watermarks)."""
        if exc[0] is None:
            self.stop_producing()
        else:
            self.stop()

    # ---- waiting on progress ----

    def wait_acked(self, count: int, what: str, timeout: float = 60.0, producer: str | None = None) -> None:
        """Until ``count`` more acknowledgements (of ``producer``, or of anyone) than now."""
        current = (
            (lambda: self.history.acked_by(producer)) if producer else (lambda: self.history.acked_count)
        )
        target = current() + count
        self.wait_until(lambda: current() >= target, f"{count} more acknowledgements ({what})", timeout)

    def wait_read_up_to(self, high_watermarks: Mapping[int, int], timeout: float = 60.0) -> None:
        """Until the readers have read the record just below each partition's given high watermark."""
        if not self.readers:
            return

        def caught_up() -> bool:
            reads = self.history.reads
            return all(
                hw == 0 or hw - 1 in reads.get((self.topic, p), {}) for p, hw in high_watermarks.items()
            )

        self.wait_until(
            caught_up, f"the readers to reach the high watermarks {dict(high_watermarks)}", timeout
        )

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            self._raise_errors()
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout:g} s waiting for {what}\n{seed_banner(self.history.seed)}\n"
                    f"{self.history.summary()}"
                )
            time.sleep(0.05)

    # ---- threads ----

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except BaseException as exc:
                self._errors.append(exc)

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _raise_errors(self) -> None:
        if self._errors:
            raise self._errors[0]

    def _paced(self, spec: ProducerSpec) -> Iterator[int]:
        """Sequence numbers at ``spec.rate`` per second until told to stop (pacing, not synchronisation)."""
        interval = 1.0 / spec.rate
        next_at = time.monotonic()
        seq = 0
        while not self._stop_sending.is_set():
            now = time.monotonic()
            if now < next_at:
                yield -1  # nothing due: the caller polls its client meanwhile
                continue
            yield seq
            seq += 1
            next_at += interval
            if now - next_at > 1.0:  # fell behind (a paused client thread): do not burst
                next_at = now
        self.sent_by[spec.name] = seq

    def _confluent_producer(self, spec: ProducerSpec) -> None:
        from confluent_kafka import KafkaError, Message, Producer

        history, topic = self.history, self.topic
        producer = Producer(
            confluent_producer_config(self.bootstrap, idempotent=spec.idempotent, **dict(spec.config))
        )

        def report(value: bytes) -> Callable[[KafkaError | None, Message], None]:
            def on_delivery(err: KafkaError | None, msg: Message) -> None:
                if err is None:
                    history.record_ack(spec.name, value, topic, msg.partition(), msg.offset())
                else:
                    history.record_failure(spec.name, value, err.name(), fatal=err.fatal())

            return on_delivery

        for seq in self._paced(spec):
            if seq < 0:
                producer.poll(0.005)
                continue
            value = history.value(spec.name, seq)
            history.record_sent(spec.name, value, idempotent=spec.idempotent)
            while True:
                try:
                    producer.produce(
                        topic, value=value, partition=seq % self.partitions, on_delivery=report(value)
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        self.unflushed[spec.name] = producer.flush(self.flush_timeout)

    def _kafka_python_producer(self, spec: ProducerSpec) -> None:
        from kafka import KafkaProducer

        history, topic = self.history, self.topic
        config: dict[str, object] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "acks": "all",
            "enable_idempotence": spec.idempotent,
            "linger_ms": 5,
            "retries": 1_000_000,
            "retry_backoff_ms": 100,
            "delivery_timeout_ms": 60_000,
            "request_timeout_ms": 10_000,
            "metadata_max_age_ms": 2000,
        }
        config.update(dict(spec.config))
        producer = KafkaProducer(**config)

        def on_ack(value: bytes) -> Callable[[object], None]:
            def ok(metadata: object) -> None:
                history.record_ack(spec.name, value, topic, metadata.partition, metadata.offset)  # type: ignore[attr-defined]

            return ok

        def on_error(value: bytes) -> Callable[[BaseException], None]:
            def failed(exc: BaseException) -> None:
                history.record_failure(spec.name, value, type(exc).__name__)

            return failed

        try:
            for seq in self._paced(spec):
                if seq < 0:
                    time.sleep(0.002)
                    continue
                value = history.value(spec.name, seq)
                history.record_sent(spec.name, value, idempotent=spec.idempotent)
                future = producer.send(topic, value=value, partition=seq % self.partitions)
                future.add_callback(on_ack(value))
                future.add_errback(on_error(value))
            producer.flush(self.flush_timeout)
        finally:
            producer.close(timeout=5)

    def _aiokafka_producer(self, spec: ProducerSpec) -> None:
        from aiokafka import AIOKafkaProducer

        history, topic = self.history, self.topic

        async def run() -> None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                acks="all",
                enable_idempotence=spec.idempotent,
                linger_ms=5,
                request_timeout_ms=60_000,
                retry_backoff_ms=100,
                metadata_max_age_ms=2000,
                **dict(spec.config),
            )
            await producer.start()
            pending: set[asyncio.Future[object]] = set()

            def done(value: bytes) -> Callable[[asyncio.Future[object]], None]:
                def finished(future: asyncio.Future[object]) -> None:
                    pending.discard(future)
                    if future.cancelled():
                        history.record_failure(spec.name, value, "cancelled")
                    elif (exc := future.exception()) is not None:
                        history.record_failure(spec.name, value, type(exc).__name__)
                    else:
                        metadata = future.result()
                        history.record_ack(spec.name, value, topic, metadata.partition, metadata.offset)  # type: ignore[attr-defined]

                return finished

            try:
                for seq in self._paced(spec):
                    if seq < 0:
                        await asyncio.sleep(0.002)
                        continue
                    value = history.value(spec.name, seq)
                    history.record_sent(spec.name, value, idempotent=spec.idempotent)
                    future = await producer.send(topic, value=value, partition=seq % self.partitions)
                    pending.add(future)
                    future.add_done_callback(done(value))
                if pending:
                    await asyncio.wait(pending, timeout=self.flush_timeout)
            finally:
                await producer.stop()

        asyncio.run(run())

    def _confluent_reader(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        next_offsets: dict[int, int] = {}  # per partition, the offset after the last record read

        def new_consumer() -> tuple[Consumer, ClientLiveness]:
            liveness = ClientLiveness()
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": "tidelog-cluster-reader",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_uncommitted",
                    "topic.metadata.refresh.interval.ms": 2000,
                    "statistics.interval.ms": 1000,
                    "stats_cb": liveness.beat,
                    "log_level": 3,
                }
            )
            consumer.assign(
                [
                    TopicPartition(self.topic, p, next_offsets.get(p, OFFSET_BEGINNING))
                    for p in range(self.partitions)
                ]
            )
            return consumer, liveness

        consumer, liveness = new_consumer()
        try:
            while not self._stop_reading.is_set():
                for msg in consumer.consume(200, 0.2):
                    if msg.error():
                        self.history.event(f"reader: {msg.error().name()} on partition {msg.partition()}")
                    else:
                        self.history.record_read(msg.topic(), msg.partition(), msg.offset(), msg.value())
                        next_offsets[msg.partition()] = msg.offset() + 1
                if liveness.stalled():
                    self.history.event(
                        "reader: librdkafka deadlocked (no statistics for 15 s, confluentinc/librdkafka#5476);"
                        f" a new consumer resumes at {dict(sorted(next_offsets.items()))}"
                    )
                    abandon(consumer)
                    consumer, liveness = new_consumer()
        finally:
            consumer.close()

    def _kafka_python_reader(self) -> None:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KafkaTopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=2000,
            request_timeout_ms=20_000,
        )
        try:
            tps = [KafkaTopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            while not self._stop_reading.is_set():
                for tp, records in consumer.poll(timeout_ms=200).items():
                    for record in records:
                        self.history.record_read(tp.topic, tp.partition, record.offset, record.value)
        finally:
            with contextlib.suppress(Exception):
                consumer.close()
