"""Real consumers of many partitions, each Fetch naming all of them (issue 17).

librdkafka (rotating the partitions' order by one each Fetch) and aiokafka (shuffling it) use no fetch
sessions: a consumer assigned 200 partitions names all 200 in every Fetch, every ``fetch.wait.max.ms`` while
idle. The broker answers such a fetch's idle partitions with the answer kept for each while its offsets stay,
watches them from the same look, and answers a wait that no change reached with its first read
(:mod:`tidelog.server.handlers.fetch`). Through rounds of idle polls (librdkafka: at least three Fetches
counted in its statistics before each round's records are written) and records written to a few partitions
chosen by a seeded random plan:

- confluent-kafka, read_uncommitted: the consumer reads exactly the records written, each partition's in
  the order written at offsets 0..n-1, nothing twice;
- aiokafka, read_committed, records written by a transactional producer, every other round aborted: it reads
  exactly the committed records, each partition's in order, none of the aborted ones.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from typing import Any

import aiokafka
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

PARTITIONS = 200
ROUNDS = 6
SEED = 1716


def round_plan(seed: int) -> list[list[tuple[int, str]]]:
    """Per round, (partition, value) in the order written: three records to each of seven partitions."""
    rng = random.Random(seed)
    return [
        [(p, f"r{r}-p{p}-{i}") for p in rng.sample(range(PARTITIONS), 7) for i in range(3)]
        for r in range(ROUNDS)
    ]


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == PARTITIONS:
            return
        time.sleep(0.05)
    raise AssertionError(f"{topic} never showed its {PARTITIONS} partitions")


def expected_by_partition(rounds: list[list[tuple[int, str]]]) -> dict[int, list[str]]:
    expected: dict[int, list[str]] = defaultdict(list)
    for records in rounds:
        for p, value in records:
            expected[p].append(value)
    return dict(expected)


def test_confluent_consumer_of_many_idle_partitions(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    plan = round_plan(SEED)
    fetches = [0]

    def on_stats(text: str) -> None:
        stats: dict[str, Any] = json.loads(text)
        fetches[0] = sum(b.get("req", {}).get("Fetch", 0) for b in stats.get("brokers", {}).values())

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
            "statistics.interval.ms": 50,
            "stats_cb": on_stats,
            "log_level": 3,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    got: dict[int, list[tuple[int, str]]] = defaultdict(list)

    def take(timeout: float) -> int:
        taken = 0
        for message in consumer.consume(1000, timeout):
            assert message.error() is None, message.error()
            got[message.partition()].append((message.offset(), message.value().decode()))
            taken += 1
        return taken

    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        written = 0
        for seed_round, records in enumerate(plan):
            idle_from = fetches[0]
            deadline = time.monotonic() + 60
            while fetches[0] < idle_from + 3:  # full fetches of all 200, idle (nothing new is written)
                assert time.monotonic() < deadline, f"round {seed_round}: the consumer stopped fetching"
                assert take(0.05) == 0, "records that were never written"
            for p, value in records:
                producer.produce(topic, value.encode(), partition=p)
            assert producer.flush(30) == 0
            written += len(records)
            deadline = time.monotonic() + 60
            while sum(len(v) for v in got.values()) < written:
                assert time.monotonic() < deadline, f"round {seed_round}: {written} written, {dict(got)} read"
                take(0.1)
        take(0.2)  # anything read twice would show here
    finally:
        consumer.close()

    expected = expected_by_partition(plan)
    assert {p: [value for _, value in records] for p, records in got.items()} == expected
    for p, records in got.items():
        assert [offset for offset, _ in records] == list(range(len(expected[p]))), p


def test_aiokafka_read_committed_consumer_of_many_partitions(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    plan = round_plan(SEED + 1)
    committed_rounds = [records for r, records in enumerate(plan) if r % 2 == 0]
    expected = expected_by_partition(committed_rounds)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "log_level": 3})
    producer.init_transactions(30)

    async def scenario() -> dict[int, list[str]]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            isolation_level="read_committed",
            fetch_max_wait_ms=20,
            enable_auto_commit=False,
        )
        await consumer.start()
        got: dict[int, list[str]] = defaultdict(list)
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()

            async def take(timeout_ms: int) -> int:
                batches = await consumer.getmany(timeout_ms=timeout_ms, max_records=1000)
                taken = 0
                for tp, messages in batches.items():
                    got[tp.partition].extend(m.value.decode() for m in messages)
                    taken += len(messages)
                return taken

            wanted = 0
            for r, records in enumerate(plan):
                for _ in range(3):  # idle polls: each waits its timeout out over fetches of all 200
                    assert await take(60) == 0, "records never committed"
                producer.begin_transaction()
                for p, value in records:
                    producer.produce(topic, value.encode(), partition=p)
                if r % 2 == 0:
                    producer.commit_transaction(30)
                    wanted += len(records)
                else:
                    producer.abort_transaction(30)
                deadline = time.monotonic() + 60
                while sum(len(v) for v in got.values()) < wanted:
                    assert time.monotonic() < deadline, f"round {r}: {wanted} committed, {dict(got)} read"
                    await take(100)
            await take(200)  # anything aborted or read twice would show here
        finally:
            await consumer.stop()
        return dict(got)

    got = asyncio.run(scenario())
    assert got == expected
