"""What a read_committed reader may see of an exactly-once query's output while the query runs: the check
the kill test in test_exactly_once.py applies to every position its concurrent reader sampled.

An output record carries the write task that wrote it, ``(micro-batch, task)``: with the two-phase sink
that is one transaction. The reader samples, one partition at a time and in time order, the partition's
last stable offset (LSO): everything a read_committed reader can read of that partition at that moment
is the records below it, and those never change afterwards (decided transactions only), so the records a
sample exposed are the final output's records below it. Two rules, both implied by the sink's protocol:

(a) per partition, a transaction is all or nothing: at every sample, each ``(batch, task)`` has either all
    of its records in that partition below the LSO or none of them;
(b) batches become visible in order: the driver commits every transaction of batch ``k`` before it
    commits any of ``k + 1`` (and a restart finishes ``k``'s intent before anything else), so once a record
    of batch ``m`` was visible in any partition (this sample or an earlier one), every batch below ``m`` is
    completely visible in the partition sampled now.

Not a rule: all of *one* batch at once across its tasks or partitions. Kafka has no multi-transaction
commit, so the driver commits a batch's transactions one after another and for those milliseconds (or,
when the driver dies mid-commit, until the restart finishes the batch's intent) a reader can see some of
a batch's transactions and not the others. :func:`partial_batch_samples` counts those samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["OutputRecord", "check_samples", "partial_batch_samples"]


@dataclass(frozen=True)
class OutputRecord:
    partition: int
    offset: int
    batch: int
    task: int
    key: bytes
    value: bytes


@dataclass(frozen=True)
class _Span:
    first: int  # the lowest offset of the span's records in one partition
    last: int  # the highest


def _widen(span: _Span | None, offset: int) -> _Span:
    return _Span(offset, offset) if span is None else _Span(min(span.first, offset), max(span.last, offset))


def _spans(
    records: Iterable[OutputRecord],
) -> tuple[dict[tuple[int, int, int], _Span], dict[tuple[int, int], _Span]]:
    """Per (partition, batch, task) and per (partition, batch): the offsets their records span."""
    by_task: dict[tuple[int, int, int], _Span] = {}
    by_batch: dict[tuple[int, int], _Span] = {}
    for r in records:
        by_task[r.partition, r.batch, r.task] = _widen(by_task.get((r.partition, r.batch, r.task)), r.offset)
        by_batch[r.partition, r.batch] = _widen(by_batch.get((r.partition, r.batch)), r.offset)
    return by_task, by_batch


def check_samples(final: Sequence[OutputRecord], samples: Sequence[tuple[int, int]]) -> None:
    """Raise AssertionError naming the first sample ``(partition, lso)`` (in time order) that breaks (a) or
    (b) against ``final``, every record of the output."""
    by_task, by_batch = _spans(final)
    batches_in: dict[int, list[tuple[int, _Span]]] = {}
    for (partition, batch), span in by_batch.items():
        batches_in.setdefault(partition, []).append((batch, span))
    tasks_in: dict[int, list[tuple[tuple[int, int], _Span]]] = {}
    for (partition, batch, task), span in by_task.items():
        tasks_in.setdefault(partition, []).append(((batch, task), span))
    seen = -1  # the highest batch any sample so far showed a record of
    for i, (partition, lso) in enumerate(samples):
        for (batch, task), span in tasks_in.get(partition, []):
            if span.first < lso <= span.last:
                raise AssertionError(
                    f"sample {i}: partition {partition} at LSO {lso} shows part of batch {batch} task {task}'s "
                    f"records (offsets {span.first}..{span.last})"
                )
        visible = [batch for batch, span in batches_in.get(partition, []) if span.first < lso]
        seen = max([seen, *visible])
        for batch, span in batches_in.get(partition, []):
            if batch < seen and span.last >= lso:
                raise AssertionError(
                    f"sample {i}: batch {seen} was visible, but partition {partition} at LSO {lso} does not show "
                    f"all of batch {batch} (offsets {span.first}..{span.last})"
                )


def partial_batch_samples(final: Sequence[OutputRecord], samples: Sequence[tuple[int, int]]) -> int:
    """How many samples showed some of a batch's transactions in their partition and not others."""
    by_task, _ = _spans(final)
    count = 0
    for partition, lso in samples:
        shown: dict[int, set[bool]] = {}
        for (p, batch, _task), span in by_task.items():
            if p == partition:
                shown.setdefault(batch, set()).add(span.last < lso)
        count += any(len(states) > 1 for states in shown.values())
    return count
