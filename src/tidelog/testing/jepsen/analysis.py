"""The checker's analysis: a :class:`~tidelog.testing.jepsen.history.History` and the log as read back
after the run, turned into a :class:`Report` of anomalies. Pure: no clients, no broker.

Anomaly kinds (each a key of :attr:`Report.anomalies`, each entry one readable line):

- ``lost``: a value acknowledged at (partition, offset) is not there in the final log (or, acknowledged
  without an offset, not anywhere in its partition); a committed transaction of which nothing is left;
- ``duplicated``: a value of an idempotent or transactional producer stored more than once;
- ``out-of-order``: within one partition a producer's values are stored, or were acknowledged, in
  another order than it sent them (idempotence keeps a producer's order per partition);
- ``unexpected``: a stored value nobody sent;
- ``non-monotonic``: a consumer read an offset not above the last one it read in that partition;
- ``gap``: a consumer of a topic without control records skipped offsets (all below the high watermark
  are records, so the next offset read must be the previous plus one);
- ``read-changed``: a consumer read a value at an offset that the final log no longer holds there;
- ``aborted-read``: a value of an aborted transaction read by a read_committed consumer or present in
  the final read_committed log;
- ``half-visible``: a transaction of which some values but not all are in the final read_committed log;
- ``fatal``: an idempotent or transactional producer was told a fatal error (it cannot go on).

An empty report (:attr:`Report.ok`) means none of these; its :meth:`Report.render` starts with the seed.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from tidelog.testing.jepsen.history import History, Op, split_value

__all__ = ["ANOMALIES", "FinalPartition", "Report", "TopicPartition", "analyse"]

TopicPartition = tuple[str, int]
ANOMALIES = (
    "lost",
    "duplicated",
    "out-of-order",
    "unexpected",
    "non-monotonic",
    "gap",
    "read-changed",
    "aborted-read",
    "half-visible",
    "fatal",
)
SHOWN = 10  # lines shown per anomaly kind


@dataclass(slots=True)
class FinalPartition:
    """A partition as read back after the run: ``records`` maps each offset in [log_start,
    high_watermark) that holds a record to its value (a read_committed read leaves out aborted records
    and control markers)."""

    log_start: int
    high_watermark: int
    records: dict[int, bytes | None] = field(default_factory=dict)


@dataclass(slots=True)
class Report:
    seed: int
    rerun: str = ""
    anomalies: dict[str, list[str]] = field(default_factory=lambda: {kind: [] for kind in ANOMALIES})
    stats: dict[str, int] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def add(self, kind: str, line: str) -> None:
        self.anomalies[kind].append(line)

    def render(self) -> str:
        head = f"jepsen seed {self.seed}" + (f" (rerun: {self.rerun})" if self.rerun else "")
        lines = [head, "stats: " + ", ".join(f"{k} {v}" for k, v in self.stats.items())]
        if self.faults:
            lines.append("faults: " + "; ".join(self.faults))
        if self.ok:
            lines.append("no anomalies")
        for kind in ANOMALIES:
            found = self.anomalies[kind]
            if found:
                lines.append(f"{kind}: {len(found)}")
                lines.extend(f"  {line}" for line in found[:SHOWN])
        return "\n".join(lines)


def analyse(
    history: History,
    final: Mapping[TopicPartition, FinalPartition],
    *,
    gapless_topics: Collection[str] = (),
    committed_topics: Collection[str] = (),
) -> Report:
    """Every anomaly of the module docstring. ``gapless_topics``: topics with no control records (no
    transactions), whose consumers must read consecutive offsets. ``committed_topics``: topics whose
    consumers and final read-back use read_committed (aborted values must not be seen there)."""
    ops = history.ops
    report = Report(history.seed)
    sends = {op.value: op for op in ops if op.kind == "send" and op.value is not None}
    where: dict[bytes, list[tuple[TopicPartition, int]]] = defaultdict(list)
    for tp, log in final.items():
        for offset, value in sorted(log.records.items()):
            if value is not None:
                where[value].append((tp, offset))
    report.stats = {
        "sent": len(sends),
        "acknowledged": sum(1 for op in ops if op.kind == "ack"),
        "failed": sum(1 for op in ops if op.kind == "fail"),
        "read": sum(1 for op in ops if op.kind == "read"),
        "transactions": sum(1 for op in ops if op.kind == "txn"),
        "stored": sum(len(log.records) for log in final.values()),
    }
    report.faults = [f"{op.time:.1f}s {op.error}" for op in ops if op.kind == "fault"]
    _acknowledged(ops, final, where, report)
    _stored(sends, final, where, report)
    _producer_order(ops, sends, final, report)
    _consumers(ops, final, gapless_topics, report)
    _transactions(ops, where, committed_topics, report)
    for op in ops:
        if op.kind == "fail" and op.fatal:
            report.add("fatal", f"{op.client} at {op.time:.1f}s: {op.error}")
    return report


def _tp(op: Op) -> TopicPartition:
    assert op.topic is not None
    assert op.partition is not None
    return (op.topic, op.partition)


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _acknowledged(
    ops: list[Op],
    final: Mapping[TopicPartition, FinalPartition],
    where: Mapping[bytes, list[tuple[TopicPartition, int]]],
    report: Report,
) -> None:
    for op in ops:
        if op.kind != "ack" or op.value is None:
            continue
        tp = _tp(op)
        log = final.get(tp)
        if op.offset is None:
            if not any(t == tp for t, _ in where.get(op.value, [])):
                report.add(
                    "lost", f"{_name(tp)}: {op.value!r} acknowledged (no offset) to {op.client}, not stored"
                )
            continue
        if log is not None and op.offset < log.log_start:
            continue  # deleted by retention, not lost
        found = None if log is None else log.records.get(op.offset)
        if found != op.value:
            elsewhere = [o for t, o in where.get(op.value, []) if t == tp]
            report.add(
                "lost",
                f"{_name(tp)} offset {op.offset}: {op.value!r} acknowledged to {op.client} at {op.time:.1f}s, "
                f"found {found!r}" + (f" (it is at {elsewhere[:3]})" if elsewhere else ""),
            )


def _stored(
    sends: Mapping[bytes, Op],
    final: Mapping[TopicPartition, FinalPartition],
    where: Mapping[bytes, list[tuple[TopicPartition, int]]],
    report: Report,
) -> None:
    for tp, log in sorted(final.items()):
        for offset, value in sorted(log.records.items()):
            if value is None or value not in sends:
                report.add("unexpected", f"{_name(tp)} offset {offset}: {value!r} was never sent")
    for value, places in sorted(where.items()):
        sent = sends.get(value)
        if len(places) > 1 and sent is not None and (sent.idempotent or sent.txn is not None):
            shown = ", ".join(f"{_name(tp)}@{o}" for tp, o in places[:4])
            report.add("duplicated", f"{value!r} ({sent.client}) stored {len(places)} times: {shown}")


def _producer_order(
    ops: list[Op], sends: Mapping[bytes, Op], final: Mapping[TopicPartition, FinalPartition], report: Report
) -> None:
    # stored order: per partition and idempotent client, sequence numbers rise with the offset
    for tp, log in sorted(final.items()):
        last: dict[str, tuple[int, int]] = {}
        seen: set[bytes] = set()
        for offset, value in sorted(log.records.items()):
            sent = sends.get(value) if value is not None else None
            parsed = split_value(value) if value is not None else None
            if value is None or sent is None or parsed is None or not sent.idempotent or value in seen:
                continue  # a second copy is reported as duplicated, not again as out of order
            seen.add(value)
            client, seq = parsed
            before = last.get(client)
            if before is not None and seq < before[1]:
                report.add(
                    "out-of-order",
                    f"{_name(tp)}: {client}'s seq {seq} stored at offset {offset}, after its seq {before[1]} "
                    f"at offset {before[0]}",
                )
            last[client] = (offset, seq)
    # acknowledged order: per partition and idempotent client, a later send is acknowledged at a higher offset
    acked: dict[tuple[str, TopicPartition], list[tuple[int, int]]] = defaultdict(list)
    for op in ops:
        if op.kind == "ack" and op.offset is not None and op.value is not None:
            sent = sends.get(op.value)
            parsed = split_value(op.value)
            if sent is not None and sent.idempotent and parsed is not None:
                acked[(parsed[0], _tp(op))].append((parsed[1], op.offset))
    for (client, tp), pairs in sorted(acked.items()):
        pairs.sort()
        for (seq_a, off_a), (seq_b, off_b) in itertools.pairwise(pairs):
            if off_b <= off_a:
                report.add(
                    "out-of-order",
                    f"{_name(tp)}: {client}'s seq {seq_b} acknowledged at offset {off_b}, not after its seq "
                    f"{seq_a} at {off_a}",
                )


def _consumers(
    ops: list[Op],
    final: Mapping[TopicPartition, FinalPartition],
    gapless_topics: Collection[str],
    report: Report,
) -> None:
    last: dict[tuple[str, TopicPartition], int] = {}
    for op in ops:
        if op.kind != "read" or op.offset is None:
            continue
        tp = _tp(op)
        key = (op.client, tp)
        before = last.get(key)
        if before is not None and op.offset <= before:
            report.add(
                "non-monotonic",
                f"{op.client} read {_name(tp)} offset {op.offset} after offset {before} at {op.time:.1f}s",
            )
        elif before is not None and tp[0] in gapless_topics and op.offset > before + 1:
            report.add(
                "gap",
                f"{op.client} read {_name(tp)} offset {op.offset} right after offset {before}: "
                f"skipped {op.offset - before - 1} at {op.time:.1f}s",
            )
        last[key] = op.offset if before is None else max(before, op.offset)
        log = final.get(tp)
        if log is not None and op.offset >= log.log_start and log.records.get(op.offset) != op.value:
            report.add(
                "read-changed",
                f"{op.client} read {op.value!r} at {_name(tp)} offset {op.offset}, the log now holds "
                f"{log.records.get(op.offset)!r}",
            )


def _transactions(
    ops: list[Op],
    where: Mapping[bytes, list[tuple[TopicPartition, int]]],
    committed_topics: Collection[str],
    report: Report,
) -> None:
    outcomes = {op.txn: op for op in ops if op.kind == "txn" and op.txn is not None}
    aborted = {v: op.txn for op in outcomes.values() if op.outcome == "abort" for v in op.values}
    for op in ops:
        if op.kind == "read" and op.topic in committed_topics and op.value in aborted:
            report.add(
                "aborted-read",
                f"{op.client} read {op.value!r} of aborted transaction {aborted[op.value]} at "
                f"{_name(_tp(op))} offset {op.offset}",
            )
    for txn, op in sorted(outcomes.items()):
        stored = [v for v in op.values if any(tp[0] in committed_topics for tp, _ in where.get(v, []))]
        if op.outcome == "abort":
            for value in stored:
                report.add("aborted-read", f"{value!r} of aborted transaction {txn} is in the committed log")
        elif stored and len(stored) < len(op.values):
            missing = [v for v in op.values if v not in stored]
            report.add(
                "half-visible",
                f"transaction {txn} ({op.outcome}): {len(stored)} of {len(op.values)} values visible, "
                f"missing {missing[:3]!r}",
            )
        elif not stored and op.outcome == "commit" and op.values:
            report.add("lost", f"committed transaction {txn}: none of its {len(op.values)} values is stored")
