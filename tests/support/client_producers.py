"""Real Kafka producers (confluent-kafka, kafka-python, aiokafka) driven against a broker address, and the
records the interop tests send through them.

Each ``produce_*`` function sends ``records`` in order to partition 0 of ``topic`` with the client's own
compression, waits for every delivery, and closes the producer. Timestamps are explicit, so what the
broker receives is fully determined by the records (except gzip's header time and the batch split).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from tidelog.protocol.records import Compression, SimpleRecord

BASE_TIMESTAMP = 1_700_000_000_000

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)


def interop_records(client: str) -> list[SimpleRecord]:
    """Records covering null/empty keys and values, binary and UTF-8 bytes, header edge cases, and
    timestamps that go backwards (negative deltas). kafka-python refuses null header values (the others
    send one), and only confluent-kafka accepts a record with neither key nor value."""
    kafka_python = client == "kafka-python"
    null_header_value = () if kafka_python else (("null-value", None),)
    records = [
        SimpleRecord(b"key-0", b"hello", (("h1", b"v1"),), BASE_TIMESTAMP),
        SimpleRecord(None, b"no key", (), BASE_TIMESTAMP + 1),
        SimpleRecord(b"tombstone", None, (), BASE_TIMESTAMP + 2),
        SimpleRecord(b"", b"", (), BASE_TIMESTAMP + 3),
        SimpleRecord(
            b"binary", bytes(range(256)), (("empty", b""), ("bin", b"\x00\xff\x80")), BASE_TIMESTAMP + 4
        ),
        SimpleRecord(
            "ключ".encode(), "héllo wörld ✓".encode(), (("ключ", "значение".encode()),), BASE_TIMESTAMP + 5
        ),
        SimpleRecord(b"dup-headers", b"1", (("x", b"1"), ("x", b"2"), ("y", b"3")), BASE_TIMESTAMP + 6),
        SimpleRecord(b"back-in-time", b"earlier", (), BASE_TIMESTAMP - 1_000),
        SimpleRecord(b"nulls", None, null_header_value, BASE_TIMESTAMP + 8),
        SimpleRecord(b"medium", b"0123456789abcdef" * 200, (("n", b"7"),), BASE_TIMESTAMP + 9),
        SimpleRecord(None, None, (), BASE_TIMESTAMP + 10),
        SimpleRecord(b"last", b"the end", (("h1", b"v1"), ("h2", b"v2")), BASE_TIMESTAMP + 11),
    ]
    return [r for r in records if client == "confluent-kafka" or r.key is not None or r.value is not None]


def large_records() -> list[SimpleRecord]:
    """Records big enough to span several xerial-snappy (32 KiB) and lz4 (64 KiB) blocks."""
    pattern = bytes(range(251)) * 600  # 150,600 bytes, not a multiple of any block size
    return [SimpleRecord(b"big-%d" % i, pattern[i:] + b"#%d" % i, (), BASE_TIMESTAMP + i) for i in range(3)]


def produce_confluent_kafka(
    bootstrap: str, topic: str, records: Sequence[SimpleRecord], codec: Compression
) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec.name.lower(),
            "linger.ms": 100,
            "acks": 1,
            "message.max.bytes": 10_000_000,
            "log_level": 3,
        }
    )
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for r in records:
        producer.produce(
            topic,
            key=r.key,
            value=r.value,
            headers=list(r.headers),
            timestamp=r.timestamp,
            partition=0,
            on_delivery=on_delivery,
        )
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages undelivered"
    assert errors == []


def produce_kafka_python(
    bootstrap: str, topic: str, records: Sequence[SimpleRecord], codec: Compression
) -> None:
    import kafka

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == Compression.NONE else codec.name.lower(),
        linger_ms=100,
        acks=1,
        batch_size=1_000_000,
        max_request_size=10_000_000,
    )
    try:
        futures = [
            producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
                partition=0,
            )
            for r in records
        ]
        producer.flush(30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)


def produce_aiokafka(bootstrap: str, topic: str, records: Sequence[SimpleRecord], codec: Compression) -> None:
    import aiokafka

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=None if codec == Compression.NONE else codec.name.lower(),
            linger_ms=100,
            acks=1,
            max_batch_size=1_000_000,
            max_request_size=10_000_000,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                    partition=0,
                )
                for r in records
            ]
            await producer.flush()
            for future in futures:
                await future
        finally:
            await producer.stop()

    asyncio.run(run())


PRODUCERS: dict[str, Callable[[str, str, Sequence[SimpleRecord], Compression], None]] = {
    "confluent-kafka": produce_confluent_kafka,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


def client_version(client: str) -> str:
    """The client library's version, as written into golden files."""
    if client == "confluent-kafka":
        import confluent_kafka

        return f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"
    if client == "kafka-python":
        import kafka

        return f"kafka-python {kafka.__version__}"
    import aiokafka

    return f"aiokafka {aiokafka.__version__}"
