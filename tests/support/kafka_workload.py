"""Keyed workloads for driving a real broker with real clients, and the exact checks on what comes back.

A workload is a list of ``WorkMessage``: a sequence number, a key drawn from a fixed key set, a value that
names the workload and the sequence number (so every value is unique), and headers. Producers report where
each message landed (``Delivery``: partition, offset); consumers return ``Consumed`` rows. ``verify_log``
then asserts, exactly:

- the consumed records are the produced ones: same multiset of (key, value, headers), each exactly once;
- each message sits at the (partition, offset) its delivery report named;
- every partition's offsets are 0, 1, 2, ... with no gap and nothing after (compared with the high
  watermark the caller looked up);
- within a partition, sequence numbers increase (production order kept);
- a key's messages all sit in one partition (key stickiness), and every partition received some.

Client-specific produce/consume code lives here too, so each client's test module is the scenario only.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.protocol.records import Compression, RecordBatchHeader, iter_batch_headers

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
GROUP_ID_UNUSED = "tidelog-tests-assign-only"  # confluent-kafka requires one; never joined or committed


@dataclass(frozen=True, slots=True)
class WorkMessage:
    seq: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def make_messages(
    label: str, count: int, *, num_keys: int = 500, base_timestamp: int | None = None, step_ms: int = 1
) -> list[WorkMessage]:
    """``count`` messages; values are unique (``label`` and seq), somewhat compressible, 60-140 bytes."""
    out = []
    for seq in range(count):
        filler = (f"{label}:{seq % 97:02d}|" * (1 + seq % 8)).encode()
        out.append(
            WorkMessage(
                seq=seq,
                key=f"key-{seq % num_keys:04d}".encode(),
                value=f"{label}-{seq:07d}-".encode() + filler,
                headers=(("seq", str(seq).encode()), ("label", label.encode()), ("empty", b"")),
                timestamp_ms=None if base_timestamp is None else base_timestamp + seq * step_ms,
            )
        )
    return out


def seq_of(value: bytes | None, label: str) -> int:
    assert value is not None
    prefix = f"{label}-".encode()
    assert value.startswith(prefix), value[:40]
    return int(value[len(prefix) : len(prefix) + 7])


# -- checks --------------------------------------------------------------------------------------------


def verify_log(
    messages: Sequence[WorkMessage],
    deliveries: dict[int, Delivery],
    consumed: Sequence[Consumed],
    high_watermarks: dict[int, int],
    label: str,
) -> None:
    """The exact checks listed in the module docstring."""
    assert len(deliveries) == len(messages), (
        f"{len(messages) - len(deliveries)} messages without delivery report"
    )
    by_seq = {m.seq: m for m in messages}
    # each exactly once, as sent
    seqs = Counter(seq_of(c.value, label) for c in consumed)
    duplicated = {s: n for s, n in seqs.items() if n > 1}
    assert not duplicated, f"values consumed more than once: {sorted(duplicated.items())[:10]}"
    missing = set(by_seq) - set(seqs)
    assert not missing, f"{len(missing)} messages never consumed, e.g. {sorted(missing)[:10]}"
    unknown = set(seqs) - set(by_seq)
    assert not unknown, f"consumed values nobody produced: {sorted(unknown)[:10]}"
    for c in consumed:
        sent = by_seq[seq_of(c.value, label)]
        assert (c.key, c.value, c.headers) == (sent.key, sent.value, sent.headers), (c, sent)
        if sent.timestamp_ms is not None:
            assert c.timestamp == sent.timestamp_ms, (c, sent)
        assert deliveries[sent.seq] == Delivery(c.partition, c.offset), (
            f"seq {sent.seq} reported at {deliveries[sent.seq]} but consumed at ({c.partition}, {c.offset})"
        )
    # contiguous offsets from 0 in every partition, up to the high watermark, in production order
    per_partition: dict[int, list[Consumed]] = defaultdict(list)
    for c in consumed:
        per_partition[c.partition].append(c)
    assert set(per_partition) == set(high_watermarks), (sorted(per_partition), sorted(high_watermarks))
    for partition, rows in per_partition.items():
        offsets = [c.offset for c in rows]
        assert offsets == list(range(len(rows))), f"partition {partition}: offsets not 0..n-1 in order"
        assert high_watermarks[partition] == len(rows), (partition, high_watermarks[partition], len(rows))
        sequence = [seq_of(c.value, label) for c in rows]
        assert sequence == sorted(sequence), f"partition {partition}: production order not kept"
    # key stickiness
    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    for c in consumed:
        partitions_of_key[c.key].add(c.partition)
    spread = {k: p for k, p in partitions_of_key.items() if len(p) > 1}
    assert not spread, f"keys found in several partitions: {list(spread.items())[:5]}"


def partition_timelines(
    messages: Sequence[WorkMessage], deliveries: dict[int, Delivery]
) -> dict[int, list[tuple[int, int]]]:
    """{partition: [(offset, timestamp), ...] in offset order} of messages produced with explicit timestamps."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for m in messages:
        assert m.timestamp_ms is not None
        d = deliveries[m.seq]
        out[d.partition].append((d.offset, m.timestamp_ms))
    return {p: sorted(rows) for p, rows in out.items()}


def expected_offset_for_time(timeline: Sequence[tuple[int, int]], timestamp: int) -> tuple[int, int] | None:
    """Kafka's answer to ListOffsets(timestamp): the first record (in offset order) whose timestamp is >=
    ``timestamp``, as (offset, its timestamp); None when there is none."""
    for offset, ts in timeline:
        if ts >= timestamp:
            return offset, ts
    return None


def time_queries(timeline: Sequence[tuple[int, int]]) -> list[int]:
    """Timestamps to look up: before everything, exact record timestamps, between records, after the end."""
    stamps = [ts for _, ts in timeline]
    return [stamps[0] - 5000, *stamps[::37], *(ts + 1 for ts in stamps[5::41]), stamps[-1], stamps[-1] + 1]


def stored_batches(data_dir: Path, topic: str) -> list[RecordBatchHeader]:
    """The headers of every stored batch of ``topic``, read straight from the segment files."""
    out: list[RecordBatchHeader] = []
    for segment in sorted(data_dir.glob(f"{topic}-*/*.log")):
        if segment.parent.name.rpartition("-")[0] != topic:
            continue
        out.extend(header for _pos, header in iter_batch_headers(segment.read_bytes()))
    return out


def stored_codecs(data_dir: Path, topic: str) -> Counter[Compression]:
    """How many stored *records* of ``topic`` sit in batches of each codec."""
    counts: Counter[Compression] = Counter()
    for header in stored_batches(data_dir, topic):
        counts[header.compression] += header.records_count
    return counts


def assert_codec_used(data_dir: Path, topic: str, codec: str) -> None:
    """The topic's records are stored compressed with ``codec``. All the clients (like Kafka's Java producer)
    send a batch uncompressed when compressing would not make it smaller (a tiny tail batch), so NONE may
    appear too, but only for a minority of the records."""
    stored = stored_codecs(data_dir, topic)
    wanted = Compression[codec.upper()]
    assert set(stored) <= {wanted, Compression.NONE}, stored
    assert stored[wanted] > stored[Compression.NONE] or wanted == Compression.NONE, stored


FIND_COORDINATOR = 10


def advertised_api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} from an ApiVersions v0 request on a raw socket."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        request = struct.pack(">hhih", 18, 0, 1, 0)
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "broker closed the connection during ApiVersions"
            data += chunk
    correlation_id, error_code, count = struct.unpack(">ihi", data[4:14])
    assert (correlation_id, error_code) == (1, 0)
    entries = (struct.unpack(">hhh", data[14 + 6 * i : 20 + 6 * i]) for i in range(count))
    return {key: (lo, hi) for key, lo, hi in entries}


# -- confluent-kafka -------------------------------------------------------------------------------------


def confluent_produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[WorkMessage],
    *,
    compression: str = "none",
    acks: str = "all",
    extra: dict[str, Any] | None = None,
    timeout: float = 120.0,
) -> dict[int, Delivery]:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "acks": acks,
            "linger.ms": 5,
            "enable.idempotence": False,
            "log_level": 3,
            **(extra or {}),
        }
    )
    deliveries: dict[int, Delivery] = {}
    errors: list[Any] = []
    seq_by_value: dict[bytes, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
            return
        deliveries[seq_by_value[msg.value()]] = Delivery(msg.partition(), msg.offset())

    for m in messages:
        seq_by_value[m.value] = m.seq
        while True:
            try:
                producer.produce(
                    topic,
                    value=m.value,
                    key=m.key,
                    headers=list(m.headers),
                    timestamp=m.timestamp_ms or 0,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0, f"{remaining} messages still undelivered after {timeout}s"
    assert not errors, errors[:5]
    return deliveries


def confluent_consume(
    bootstrap: str, topic: str, partitions: int, count: int, *, timeout: float = 120.0, start: int = 0
) -> list[Consumed]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "log_level": 3,
        }
    )
    got: list[Consumed] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, start) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                assert message.error() is None, message.error()
                got.append(_from_confluent(message))
    finally:
        consumer.close()
    return got


def _from_confluent(message: Any) -> Consumed:
    return Consumed(
        message.partition(),
        message.offset(),
        message.key(),
        message.value(),
        tuple(message.headers() or ()),
        message.timestamp()[1],
    )


def confluent_high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """{partition: (log start offset, high watermark)} through ListOffsets."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        return {
            p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=20)
            for p in range(partitions)
        }
    finally:
        consumer.close()


def confluent_create_topic(
    bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, config=config or {})])
    futures[topic].result(timeout=30)


# -- kafka-python --------------------------------------------------------------------------------------


def kafka_python_produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[WorkMessage],
    *,
    compression: str = "none",
    acks: Any = "all",
    timeout: float = 120.0,
    batch_bytes: int = 64 * 1024,
) -> dict[int, Delivery]:
    import kafka

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        acks=acks,
        linger_ms=5,
        batch_size=batch_bytes,
        max_block_ms=60_000,
        enable_idempotence=False,  # kafka-python 3 defaults to idempotence (needs InitProducerId, not yet served)
    )
    futures = []
    try:
        for m in messages:
            future = producer.send(
                topic, value=m.value, key=m.key, headers=list(m.headers), timestamp_ms=m.timestamp_ms
            )
            futures.append((m.seq, future))
        producer.flush(timeout=timeout)
        deliveries = {}
        for seq, future in futures:
            metadata = future.get(timeout=timeout)
            deliveries[seq] = Delivery(metadata.partition, metadata.offset)
    finally:
        producer.close(timeout=10)
    return deliveries


def kafka_python_consume(
    bootstrap: str, topic: str, partitions: int, count: int, *, timeout: float = 120.0
) -> list[Consumed]:
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_partition_fetch_bytes=1 << 20,
    )
    got: list[Consumed] = []
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=10_000).values():
                got.extend(_from_python_client(r) for r in records)
    finally:
        consumer.close()
    return got


# -- aiokafka ------------------------------------------------------------------------------------------


async def aiokafka_produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[WorkMessage],
    *,
    compression: str = "none",
    acks: Any = "all",
    batch_bytes: int = 64 * 1024,
) -> dict[int, Delivery]:
    import aiokafka

    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        acks=acks,
        linger_ms=5,
        max_batch_size=batch_bytes,
    )
    await producer.start()
    try:
        futures = []
        for m in messages:
            future = await producer.send(
                topic, value=m.value, key=m.key, headers=list(m.headers), timestamp_ms=m.timestamp_ms
            )
            futures.append((m.seq, future))
        await producer.flush()
        deliveries = {}
        for seq, future in futures:
            metadata = await future
            deliveries[seq] = Delivery(metadata.partition, metadata.offset)
    finally:
        await producer.stop()
    return deliveries


async def aiokafka_consume(
    bootstrap: str, topic: str, partitions: int, count: int, *, within_s: float = 120.0
) -> list[Consumed]:
    import aiokafka

    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="none"
    )
    await consumer.start()
    got: list[Consumed] = []
    try:
        tps = [aiokafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + within_s
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for records in batches.values():
                got.extend(_from_python_client(r) for r in records)
    finally:
        await consumer.stop()
    return got


def run_async(coro: Any, timeout: float = 300.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _from_python_client(record: Any) -> Consumed:
    return Consumed(
        record.partition,
        record.offset,
        record.key,
        record.value,
        tuple((k, v) for k, v in record.headers),
        record.timestamp,
    )
