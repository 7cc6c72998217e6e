"""Every kind of file in a broker's data directory, corrupted after a SIGKILL, then a restart: what survives.

One broker builds a template data directory: two topics (``alpha``, ``beta``; small segments, dense
indexes) filled by an idempotent confluent-kafka producer with known timestamps, a raw idempotent producer
on alpha, an aborted and a committed transaction on alpha, a series of group offset commits, a dynamic
broker config, a graceful restart halfway (so every checkpoint file exists) and, once the rolled segments
are flushed and checkpointed and the log cleaner has compacted ``__consumer_offsets``, a SIGKILL. Each case
copies the template, damages one kind of file (garbage, inverted bytes, or one flipped bit that leaves the
file well-formed), starts a broker on the copy and asserts the exact outcome, Kafka's where Kafka has one:

- derived files (``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``) and checkpoints
  (recovery point, log start offset, high watermark, cleaner offset) are hints: the broker starts, warns
  naming the file, rebuilds from the log, and every acknowledged record is read back at its offset, time
  lookups answer as before, read_committed still hides the aborted transaction and a retried idempotent
  batch is still answered as a duplicate;
- a ``.log`` damaged where recovery revalidates it (after the recovery point) is truncated at the first
  invalid batch (later segments go too, as in Kafka's recovery): the partition keeps the contiguous prefix
  before it, the other topic is untouched; a segment below the recovery point is trusted unread, as in
  Kafka (fsynced data is not rescanned at start), so a damaged batch there is served as stored: consumers
  checking CRCs report it and read on past it, a lookup by a timestamp inside it is that partition's
  KAFKA_STORAGE_ERROR; garbage after the last batch is cut;
- ``__consumer_offsets`` and ``__transaction_state`` are logs like any other: the group's committed
  offsets fall back to the last commit before a damaged batch of the active segment, a damaged batch
  below the recovery point is skipped by the coordinator's load, transactions carry on;
- files the broker cannot do without refuse the start with exit code 1 and one ``ERROR`` line naming the
  file, never a bare traceback, and delete nothing: ``meta.properties`` (garbage, or another cluster's id),
  ``tidelog-metadata.json`` (written atomically, so damage means a damaged disk; starting on it would
  forget topics, and one flipped bit in a name renames a topic: its CRC32C catches that) and
  ``producer-id-block`` (reusing producer ids would break idempotence);
- a damaged ``tidelog-broker-configs.json`` (its CRC32C catches a flipped digit) is warned about and the
  static configs apply;
- files tidelog does not write yet (``leader-epoch-checkpoint``, ``partition.metadata``) are ignored.
"""

from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tidelog.client.wire import WireClient, connect
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import InitProducerIdRequest, ListOffsetsRequest, ProduceRequest
from tidelog.protocol.records import RECORD_BATCH_HEADER_SIZE, SimpleRecord, encode_batch, iter_batch_headers
from tidelog.storage.checkpoint import read_offsets_checkpoint
from tidelog.testing import Broker, BrokerError

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

ALPHA, BETA = "alpha", "beta"
OFFSETS_TOPIC, TXN_TOPIC = "__consumer_offsets", "__transaction_state"
GROUP = "g1"
TXN_ID = "tx-alpha"
BROKER_CONFIG = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "700",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.flush.offset.checkpoint.interval.ms": "100",
    "log.flush.start.offset.checkpoint.interval.ms": "100",
    "log.cleaner.backoff.ms": "100",
}
TOPIC_CONFIG = {"segment.bytes": "2000", "index.interval.bytes": "200"}
DYNAMIC_RETENTION_MS = "2592000000"
STATIC_RETENTION_MS = "604800000"


@dataclass
class Template:
    """The killed broker's data directory and what it acknowledged."""

    data_dir: Path
    cluster_id: str
    records: dict[str, dict[int, bytes]] = field(default_factory=dict)
    """Acknowledged data records per topic: offset -> value (aborted ones too)."""
    timestamps: dict[str, dict[int, int]] = field(default_factory=dict)
    aborted: set[bytes] = field(default_factory=set)
    commits: list[dict[str, int]] = field(default_factory=list)
    """Committed offsets of GROUP after each commit, in order (one batch each in __consumer_offsets)."""
    raw_pid: int = -1
    raw_batches: list[tuple[bytes, int]] = field(default_factory=list)
    """The raw producer's batches on alpha, with their base offsets."""
    base_ts: int = 0
    ticks: int = 0

    def next_timestamp(self) -> int:
        """CreateTimes rise with offsets (and lie a day ahead: above every control marker's)."""
        self.ticks += 1
        return self.base_ts + 10 * self.ticks


@dataclass(frozen=True)
class Expect:
    """The outcome of one case."""

    starts: bool = True
    names: str | None = None
    """A text the broker's output must hold (the damaged file, named in a warning or the error)."""
    alpha_end: int | None = None
    """Alpha keeps its records below this offset (None: all of them)."""
    commit_index: int = -1
    """GROUP's committed offsets are those after this commit (-1: the last)."""
    dynamic_configs: bool = True
    damaged_alpha_batch: tuple[int, int] | None = None
    """The offsets ``[first, next)`` of a damaged alpha batch the broker serves as it is (a trusted segment)."""
    txn_log_prefix: int | None = None
    """__transaction_state keeps exactly its first batches below this offset (then goes on)."""


# ---- building the template ---------------------------------------------------------------------------


def broker_problems(broker: Broker) -> list[str]:
    """Lines of the broker's output showing an exception escaped somewhere (always a bug)."""
    text = broker.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if "Traceback" in line or "level=ERROR" in line]


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _produce(template: Template, bootstrap: str, topic: str, count: int) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0, "log_level": 0}
    )
    errors: list[object] = []

    def delivered(err: object, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err)
            return
        offset = msg.offset()
        assert offset is not None
        template.records[topic][offset] = msg.value()
        template.timestamps[topic][offset] = msg.timestamp()[1]

    first = sum(v.startswith(topic.encode()) for v in template.records[topic].values())
    for i in range(first, first + count):
        value = b"%s-%04d-" % (topic.encode(), i) + b"v" * (i % 23)
        timestamp = template.next_timestamp()
        producer.produce(topic, key=b"k%d" % i, value=value, timestamp=timestamp, on_delivery=delivered)
        if i % 3 == 2:
            assert producer.flush(15) == 0  # small batches: many of them per segment
    assert producer.flush(15) == 0
    assert errors == []


def _produce_raw(template: Template, wire: WireClient, seq: int) -> None:
    records = [
        SimpleRecord(key=None, value=b"raw-%d" % (seq + i), timestamp=template.next_timestamp())
        for i in range(3)
    ]
    batch = encode_batch(records, producer_id=template.raw_pid, producer_epoch=0, base_sequence=seq)
    answer = _raw_send(wire, batch)
    assert answer.error_code == ErrorCode.NONE
    for i, record in enumerate(records):
        template.records[ALPHA][answer.base_offset + i] = record.value
        template.timestamps[ALPHA][answer.base_offset + i] = record.timestamp
    template.raw_batches.append((batch, answer.base_offset))


def _raw_send(wire: WireClient, batch: bytes) -> Any:
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=ALPHA, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    return wire.call(request, 9).responses[0].partition_responses[0]


def _transaction(template: Template, bootstrap: str, value: bytes, *, commit: bool) -> None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": TXN_ID,
            "metadata.recovery.strategy": "none",
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    offsets: list[int] = []
    timestamp = template.next_timestamp()
    producer.produce(
        ALPHA,
        key=b"txn",
        value=value,
        timestamp=timestamp,
        on_delivery=lambda _e, m: offsets.append(m.offset()),
    )
    assert producer.flush(15) == 0
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
        template.aborted.add(value)
    template.records[ALPHA][offsets[0]] = value
    template.timestamps[ALPHA][offsets[0]] = timestamp


def _commit(template: Template, bootstrap: str, count: int) -> None:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False, "log_level": 0}
    )
    try:
        for _ in range(count):
            k = len(template.commits)
            offsets = {ALPHA: 3 + k, BETA: 5 + 2 * k}
            consumer.commit(
                offsets=[confluent_kafka.TopicPartition(t, 0, o) for t, o in offsets.items()],
                asynchronous=False,
            )
            template.commits.append(offsets)
    finally:
        consumer.close()


def _segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def _batches(path: Path) -> list[tuple[int, Any]]:
    return list(iter_batch_headers(path.read_bytes()))


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _flushed_and_checkpointed(data_dir: Path) -> bool:
    """Every rolled segment of alpha and beta is below the checkpointed recovery point, and the cleaner
    has checkpointed ``__consumer_offsets``."""
    points = read_offsets_checkpoint(data_dir / "recovery-point-offset-checkpoint")  # written by rename
    cleaned = read_offsets_checkpoint(data_dir / "cleaner-offset-checkpoint")
    for topic in (ALPHA, BETA):
        active = int(_segments(data_dir / f"{topic}-0")[-1].name.split(".")[0])
        if points.get(TopicPartition(topic, 0), -1) < active:
            return False
    return TopicPartition(OFFSETS_TOPIC, 0) in cleaned


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    workdir = tmp_path_factory.mktemp("corrupt-template")
    broker = Broker(BROKER_CONFIG, data_dir=workdir / "data", run_dir=workdir / "run")
    data = Template(
        workdir / "data",
        cluster_id="",
        records={ALPHA: {}, BETA: {}},
        timestamps={ALPHA: {}, BETA: {}},
        base_ts=int(time.time() * 1000) + 86_400_000,
    )
    try:
        broker.start()
        bootstrap = broker.bootstrap_servers
        admin = _admin(bootstrap)  # must outlive its futures
        futures = admin.create_topics([NewTopic(t, 1, 1, config=TOPIC_CONFIG) for t in (ALPHA, BETA)])
        for future in futures.values():
            future.result(15)
        # phase 1, then a graceful restart (replication-offset-checkpoint, snapshots at the log end)
        for topic in (ALPHA, BETA):
            _produce(data, bootstrap, topic, 45)
        wire = connect(bootstrap, timeout=10)
        try:
            init = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
            data.raw_pid = init.producer_id
            _produce_raw(data, wire, 0)
            _produce_raw(data, wire, 3)
        finally:
            wire.close()
        _transaction(data, bootstrap, b"txn-aborted", commit=False)
        _commit(data, bootstrap, 4)
        resource = ConfigResource(ConfigResource.Type.BROKER, "1")
        altered = admin.incremental_alter_configs(
            [
                ConfigResource(
                    ConfigResource.Type.BROKER,
                    "1",
                    incremental_configs=[
                        confluent_kafka.admin.ConfigEntry(
                            "log.retention.ms",
                            DYNAMIC_RETENTION_MS,
                            incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET,
                        )
                    ],
                )
            ]
        )
        altered[resource].result(15)
        assert broker.stop(timeout=30) == 0
        broker.start()
        bootstrap = broker.bootstrap_servers
        # phase 2: more of everything, alpha's last segment holding plain records only
        _transaction(data, bootstrap, b"txn-committed", commit=True)
        wire = connect(bootstrap, timeout=10)
        try:
            _produce_raw(data, wire, 6)
        finally:
            wire.close()
        _commit(data, bootstrap, 8)
        for topic in (ALPHA, BETA):
            _produce(data, bootstrap, topic, 60)
            while len(_batches(_segments(data.data_dir / f"{topic}-0")[-1])) < 3:
                _produce(data, bootstrap, topic, 3)
        _wait_for(
            lambda: _flushed_and_checkpointed(data.data_dir), "flushed segments and the cleaner checkpoint"
        )
        broker.kill()
        text = (data.data_dir / "meta.properties").read_text()
        data.cluster_id = next(
            line.split("=", 1)[1] for line in text.splitlines() if line.startswith("cluster.id=")
        )
        problems = broker_problems(broker)
        assert not problems, "\n".join(problems)
        _check_template(data)
        yield data
    finally:
        broker.close()


def _check_template(data: Template) -> None:
    """The layout the cases rely on."""
    alpha_segments = _segments(data.data_dir / f"{ALPHA}-0")
    assert len(alpha_segments) >= 4, alpha_segments
    last = _batches(alpha_segments[-1])
    assert len(last) >= 3
    assert all(h.producer_id != data.raw_pid and not h.is_transactional for _, h in last)
    assert len(list((data.data_dir / f"{ALPHA}-0").glob("*.txnindex"))) == 1
    assert list((data.data_dir / f"{ALPHA}-0").glob("*.snapshot"))
    for name in (
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        "cleaner-offset-checkpoint",
        "meta.properties",
        "tidelog-metadata.json",
        "tidelog-broker-configs.json",
        "producer-id-block",
    ):
        assert (data.data_dir / name).is_file(), name
    assert not (data.data_dir / ".kafka_cleanshutdown").exists()
    offsets_segments = _segments(data.data_dir / f"{OFFSETS_TOPIC}-0")
    assert len(offsets_segments) >= 2
    assert _batches(
        offsets_segments[-2]
    )  # the last cleaned segment keeps the last commit before the active one
    headers = [h for segment in offsets_segments for _, h in _batches(segment)]
    assert headers[-1].last_offset == 2 * len(data.commits) - 1
    assert all(h.base_offset % 2 == 0 and h.records_count == 2 for _, h in _batches(offsets_segments[-1]))


# ---- damage -------------------------------------------------------------------------------------------


def flip(path: Path, position: int, count: int = 4) -> None:
    """Invert ``count`` bytes at ``position`` (bit rot)."""
    data = bytearray(path.read_bytes())
    assert position >= 0, position
    assert position + count <= len(data), (path, position, len(data))
    for i in range(position, position + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def flip_middle(path: Path, count: int = 4) -> None:
    """Invert bytes in the middle of what the file holds (a preallocated index: of its entries)."""
    size = len(path.read_bytes().rstrip(b"\0"))
    flip(path, max(0, size // 2 - count // 2), min(count, size))


def flip_batch(segment: Path, which: int | None = None) -> tuple[int, int]:
    """Invert bytes in the records of one batch (the middle one by default), which only its CRC can
    reveal; returns the batch's first and next offsets."""
    batches = _batches(segment)
    position, header = batches[len(batches) // 2 if which is None else which]
    flip(
        segment,
        position + RECORD_BATCH_HEADER_SIZE + (header.size_in_bytes - RECORD_BATCH_HEADER_SIZE) // 2,
        2,
    )
    return int(header.base_offset), int(header.last_offset) + 1


def middle_plain_batch(segment: Path, t: Template) -> int:
    """The index of the middle batch of the segment written by the plain producers (no transaction or
    raw producer): cutting the log there leaves no transaction half-written."""
    plain = [
        i
        for i, (_, h) in enumerate(_batches(segment))
        if not h.is_transactional and not h.is_control and h.producer_id != t.raw_pid
    ]
    return plain[len(plain) // 2]


def write_garbage(path: Path, size: int = 300) -> None:
    path.write_bytes(bytes((i * 151 + 7) % 256 for i in range(size)))


Corruption = Callable[[Template, Path], Expect]


def _partition(data_dir: Path, topic: str) -> Path:
    return data_dir / f"{topic}-0"


def nothing(_t: Template, _d: Path) -> Expect:
    return Expect()


def log_last_segment(_t: Template, d: Path) -> Expect:
    last = _segments(_partition(d, ALPHA))[-1]
    cut, _ = flip_batch(last)
    return Expect(names=last.name, alpha_end=cut)


def log_older_segment_unflushed(t: Template, d: Path) -> Expect:
    """The crash came before the recovery point was checkpointed: the damaged segment is revalidated, the
    log ends before the damaged batch and every later segment goes (Kafka's recoverLog)."""
    segment = _segments(_partition(d, ALPHA))[1]
    cut, _ = flip_batch(segment, middle_plain_batch(segment, t))
    (d / "recovery-point-offset-checkpoint").unlink()
    return Expect(names=segment.name, alpha_end=cut)


def log_older_segment_flushed(t: Template, d: Path) -> Expect:
    segment = _segments(_partition(d, ALPHA))[1]
    damaged = flip_batch(segment, middle_plain_batch(segment, t))
    return Expect(names=f"{segment.name}: batch at offsets {damaged[0]}..", damaged_alpha_batch=damaged)


def log_garbage_appended(_t: Template, d: Path) -> Expect:
    last = _segments(_partition(d, ALPHA))[-1]
    with last.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07garbage" * 20)
    return Expect(names=last.name)


def log_garbage_appended_older(_t: Template, d: Path) -> Expect:
    segment = _segments(_partition(d, ALPHA))[1]
    with segment.open("ab") as f:
        f.write(b"\xff" * 200)
    return Expect(names=segment.name)


def every_file(suffix: str) -> Corruption:
    def corrupt(_t: Template, d: Path) -> Expect:
        files = sorted(_partition(d, ALPHA).glob(f"*{suffix}"))
        assert files
        for path in files:
            flip_middle(path, 8)
        return Expect(names=files[0].name)

    corrupt.__name__ = f"every_{suffix.strip('.')}"
    return corrupt


def one_bit_of_every_entry_table(suffix: str, entry_size: int, byte: int) -> Corruption:
    """One flipped bit (the lowest of ``byte`` of the middle entry) of every such index file of alpha: the
    entry stays well-formed and in order, only the log can tell it is wrong."""

    def corrupt(_t: Template, d: Path) -> Expect:
        files = sorted(_partition(d, ALPHA).glob(f"*{suffix}"))
        for path in files:
            entries = len(path.read_bytes().rstrip(b"\0")) // entry_size
            if entries:
                _flip_bit(path, entries // 2 * entry_size + byte)
        return Expect()

    corrupt.__name__ = f"bit_of_every_{suffix.strip('.')}"
    return corrupt


def _flip_bit(path: Path, position: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def txnindex_bit(_t: Template, d: Path) -> Expect:
    """The lowest bit of the aborted transaction's producer id: read_committed would show its records."""
    (path,) = _partition(d, ALPHA).glob("*.txnindex")
    _flip_bit(path, 9)
    return Expect(names=f"{path.name}: no ABORT marker of producer")


def broker_configs_bit(_t: Template, d: Path) -> Expect:
    """2592000000 -> 0592000000: valid JSON, a shorter retention, caught by the checksum."""
    path = d / "tidelog-broker-configs.json"
    _flip_bit(path, path.read_bytes().index(DYNAMIC_RETENTION_MS.encode()), 1)
    return Expect(names="tidelog-broker-configs.json are unreadable", dynamic_configs=False)


def checkpoint(name: str) -> Corruption:
    def corrupt(_t: Template, d: Path) -> Expect:
        flip_middle(d / name, 3)
        return Expect(names=name)

    corrupt.__name__ = name
    return corrupt


def unwritten_files(_t: Template, d: Path) -> Expect:
    for topic in (ALPHA, BETA):
        write_garbage(_partition(d, topic) / "leader-epoch-checkpoint")
        write_garbage(_partition(d, topic) / "partition.metadata")
    return Expect()


def meta_properties_garbage(_t: Template, d: Path) -> Expect:
    write_garbage(d / "meta.properties")
    return Expect(starts=False, names="meta.properties")


def meta_properties_other_cluster(t: Template, d: Path) -> Expect:
    path = d / "meta.properties"
    path.write_text(path.read_text().replace(t.cluster_id, "AAAAAAAAAAAAAAAAAAAAAA"))
    return Expect(starts=False, names="meta.properties")


def metadata_store(_t: Template, d: Path) -> Expect:
    flip_middle(d / "tidelog-metadata.json", 6)
    return Expect(starts=False, names="tidelog-metadata.json")


def metadata_store_bit_flip(_t: Template, d: Path) -> Expect:
    """One bit that renames ``alpha`` to ``clpha``: still valid JSON, caught by the store's checksum (else
    alpha's partition would be removed as a stray and an empty clpha created)."""
    path = d / "tidelog-metadata.json"
    data = bytearray(path.read_bytes())
    data[data.index(b'"alpha"') + 1] ^= 0x02
    path.write_bytes(bytes(data))
    return Expect(starts=False, names="tidelog-metadata.json (ValueError: CRC32C")


def broker_configs(_t: Template, d: Path) -> Expect:
    flip_middle(d / "tidelog-broker-configs.json", 6)
    return Expect(names="tidelog-broker-configs.json", dynamic_configs=False)


def producer_id_block(_t: Template, d: Path) -> Expect:
    flip_middle(d / "producer-id-block", 6)
    return Expect(starts=False, names="producer-id-block")


def offsets_topic(_t: Template, d: Path) -> Expect:
    last = _segments(_partition(d, OFFSETS_TOPIC))[-1]
    cut, _ = flip_batch(last)
    assert cut > 0
    return Expect(names=last.name, commit_index=cut // 2 - 1)


def offsets_topic_flushed(_t: Template, d: Path) -> Expect:
    """A damaged batch below the recovery point: the group coordinator skips it while loading (the later
    commits in the active segment win anyway) instead of leaving every group of the partition unloaded."""
    older = _segments(_partition(d, OFFSETS_TOPIC))[-2]
    first, following = flip_batch(older, -1)
    return Expect(names=f"{OFFSETS_TOPIC}-0: skipping the damaged batch at offsets {first}..{following - 1}")


def txn_topic(_t: Template, d: Path) -> Expect:
    last = _segments(_partition(d, TXN_TOPIC))[-1]
    cut, _ = flip_batch(last)
    return Expect(names=last.name, txn_log_prefix=cut)


CASES: dict[str, Corruption] = {
    "nothing": nothing,
    "log-last-segment": log_last_segment,
    "log-older-segment-unflushed": log_older_segment_unflushed,
    "log-older-segment-flushed": log_older_segment_flushed,
    "log-garbage-appended": log_garbage_appended,
    "log-garbage-appended-older-segment": log_garbage_appended_older,
    "index": every_file(".index"),
    "timeindex": every_file(".timeindex"),
    "txnindex": every_file(".txnindex"),
    "index-one-bit": one_bit_of_every_entry_table(".index", 8, 7),
    "timeindex-one-bit": one_bit_of_every_entry_table(".timeindex", 12, 7),
    "txnindex-one-bit": txnindex_bit,
    "snapshot": every_file(".snapshot"),
    "recovery-point-offset-checkpoint": checkpoint("recovery-point-offset-checkpoint"),
    "log-start-offset-checkpoint": checkpoint("log-start-offset-checkpoint"),
    "replication-offset-checkpoint": checkpoint("replication-offset-checkpoint"),
    "cleaner-offset-checkpoint": checkpoint("cleaner-offset-checkpoint"),
    "leader-epoch-checkpoint-and-partition-metadata": unwritten_files,
    "meta-properties-garbage": meta_properties_garbage,
    "meta-properties-other-cluster": meta_properties_other_cluster,
    "tidelog-metadata-json": metadata_store,
    "tidelog-metadata-json-bit-flip": metadata_store_bit_flip,
    "tidelog-broker-configs-json": broker_configs,
    "tidelog-broker-configs-json-one-bit": broker_configs_bit,
    "producer-id-block": producer_id_block,
    "consumer-offsets-segment": offsets_topic,
    "consumer-offsets-flushed-segment": offsets_topic_flushed,
    "transaction-state-segment": txn_topic,
}


# ---- checking -----------------------------------------------------------------------------------------


def read_partitions(
    bootstrap: str,
    topics: list[str],
    *,
    committed: bool = False,
    check_crcs: bool = False,
    start: int = 0,
    stop_on_error: bool = False,
) -> tuple[dict[str, dict[int, bytes]], list[tuple[str, int | None, str]]]:
    """The records of partition 0 of ``topics`` from ``start`` to the end (or the first error), by offset;
    and the errors the consumer reported."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "check.crcs": check_crcs,
            "log_level": 0,
        }
    )
    got: dict[str, dict[int, bytes]] = {t: {} for t in topics}
    errors: list[tuple[str, int | None, str]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(t, 0, start) for t in topics])
        at_end: set[str] = set()
        deadline = time.monotonic() + 20
        while len(at_end) < len(topics) and not (stop_on_error and errors):
            assert time.monotonic() < deadline, f"reading {topics} did not reach the end: {errors}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            topic = message.topic()
            assert topic is not None
            error = message.error()
            if error is not None:
                if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(topic)
                else:
                    errors.append((topic, message.offset(), error.str()))
                continue
            at_end.discard(topic)
            offset = message.offset()
            assert offset is not None
            got[topic][offset] = message.value()
    finally:
        consumer.close()
    return got, errors


LIBRDKAFKA_ABORT = "rd_slice_narrow_copy"
"""librdkafka 2.16's assertion (rdbuf.c) that sometimes aborts a consumer that has just reported a batch
failing its CRC: about 1 read in 25 here, on this session's start commit as on later ones."""


def read_partitions_apart(
    bootstrap: str, topics: list[str], **options: Any
) -> tuple[dict[str, dict[int, bytes]], list[tuple[str, int | None, str]]]:
    """:func:`read_partitions` in a child process, for reads that meet a damaged batch: librdkafka's abort
    (:data:`LIBRDKAFKA_ABORT`) would otherwise end the whole pytest run. That abort, and nothing else, is
    tried again, at most three times; any other failure of the child fails the test with its output."""
    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from tests.server.test_corrupt_files import read_partitions\n"
        "args = json.loads(sys.argv[2])\n"
        "got, errors = read_partitions(args['bootstrap'], args['topics'], **args['options'])\n"
        "print(json.dumps({'got': {t: {str(o): None if v is None else v.hex() for o, v in r.items()}"
        " for t, r in got.items()}, 'errors': errors}))\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    arguments = json.dumps({"bootstrap": bootstrap, "topics": topics, "options": options})
    stderr = ""
    for _attempt in range(3):
        child = subprocess.run(
            [sys.executable, "-c", script, root, arguments],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        stderr = child.stderr
        if child.returncode == 0:
            answer = json.loads(child.stdout.strip().splitlines()[-1])
            got = {
                topic: {int(o): bytes.fromhex(v) for o, v in records.items()}
                for topic, records in answer["got"].items()
            }
            return got, [(topic, offset, text) for topic, offset, text in answer["errors"]]
        if child.returncode != -signal.SIGABRT or LIBRDKAFKA_ABORT not in stderr:
            raise AssertionError(f"reading {topics} failed (exit {child.returncode}):\n{stderr[-4000:]}")
    raise AssertionError(f"librdkafka aborted three times reading {topics}:\n{stderr[-2000:]}")


def expected_alpha(t: Template, expect: Expect) -> dict[int, bytes]:
    end = expect.alpha_end
    return {o: v for o, v in t.records[ALPHA].items() if end is None or o < end}


def check_records(broker: Broker, t: Template, expect: Expect) -> None:
    got, errors = read_partitions(broker.bootstrap_servers, [ALPHA, BETA])
    assert errors == []
    assert got[BETA] == t.records[BETA]
    assert got[ALPHA] == expected_alpha(t, expect)
    committed, errors = read_partitions(broker.bootstrap_servers, [ALPHA], committed=True)
    assert errors == []
    assert committed[ALPHA] == {o: v for o, v in expected_alpha(t, expect).items() if v not in t.aborted}


def check_timestamps(broker: Broker, t: Template, expect: Expect) -> None:
    """ListOffsets by time: the first offset at or after each record's timestamp, as before the crash
    (but in a damaged batch)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "times",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        for topic in (ALPHA, BETA):
            stamps = sorted((ts, o) for o, ts in t.timestamps[topic].items())
            if topic == ALPHA and expect.alpha_end is not None:
                stamps = [(ts, o) for ts, o in stamps if o < expect.alpha_end]
            if topic == ALPHA and expect.damaged_alpha_batch is not None:
                first, following = expect.damaged_alpha_batch
                stamps = [(ts, o) for ts, o in stamps if not first <= o < following]
            probes = stamps[:: max(1, len(stamps) // 12)] + stamps[-1:]
            answers = [
                consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, 0, ts)], timeout=10)[
                    0
                ].offset
                for ts, _ in probes  # one at a time: librdkafka keeps one query per partition
            ]
            assert answers == [o for _, o in probes], topic
    finally:
        consumer.close()


def check_commits(broker: Broker, t: Template, expect: Expect) -> None:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:
        answers = consumer.committed(
            [confluent_kafka.TopicPartition(tp, 0) for tp in (ALPHA, BETA)], timeout=15
        )
    finally:
        consumer.close()
    wanted = t.commits[expect.commit_index]
    assert {a.topic: a.offset for a in answers} == wanted


def check_duplicate_retry(broker: Broker, t: Template) -> None:
    """The raw producer's last batch, sent again, is answered with its original offset and not stored."""
    batch, offset = t.raw_batches[-1]
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        answer = _raw_send(wire, batch)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, offset)


def check_dynamic_configs(broker: Broker, expect: Expect) -> None:
    admin = _admin(broker.bootstrap_servers)
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, ALPHA)]).values()
    retention = future.result(15)["retention.ms"].value
    assert retention == (DYNAMIC_RETENTION_MS if expect.dynamic_configs else STATIC_RETENTION_MS)


def check_transactions_go_on(broker: Broker) -> None:
    """The transactional id initialises again (fencing what the damaged state left) and commits."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "transactional.id": TXN_ID,
            "metadata.recovery.strategy": "none",
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(BETA, key=b"txn", value=b"after-restart")
    producer.commit_transaction(30)
    got, errors = read_partitions(broker.bootstrap_servers, [BETA], committed=True)
    assert errors == []
    assert list(got[BETA].values())[-1] == b"after-restart"


def check_damaged_batch(broker: Broker, t: Template, first: int, following: int) -> None:
    """A damaged batch below the recovery point is served as stored (Kafka does not rescan fsynced
    segments): a consumer checking CRCs reads up to it and reports it, and reads on after it. A lookup by
    a timestamp inside it is that partition's error (KAFKA_STORAGE_ERROR), not a closed connection."""
    inside = t.timestamps[ALPHA][first]
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=inside)],
            )
            for topic in (ALPHA, BETA)
        ],
    )
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        for _ in range(2):  # the connection stays up
            response = wire.call(request, 7)
            answers = {topic.name: topic.partitions[0] for topic in response.topics}
            assert (answers[ALPHA].error_code, answers[ALPHA].offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
            beta_offset = min(o for o, ts in t.timestamps[BETA].items() if ts >= inside)
            assert (answers[BETA].error_code, answers[BETA].offset) == (ErrorCode.NONE, beta_offset)
    got, errors = read_partitions_apart(
        broker.bootstrap_servers, [ALPHA], check_crcs=True, stop_on_error=True
    )
    assert got[ALPHA] == {o: v for o, v in t.records[ALPHA].items() if o < first}
    assert [(topic, offset) for topic, offset, _ in errors] == [(ALPHA, first)]
    assert "failed CRC32C check" in errors[0][2]
    got, errors = read_partitions_apart(broker.bootstrap_servers, [ALPHA], check_crcs=True, start=following)
    assert errors == []
    assert got[ALPHA] == {o: v for o, v in t.records[ALPHA].items() if o >= following}


def _txn_batches(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[p : p + h.size_in_bytes] for p, h in iter_batch_headers(data)]


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_file(template: Template, tmp_path: Path, case: str) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template.data_dir, data_dir)
    (data_dir / ".lock").unlink(missing_ok=True)
    expect = CASES[case](template, data_dir)
    config = dict(BROKER_CONFIG)
    if case == "meta-properties-other-cluster":
        config["cluster.id"] = template.cluster_id
    txn_log = _segments(_partition(data_dir, TXN_TOPIC))[-1]
    txn_before = _txn_batches(template.data_dir / f"{TXN_TOPIC}-0" / txn_log.name)
    broker = Broker(config, data_dir=data_dir, run_dir=tmp_path / "run", startup_timeout=30)
    try:
        if not expect.starts:
            segments_before = sorted(p.relative_to(data_dir) for p in data_dir.glob("*/*.log"))
            with pytest.raises(BrokerError):
                broker.start()
            assert sorted(p.relative_to(data_dir) for p in data_dir.glob("*/*.log")) == segments_before
            output = broker.log_path.read_text(errors="replace")
            assert broker.returncode == 1, output
            assert "Traceback" not in output, output
            errors = [line for line in output.splitlines() if "level=ERROR" in line]
            assert len(errors) == 1, output
            assert expect.names in errors[0], output
            return
        broker.start()
        if expect.damaged_alpha_batch is not None:
            check_damaged_batch(broker, template, *expect.damaged_alpha_batch)
            got, errors = read_partitions(broker.bootstrap_servers, [BETA])
            assert errors == []
            assert got[BETA] == template.records[BETA]
            check_timestamps(broker, template, expect)
        else:
            check_records(broker, template, expect)
            check_timestamps(broker, template, expect)
        check_commits(broker, template, expect)
        check_dynamic_configs(broker, expect)
        if expect.alpha_end is None and expect.damaged_alpha_batch is None:
            check_duplicate_retry(broker, template)
        if expect.txn_log_prefix is not None:
            check_transactions_go_on(broker)
        assert broker.stop(timeout=30) == 0
        output = broker.log_path.read_text(errors="replace")
        assert not broker_problems(broker), output
        if expect.names is not None:
            assert expect.names in output, output
        if expect.txn_log_prefix is not None:  # cut at the damaged batch, then written on from there
            kept = [b for b in txn_before if struct.unpack_from(">q", b)[0] < expect.txn_log_prefix]
            after = _txn_batches(txn_log)
            assert after[: len(kept)] == kept
            assert struct.unpack_from(">q", after[len(kept)])[0] == expect.txn_log_prefix
    finally:
        broker.close()
