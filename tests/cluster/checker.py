"""The failover checker: what the clients were told during a scenario, checked against what the cluster
holds afterwards.

A :class:`History` records, from any number of client threads at once:

- every value a producer sent (``sent``), before the client had it, with whether that producer is
  idempotent;
- every acknowledgement (``acked``: partition and offset) and every failure the client reported for a
  value (``failed``: the error it was told, e.g. ``NOT_ENOUGH_REPLICAS`` or ``_MSG_TIMED_OUT``);
- every record a consumer read (``read``: partition, offset, value); the same offset read twice with two
  different values is recorded as a conflict at once.

After the scenario, :func:`read_back` reads every partition from its log start to its high watermark and
:func:`check` asserts, partition by partition:

1. every acknowledged value is in the log at the offset it was acknowledged at (nothing acknowledged lost
   or moved);
2. every value in the log was sent by someone (nothing appears that was never sent);
3. every record a consumer read is still there with the same value (nothing once read below the high
   watermark disappears or changes; consumers only ever see records below it);
4. no value of an idempotent producer appears twice (across all partitions), and no idempotent producer
   was told a fatal error. A broker deduplicates a producer's retries within one producer epoch (Kafka's
   rule): a copy written under a *higher* epoch of the same producer id is the client re-sending records
   it had not seen acknowledged after bumping its epoch, which librdkafka's idempotent producer does when
   a leader answers OUT_OF_ORDER_SEQUENCE_NUMBER during a leader change (confluentinc/librdkafka#4953; the
   Java client does not). Such copies are listed in :attr:`History.resent_under_new_epoch`, not failed;
   two copies under one epoch always fail;

:func:`check_order` that every reader was given each partition's offsets exactly once and in order, and
that chosen producers' values sit in each partition in the order they were sent (its rules 5 and 6),
and :func:`compare_replicas` that every replica in the ISR holds the same bytes, batch by batch, up to
the high watermark, read straight from the segment files in each broker's data directory.

A failure raises :class:`CheckFailed` (an ``AssertionError``) whose message starts with the scenario's
seed and lists, per partition, the count and the first few offsets of each kind of violation with the
value expected and the value found, so the diff reads without a debugger.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.protocol.records import CorruptRecordError, iter_batch_headers
from tidelog.storage.layout import offset_from_file_name

__all__ = [
    "Batch",
    "CheckFailed",
    "History",
    "PartitionLog",
    "TopicPartition",
    "check",
    "check_order",
    "compare_replicas",
    "producer_stamps",
    "read_back",
    "replica_batches",
    "seed_banner",
]

TopicPartition = tuple[str, int]
SHOWN = 8  # how many offsets of each kind a failure message lists per partition


class CheckFailed(AssertionError):
    """The cluster lost, changed or invented data; the message is the readable diff."""


def seed_banner(seed: int) -> str:
    return f"cluster scenario seed {seed} (rerun exactly this one with --cluster-seed={seed})"


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent a value: the producer's name and whether it is idempotent."""

    producer: str
    idempotent: bool


@dataclass(frozen=True, slots=True)
class Ack:
    producer: str
    tp: TopicPartition
    offset: int
    value: bytes


class History:
    """Everything the clients did and were told in one scenario (thread-safe)."""

    def __init__(self, seed: int, label: str) -> None:
        self.seed = seed
        self.label = label
        self._lock = threading.Lock()
        self.sent: dict[bytes, Sender] = {}
        self.acks: list[Ack] = []
        self.acks_without_offset: list[tuple[str, TopicPartition, bytes]] = []
        self.failures: dict[bytes, str] = {}
        self.fatal: list[tuple[str, str]] = []
        self.reads: dict[TopicPartition, dict[int, bytes | None]] = defaultdict(dict)
        self.read_conflicts: list[tuple[TopicPartition, int, bytes | None, bytes | None]] = []
        # every offset each reader was given, in the order it was given them (check_order)
        self.read_order: dict[tuple[str, TopicPartition], list[int]] = defaultdict(list)
        # values an idempotent producer wrote again under a new producer epoch (check's rule 4)
        self.resent_under_new_epoch: list[tuple[bytes, list[tuple[TopicPartition, int]]]] = []
        self.extra_values: set[bytes] = set()
        self.events: list[tuple[float, str]] = []
        self._start = time.monotonic()

    # ---- recording (any thread) ----

    def value(self, producer: str, seq: int) -> bytes:
        """The deterministic value of a producer's ``seq``-th message: ``label/producer/seq``."""
        return f"{self.label}/{producer}/{seq:07d}".encode()

    def record_sent(self, producer: str, value: bytes, *, idempotent: bool) -> None:
        with self._lock:
            if value in self.sent:
                raise ValueError(f"value {value!r} sent twice: values must be unique")
            self.sent[value] = Sender(producer, idempotent)

    def record_ack(self, producer: str, value: bytes, topic: str, partition: int, offset: int | None) -> None:
        """``offset`` None: acknowledged without an offset (librdkafka reports a retried idempotent batch
        the broker answered DUPLICATE_SEQUENCE_NUMBER so); the value must then be in the partition."""
        with self._lock:
            if offset is None or offset < 0:
                self.acks_without_offset.append((producer, (topic, partition), value))
            else:
                self.acks.append(Ack(producer, (topic, partition), offset, value))

    def record_failure(self, producer: str, value: bytes, error: str, *, fatal: bool = False) -> None:
        with self._lock:
            self.failures[value] = error
            if fatal:
                self.fatal.append((producer, error))

    def record_read(
        self, topic: str, partition: int, offset: int, value: bytes | None, *, reader: str | None = None
    ) -> None:
        """``reader`` names the consumer (default: the calling thread's name) for :func:`check_order`."""
        tp = (topic, partition)
        who = reader if reader is not None else threading.current_thread().name
        with self._lock:
            seen = self.reads[tp]
            if offset in seen and seen[offset] != value:
                self.read_conflicts.append((tp, offset, seen[offset], value))
            seen[offset] = value
            self.read_order[(who, tp)].append(offset)

    def allow(self, values: Iterable[bytes]) -> None:
        """Values written outside the recorded producers (a transformer's output, a preload)."""
        with self._lock:
            self.extra_values.update(values)

    def event(self, what: str) -> None:
        """A timestamped note (a fault, a leader change) for the failure message."""
        with self._lock:
            self.events.append((time.monotonic() - self._start, what))

    # ---- reading ----

    @property
    def acked_count(self) -> int:
        return len(self.acks) + len(self.acks_without_offset)

    def acked_by(self, producer: str) -> int:
        with self._lock:
            return sum(1 for a in self.acks if a.producer == producer) + sum(
                1 for a in self.acks_without_offset if a[0] == producer
            )

    @property
    def read_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.reads.values())

    def failure_counts(self) -> Counter[str]:
        with self._lock:
            return Counter(self.failures.values())

    def summary(self) -> str:
        with self._lock:
            failures = Counter(self.failures.values())
            fail_text = ", ".join(f"{name} x{n}" for name, n in failures.most_common()) or "none"
            events = "; ".join(f"{t:.1f}s {what}" for t, what in self.events[-20:])
            reads = sum(len(v) for v in self.reads.values())
            ends = {f"{t}-{p}": max(v) + 1 for (t, p), v in sorted(self.reads.items()) if v}
            return (
                f"sent {len(self.sent)}, acknowledged {len(self.acks)} (and {len(self.acks_without_offset)}"
                f" without an offset), failed {len(self.failures)} "
                f"({fail_text}), read {reads} (up to {ends})\nevents: {events or 'none'}"
                + (
                    f"\nre-sent by a client under a new producer epoch: {len(self.resent_under_new_epoch)}"
                    if self.resent_under_new_epoch
                    else ""
                )
            )


@dataclass(slots=True)
class PartitionLog:
    """A partition as read back: ``records`` maps each offset in [log_start, high_watermark) to its value."""

    log_start: int
    high_watermark: int
    records: dict[int, bytes | None] = field(default_factory=dict)


def read_back(
    bootstrap: str,
    partitions: Mapping[str, int],
    *,
    isolation_level: str = "read_uncommitted",
    timeout: float = 60.0,
) -> dict[TopicPartition, PartitionLog]:
    """Every record of every partition of ``partitions`` (topic -> partition count), from its log start up
    to the high watermark the leader answers now (the last stable offset under read_committed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tidelog-cluster-checker",
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    try:
        logs: dict[TopicPartition, PartitionLog] = {}
        deadline = time.monotonic() + timeout
        for topic, count in partitions.items():
            for partition in range(count):
                while True:
                    try:
                        low, high = consumer.get_watermark_offsets(
                            KafkaTopicPartition(topic, partition), timeout=5, cached=False
                        )
                        break
                    except KafkaException:
                        if time.monotonic() >= deadline:
                            raise
                logs[(topic, partition)] = PartitionLog(low, high)
        consumer.assign(
            [
                KafkaTopicPartition(t, p, OFFSET_BEGINNING)
                for (t, p), log in logs.items()
                if log.high_watermark
            ]
        )
        done = {tp for tp, log in logs.items() if log.high_watermark <= log.log_start}
        while len(done) < len(logs):
            if time.monotonic() >= deadline:
                short = {tp: (max(logs[tp].records, default=None), logs[tp].high_watermark) for tp in logs}
                raise CheckFailed(f"read back did not reach the high watermarks in {timeout:g} s: {short}")
            for msg in consumer.consume(500, 1.0):
                if msg.error():
                    continue
                tp = (msg.topic(), msg.partition())
                log = logs[tp]
                offset = msg.offset()
                if offset < log.high_watermark:
                    log.records[offset] = msg.value()
            for tp, log in logs.items():
                if tp in done:
                    continue
                position = consumer.position([KafkaTopicPartition(tp[0], tp[1])])[0].offset
                if position >= log.high_watermark:
                    done.add(tp)
        return logs
    finally:
        consumer.close()


# ---- the data check ----------------------------------------------------------------------------------


def _show(value: bytes | None) -> str:
    if value is None:
        return "nothing"
    return repr(value)


def check(
    history: History,
    final: Mapping[TopicPartition, PartitionLog],
    *,
    replicas: str = "",
    producers: Mapping[TopicPartition, Mapping[int, tuple[int, int]]] | None = None,
) -> None:
    """Assert the four data properties of the module docstring; :class:`CheckFailed` with the diff.
    ``producers`` maps each partition's offsets to the (producer id, producer epoch) of their batch
    (:func:`producer_stamps`); without it every duplicate fails."""
    problems: list[str] = []
    where: dict[bytes, list[tuple[TopicPartition, int]]] = defaultdict(list)
    for tp, log in final.items():
        for offset, value in log.records.items():
            if value is not None:
                where[value].append((tp, offset))
    acks_by_tp: dict[TopicPartition, list[Ack]] = defaultdict(list)
    for ack in history.acks:
        acks_by_tp[ack.tp].append(ack)
    for tp in sorted(set(final) | set(acks_by_tp) | set(history.reads)):
        log = final.get(tp)
        lines: list[str] = []
        if log is None:
            problems.append(f"{tp[0]}-{tp[1]}: acknowledged or read, but not read back at all")
            continue
        # 1. acknowledged: there, at its offset
        lost: list[tuple[int, bytes, bytes | None, list[tuple[TopicPartition, int]]]] = []
        for ack in sorted(acks_by_tp.get(tp, []), key=lambda a: a.offset):
            found = log.records.get(ack.offset)
            if found != ack.value:
                lost.append((ack.offset, ack.value, found, where.get(ack.value, [])))
        if lost:
            lines.append(f"  {len(lost)} acknowledged records missing or moved:")
            for offset, value, found, elsewhere in lost[:SHOWN]:
                moved = f" (it is at {elsewhere[:3]})" if elsewhere else ""
                lines.append(f"    offset {offset}: acknowledged {value!r}, found {_show(found)}{moved}")
        unplaced = [
            value
            for _producer, where_tp, value in history.acks_without_offset
            if where_tp == tp and not any(t == tp for t, _o in where.get(value, []))
        ]
        if unplaced:
            lines.append(
                f"  {len(unplaced)} records acknowledged without an offset are not in the partition:"
            )
            lines.extend(f"    {value!r}" for value in unplaced[:SHOWN])
        # 2. nothing never sent
        extra = [
            (offset, value)
            for offset, value in sorted(log.records.items())
            if value is None or (value not in history.sent and value not in history.extra_values)
        ]
        if extra:
            lines.append(f"  {len(extra)} records nobody sent, first at offsets:")
            lines.extend(f"    offset {offset}: {_show(value)}" for offset, value in extra[:SHOWN])
        # 3. what was read stays
        changed = [
            (offset, value, log.records.get(offset))
            for offset, value in sorted(history.reads.get(tp, {}).items())
            if log.records.get(offset) != value
        ]
        if changed:
            lines.append(f"  {len(changed)} records read by a consumer are gone or changed:")
            lines.extend(
                f"    offset {offset}: read {_show(value)}, now {_show(found)}"
                + (" (below the log start)" if offset < log.log_start else "")
                for offset, value, found in changed[:SHOWN]
            )
        if lines:
            problems.append(
                f"{tp[0]}-{tp[1]} [log start {log.log_start}, high watermark {log.high_watermark}]:"
            )
            problems.extend(lines)
    # 3b. a consumer saw two values at one offset
    if history.read_conflicts:
        problems.append(f"{len(history.read_conflicts)} offsets read with two different values:")
        problems.extend(
            f"  {tp[0]}-{tp[1]} offset {offset}: {_show(a)} then {_show(b)}"
            for tp, offset, a, b in history.read_conflicts[:SHOWN]
        )
    # 4. idempotence: once each, no fatal error
    duplicated = []
    for value, places in where.items():
        sender = history.sent.get(value)
        if len(places) < 2 or sender is None or not sender.idempotent:
            continue
        if _resent_under_new_epochs(sorted(places), producers):
            history.resent_under_new_epoch.append((value, sorted(places)))
        else:
            duplicated.append((sorted(places), value))
    duplicated.sort()
    if duplicated:
        problems.append(f"{len(duplicated)} values of idempotent producers written more than once:")
        problems.extend(f"  {value!r} at {places}" for places, value in duplicated[:SHOWN])
    if history.fatal:
        problems.append(f"idempotent producers were told fatal errors: {history.fatal[:SHOWN]}")
    if replicas:
        problems.append(replicas)
    if problems:
        totals = ", ".join(f"{t}-{p}: {len(log.records)} records" for (t, p), log in sorted(final.items()))
        raise CheckFailed(
            "\n".join([seed_banner(history.seed), history.summary(), f"read back: {totals}", *problems])
        )


def check_order(
    history: History, final: Mapping[TopicPartition, PartitionLog], *, in_send_order: Iterable[str] = ()
) -> None:
    """Order, beyond :func:`check`'s data properties; :class:`CheckFailed` with the diff:

    5. every reader that read a partition was given each of its offsets from the log start to the high
       watermark exactly once, in offset order (no gap, no repeat, no step back, across leader changes);
    6. the values of each producer in ``in_send_order`` (idempotent ones: Kafka keeps their order per
       partition) appear in each partition in the order they were sent (a copy a client re-sent under a new
       producer epoch, rule 4, is judged by its first place).
    """
    problems: list[str] = []
    for (reader, tp), offsets in sorted(history.read_order.items()):
        log = final.get(tp)
        if log is None:
            continue  # check() reports partitions not read back
        expected = list(range(log.log_start, log.high_watermark))
        if offsets != expected:
            problems.append(f"{reader} on {tp[0]}-{tp[1]}: {_order_diff(offsets, expected)}")
    ordered = set(in_send_order)
    for tp, log in sorted(final.items()):
        last: dict[str, tuple[int, int]] = {}  # producer -> (seq, offset) of its latest value so far
        seen: set[bytes] = set()
        for offset, value in sorted(log.records.items()):
            if value is None or value in seen:
                continue
            seen.add(value)
            sender = history.sent.get(value)
            if sender is None or sender.producer not in ordered:
                continue
            seq = int(value.rsplit(b"/", 1)[1])
            before = last.get(sender.producer)
            if before is not None and seq < before[0]:
                problems.append(
                    f"{tp[0]}-{tp[1]}: {sender.producer}'s seq {seq} at offset {offset} after its seq "
                    f"{before[0]} at offset {before[1]} (sent in the other order)"
                )
            last[sender.producer] = (seq, offset)
    if problems:
        raise CheckFailed("\n".join([seed_banner(history.seed), history.summary(), *problems[: SHOWN * 4]]))


def _order_diff(offsets: Sequence[int], expected: Sequence[int]) -> str:
    """Where a reader's offsets first part from the expected run, and the counts."""
    first = next(
        (i for i, (a, b) in enumerate(zip(offsets, expected, strict=False)) if a != b),
        min(len(offsets), len(expected)),
    )
    got = list(offsets[max(0, first - 2) : first + 3])
    want = list(expected[max(0, first - 2) : first + 3])
    return (
        f"read {len(offsets)} offsets ({len(set(offsets))} distinct), expected {len(expected)} "
        f"[{expected[0] if expected else '-'}, {expected[-1] + 1 if expected else '-'}); first difference "
        f"at position {first}: read {got}, expected {want}"
    )


def _resent_under_new_epochs(
    places: Sequence[tuple[TopicPartition, int]],
    producers: Mapping[TopicPartition, Mapping[int, tuple[int, int]]] | None,
) -> bool:
    """Whether each copy after the first (in offset order, one partition) was written by the same producer
    id under a higher producer epoch than the copy before it."""
    if producers is None or len({tp for tp, _offset in places}) != 1:
        return False
    stamps = [producers.get(tp, {}).get(offset) for tp, offset in places]
    return all(
        a is not None and b is not None and a[0] == b[0] and b[1] > a[1]
        for a, b in itertools.pairwise(stamps)
    )


def producer_stamps(batches: Iterable[Batch]) -> dict[int, tuple[int, int]]:
    """offset -> (producer id, producer epoch) of the batch holding it (batches with a producer id only)."""
    stamps: dict[int, tuple[int, int]] = {}
    for batch in batches:
        if batch.producer_id >= 0:
            for offset in range(batch.base_offset, batch.last_offset + 1):
                stamps[offset] = (batch.producer_id, batch.producer_epoch)
    return stamps


# ---- replicas, byte for byte ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """One stored batch: its offsets, its leader epoch, its producer and its bytes."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    producer_id: int
    producer_epoch: int
    data: bytes

    def describe(self) -> str:
        return (
            f"batch [{self.base_offset}, {self.last_offset}] epoch {self.leader_epoch} "
            f"({len(self.data)} bytes, crc {int.from_bytes(self.data[17:21], 'big'):#010x})"
        )


def replica_batches(data_dir: Path, topic: str, partition: int, high_watermark: int) -> Iterator[Batch]:
    """The batches of one replica below ``high_watermark``, in offset order, from its segment files.

    Only live segments (``<base offset>.log``; not ``.deleted`` / ``.cleaned`` / ``.swap``) are read,
    oldest first. Reading stops at the first batch at or above the high watermark, or at a torn or
    zeroed tail (what lies beyond the last whole batch is not data).
    """
    directory = data_dir / f"{topic}-{partition}"
    segments = sorted(
        (base, path)
        for path in directory.glob("*.log")
        if (base := offset_from_file_name(path.name)) is not None and path.name.endswith(".log")
    )
    for _base, path in segments:
        data = path.read_bytes()
        try:
            for position, header in iter_batch_headers(data):
                if header.base_offset >= high_watermark:
                    return
                size = header.batch_length + 12
                yield Batch(
                    header.base_offset,
                    header.base_offset + header.last_offset_delta,
                    header.partition_leader_epoch,
                    header.producer_id,
                    header.producer_epoch,
                    data[position : position + size],
                )
        except CorruptRecordError:
            continue  # a zeroed tail after a crash: the next segment (if any) goes on


def compare_replicas(
    data_dirs: Mapping[int, Path], topic: str, partition: int, high_watermark: int
) -> list[str]:
    """Problems found comparing the replicas in ``data_dirs`` (broker id -> data dir) below the high
    watermark; empty if they are byte-identical there.

    Replicas may have deleted different old segments (retention runs on each broker on its own schedule):
    the comparison starts at the highest first offset any replica still has. Each replica must reach the
    high watermark (an ISR member has everything below it).
    """
    logs = {
        broker: list(replica_batches(d, topic, partition, high_watermark)) for broker, d in data_dirs.items()
    }
    problems: list[str] = []
    name = f"{topic}-{partition}"
    start = max((batches[0].base_offset for batches in logs.values() if batches), default=0)
    trimmed = {broker: [b for b in batches if b.base_offset >= start] for broker, batches in logs.items()}
    for broker, batches in sorted(trimmed.items()):
        end = batches[-1].last_offset + 1 if batches else start
        if end < high_watermark:
            problems.append(
                f"{name}: broker {broker}'s log ends at {end}, below the high watermark {high_watermark}"
            )
    brokers = sorted(trimmed)
    reference = brokers[0]
    for other in brokers[1:]:
        for a, b in zip(trimmed[reference], trimmed[other], strict=False):
            if a != b:
                problems.append(
                    f"{name}: brokers {reference} and {other} differ at offset {min(a.base_offset, b.base_offset)}:"
                    f" {a.describe()} vs {b.describe()}"
                )
                break
    return problems


def describe_replica_problems(problems: Sequence[str]) -> str:
    if not problems:
        return ""
    return "replicas differ below the high watermark:\n" + "\n".join(f"  {p}" for p in problems[: SHOWN * 2])
