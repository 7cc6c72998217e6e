"""Transactional producers of the three clients behind one blocking interface, and read_committed /
read_uncommitted readers, for the transaction tests.

``TxnProducer``: ``init()``, ``begin()``, ``send(topic, partition, value)``, ``flush()``, ``commit()``,
``abort()``, ``send_offsets(group_id, offsets)``, ``close()``. confluent-kafka and kafka-python are
synchronous; aiokafka runs on an event loop owned by the wrapper. ``fenced_errors(client)`` names the
exception types a fenced producer raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


class TxnProducer:
    def __init__(
        self, client: str, bootstrap: str, transactional_id: str, *, timeout_ms: int = 60_000
    ) -> None:
        self.client = client
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[Any] = []
        if client == "confluent-kafka":
            import confluent_kafka

            self._p: Any = confluent_kafka.Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "transactional.id": transactional_id,
                    "transaction.timeout.ms": timeout_ms,
                    "linger.ms": 5,
                    "log_level": 0,
                }
            )
        elif client == "kafka-python":
            import kafka

            self._p = kafka.KafkaProducer(
                bootstrap_servers=bootstrap,
                transactional_id=transactional_id,
                transaction_timeout_ms=timeout_ms,
                linger_ms=5,
            )
        else:
            import aiokafka

            self._loop = asyncio.new_event_loop()

            async def make() -> Any:
                return aiokafka.AIOKafkaProducer(
                    bootstrap_servers=bootstrap,
                    transactional_id=transactional_id,
                    transaction_timeout_ms=timeout_ms,
                    linger_ms=5,
                )

            self._p = self._run(make())

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return self._loop.run_until_complete(coro)

    def init(self) -> None:
        if self.client == "confluent-kafka":
            self._p.init_transactions(30)
        elif self.client == "kafka-python":
            self._p.init_transactions()
        else:
            self._run(self._p.start())  # aiokafka initialises the transactional id in start()

    def begin(self) -> None:
        if self._loop is not None:
            self._run(self._p.begin_transaction())
        else:
            self._p.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None:
        if self.client == "confluent-kafka":
            self._p.produce(topic, value=value, key=key, partition=partition)
            self._p.poll(0)
        elif self.client == "kafka-python":
            self._pending.append(self._p.send(topic, value=value, key=key, partition=partition))
        else:
            self._pending.append(self._run(self._p.send(topic, value=value, key=key, partition=partition)))

    def flush(self) -> None:
        """Every record sent so far is written (still inside the transaction)."""
        if self.client == "confluent-kafka":
            assert self._p.flush(30) == 0
        elif self.client == "kafka-python":
            self._p.flush(timeout=30)
            for future in self._pending:
                future.get(timeout=30)
        else:
            for future in self._pending:
                self._run(future)
        self._pending.clear()

    def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], consumer: Any = None) -> None:
        """Commit ``offsets`` (next offset to read per (topic, partition)) with the transaction."""
        if self.client == "confluent-kafka":
            import confluent_kafka

            metadata = consumer.consumer_group_metadata() if consumer is not None else group_id
            tps = [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            self._p.send_offsets_to_transaction(tps, metadata, 30)
        elif self.client == "kafka-python":
            import kafka
            from kafka.structs import OffsetAndMetadata

            kp = {kafka.TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
            self._p.send_offsets_to_transaction(kp, group_id)
        else:
            import aiokafka

            ak = {aiokafka.TopicPartition(t, p): o for (t, p), o in offsets.items()}
            self._run(self._p.send_offsets_to_transaction(ak, group_id))

    def commit(self) -> None:
        if self.client == "confluent-kafka":
            self._p.commit_transaction(30)
        elif self.client == "kafka-python":
            self._p.commit_transaction()
        else:
            self._run(self._p.commit_transaction())
        self._pending.clear()

    def abort(self) -> None:
        if self.client == "confluent-kafka":
            self._p.abort_transaction(30)
        elif self.client == "kafka-python":
            self._p.abort_transaction()
        else:
            self._run(self._p.abort_transaction())
        self._pending.clear()

    def close(self) -> None:
        """Close, ignoring the errors of a producer that was fenced or failed."""
        try:
            if self.client == "confluent-kafka":
                self._p.flush(1)
            elif self.client == "kafka-python":
                self._p.close(timeout=2)
            else:
                self._run(asyncio.wait_for(self._p.stop(), 5))
        except Exception:
            pass
        finally:
            for future in self._pending:  # a fenced producer's undelivered records: their errors are expected
                if isinstance(future, asyncio.Future) and future.done() and not future.cancelled():
                    future.exception()
            if self._loop is not None:
                self._loop.close()
                self._loop = None


def fenced_errors(client: str) -> tuple[type[BaseException], ...]:
    if client == "confluent-kafka":
        import confluent_kafka

        return (confluent_kafka.KafkaException,)
    if client == "kafka-python":
        import kafka.errors

        return (kafka.errors.ProducerFencedError, kafka.errors.KafkaError)
    import aiokafka.errors

    return (aiokafka.errors.ProducerFenced, aiokafka.errors.KafkaError)


def read_values(
    bootstrap: str,
    partitions: Iterable[tuple[str, int]],
    *,
    committed: bool,
    timeout: float = 20.0,
) -> dict[tuple[str, int], list[bytes]]:
    """Every value of each partition from offset 0 to its end (the last stable offset under
    read_committed, else the high watermark), read with confluent-kafka."""
    import confluent_kafka

    wanted = list(partitions)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    got: dict[tuple[str, int], list[bytes]] = {tp: [] for tp in wanted}
    try:
        consumer.assign([confluent_kafka.TopicPartition(t, p, 0) for t, p in wanted])
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(wanted):
            assert time.monotonic() < deadline, f"reading {wanted} did not reach the end: {got}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            tp = (message.topic(), message.partition())
            error = message.error()
            if error is not None:
                assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                at_end.add(tp)
                continue
            at_end.discard(tp)
            got[tp].append(message.value())
    finally:
        consumer.close()
    return got


def end_offsets(
    bootstrap: str, partitions: Iterable[tuple[str, int]], *, committed: bool
) -> dict[tuple[str, int], int]:
    """ListOffsets latest per partition (the LSO under read_committed)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-offsets",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    try:
        out = {}
        for topic, partition in partitions:
            tps = consumer.offsets_for_times(
                [confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_END)], timeout=10
            )
            out[(topic, partition)] = tps[0].offset
        return out
    finally:
        consumer.close()


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        future.result(15)
