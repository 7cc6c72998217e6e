"""Incremental fetch sessions (KIP-227) with the client that uses them, kafka-python (Fetch v7+); librdkafka
and aiokafka send session id 0 with epoch -1 (no session) and are served by every other consumer test.

- One consumer assigned 1,000 partitions (200 in CI; 1,000 with ``--soak``), a handful of them written: it reads exactly the records written,
  in order, through one session whose epoch moved on (incremental fetches), both for records there before
  it started and for records written while it polls.
- Its session evicted mid-consume (a cache of one slot and an eviction time of 0 ms, and another consumer
  opening a session): the client's incremental fetch gets FETCH_SESSION_ID_NOT_FOUND, it starts over with a
  full fetch, and it still reads exactly the records written, none lost, none twice.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import kafka
import pytest
from kafka import TopicPartition

from tidelog.server.broker import Broker as InProcess
from tidelog.server.config import load_broker_config

pytestmark = [pytest.mark.timeout(180)]

T = TypeVar("T")
TOPIC = "wide"
WRITTEN = (0, 17, 150, 198)


class BrokerThread:
    """A broker on its own event loop in a thread; :meth:`call` runs a function on that loop."""

    def __init__(self, data_dir: Path, partitions: int, **settings: str) -> None:
        self.partitions = partitions
        config, _ = load_broker_config(
            None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), **settings}
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fetch-session-broker", daemon=True)
        self.thread.start()
        self.broker = asyncio.run_coroutine_threadsafe(self._start(config, partitions), self.loop).result(300)
        self.bootstrap = f"127.0.0.1:{self.broker.port}"

    @staticmethod
    async def _start(config: object, partitions: int) -> InProcess:
        broker = InProcess(config)  # type: ignore[arg-type]
        await broker.start()
        broker.admin.create_topic_now(TOPIC, partitions, 1, {})
        return broker

    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.broker.stop(grace_s=5), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module", params=[200, pytest.param(1000, marks=pytest.mark.soak)])
def live(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[BrokerThread]:
    broker = BrokerThread(
        tmp_path_factory.mktemp("sessions"),
        request.param,
        **{
            "max.incremental.fetch.session.cache.slots": "1",
            "min.incremental.fetch.session.eviction.ms": "0",
        },
    )
    yield broker
    broker.stop()


def produce(live: BrokerThread, label: str) -> dict[int, list[bytes]]:
    producer = kafka.KafkaProducer(bootstrap_servers=live.bootstrap, acks=1, linger_ms=0)
    written: dict[int, list[bytes]] = {}
    for p in WRITTEN:
        for i in range(3):
            value = f"{label}-{p}-{i}".encode()
            producer.send(TOPIC, value=value, partition=p)
            written.setdefault(p, []).append(value)
    producer.flush(30)
    producer.close(5)
    return written


def consumer_of_all(live: BrokerThread) -> kafka.KafkaConsumer:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=live.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        request_timeout_ms=30_000,
    )
    consumer.assign([TopicPartition(TOPIC, p) for p in range(live.partitions)])
    consumer.seek_to_beginning()
    return consumer


def read(consumer: kafka.KafkaConsumer, count: int) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {}
    n = 0
    deadline = time.monotonic() + 60
    while n < count:
        assert time.monotonic() < deadline, f"read {n} of {count}: {got}"
        for tp, records in consumer.poll(timeout_ms=200).items():
            got.setdefault(tp.partition, []).extend(r.value for r in records)
            n += len(records)
    extra = consumer.poll(timeout_ms=200)  # nothing more: none twice
    assert extra == {}
    return got


def the_session(live: BrokerThread) -> tuple[int, int, int]:
    """(session id, its next epoch, its partitions) of the one session in the cache."""

    def look() -> tuple[int, int, int]:
        sessions = live.broker.fetch_sessions
        (session,) = [sessions.get(sid) for sid in sessions.session_ids()]
        assert session is not None
        return session.id, session.epoch, len(session.partitions)

    return live.call(look)


def test_a_consumer_of_a_thousand_partitions_reads_through_incremental_fetches(live: BrokerThread) -> None:
    before = produce(live, "before")
    consumer = consumer_of_all(live)
    try:
        assert read(consumer, 12) == before
        session_id, epoch, size = the_session(live)
        assert size == live.partitions
        assert epoch > 2  # incremental fetches in that session
        during = produce(live, "during")
        assert read(consumer, 12) == during
        later_id, later_epoch, _ = the_session(live)
        assert (later_id, later_epoch > epoch) == (session_id, True)
    finally:
        consumer.close()


def test_an_evicted_session_is_reopened_with_a_full_fetch_and_nothing_is_lost(live: BrokerThread) -> None:
    consumer = consumer_of_all(live)
    other = kafka.KafkaConsumer(bootstrap_servers=live.bootstrap, group_id=None, fetch_max_wait_ms=50)
    try:
        everything = read(consumer, 24)
        assert {p: len(v) for p, v in everything.items()} == dict.fromkeys(WRITTEN, 6)
        session_id, _, _ = the_session(live)
        evictions = live.call(lambda: live.broker.fetch_sessions.evictions)
        other.assign([TopicPartition(TOPIC, p) for p in range(live.partitions)])  # a bigger session evicts it
        other.seek_to_beginning()
        assert sum(len(r) for r in other.poll(timeout_ms=5000).values()) > 0
        assert live.call(lambda: live.broker.fetch_sessions.get(session_id)) is None
        assert live.call(lambda: live.broker.fetch_sessions.evictions) > evictions
        other.close()
        after = produce(live, "after")
        assert read(consumer, 12) == after
        reopened, _, size = the_session(live)
        assert (reopened != session_id, size) == (True, live.partitions)
    finally:
        consumer.close()
