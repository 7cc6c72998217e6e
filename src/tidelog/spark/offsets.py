"""Offset ranges of a read, in Spark's Kafka JSON form, and admission control (pure: no Spark, no client).

Invariants:

- A position is ``{(topic, partition): offset}``; its JSON is Spark's Kafka source offset JSON,
  ``{"topic": {"0": 42, "1": 7}}``, topics and partitions sorted, so the same position always has the same
  text (Spark compares checkpointed offsets as JSON).
- :func:`rate_limit` never admits more than ``max_rows`` offsets in total, never moves a partition past
  its latest offset or behind its start, and admits ``min(max_rows, available)`` exactly: the share of
  each partition is proportional to its backlog (largest remainders break ties, in topic/partition
  order), so a backlog of N offsets drains in exactly ``ceil(N / max_rows)`` micro-batches.
- :func:`split_ranges` covers every offset of the input ranges exactly once, keeps each piece inside one
  topic-partition, and returns ranges in topic/partition/offset order.
- Data loss follows Spark's Kafka source: per-partition offsets JSON names exactly the partitions read
  (:func:`check_json_covers`); an out-of-range read never goes back below where it was
  (:func:`resume_after_out_of_range`); offsets below the query's position are found by
  :func:`backwards`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "OffsetRange",
    "OffsetsJsonError",
    "backwards",
    "check_json_covers",
    "Position",
    "TopicPartition",
    "position_from_json",
    "position_to_json",
    "rate_limit",
    "resume_after_out_of_range",
    "split_ranges",
]

TopicPartition = tuple[str, int]
Position = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic-partition: what one Spark task reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def position_to_json(position: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-ready dict Spark checkpoints (str keys only: Spark offsets hold primitive types)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(position.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def position_from_json(value: Mapping[str, Mapping[str, int]] | str) -> Position:
    data = json.loads(value) if isinstance(value, str) else value
    return {(topic, int(p)): int(o) for topic, partitions in data.items() for p, o in partitions.items()}


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> Position:
    """The end position admitting at most ``max_rows`` offsets from ``start`` towards ``latest``.

    Partitions in ``latest`` but not in ``start`` (new partitions) count from offset 0.
    """
    backlog = {tp: end - start.get(tp, 0) for tp, end in sorted(latest.items()) if end - start.get(tp, 0) > 0}
    total = sum(backlog.values())
    end = {tp: max(offset, start.get(tp, 0)) for tp, offset in latest.items()}
    if total <= max_rows:
        return end
    shares = {tp: size * max_rows // total for tp, size in backlog.items()}
    remainder = max_rows - sum(shares.values())
    by_fraction = sorted(backlog, key=lambda tp: (-(backlog[tp] * max_rows % total), tp))
    for tp in by_fraction[:remainder]:
        shares[tp] += 1
    for tp, share in shares.items():
        end[tp] = start.get(tp, 0) + share
    return end


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """At least ``min_partitions`` ranges (when there are that many offsets) by cutting the large ones.

    Like Spark's ``minPartitions``: a range is cut into pieces proportional to its share of all offsets.
    """
    nonempty = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in nonempty)
    if not min_partitions or len(nonempty) >= min_partitions or total == 0:
        return nonempty
    result: list[OffsetRange] = []
    for r in nonempty:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        step, extra = divmod(r.size, pieces)
        offset = r.from_offset
        for i in range(pieces):
            until = offset + step + (1 if i < extra else 0)
            result.append(OffsetRange(r.topic, r.partition, offset, until))
            offset = until
    return result


class OffsetsJsonError(ValueError):
    """Per-partition offsets JSON that does not name exactly the partitions the query reads (as Spark)."""


def check_json_covers(option: str, named: set[TopicPartition], partitions: set[TopicPartition]) -> None:
    """Spark's rule for ``startingOffsets`` / ``endingOffsets`` JSON: every partition read, and no other."""
    if named != partitions:

        def show(tps: set[TopicPartition]) -> str:
            return "{" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "}"

        raise OffsetsJsonError(
            f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
            "Use -1 for latest, -2 for earliest.\n"
            f"Specified: {show(named)} Assigned: {show(partitions)}"
        )


def resume_after_out_of_range(offset: int, until: int, earliest: int, latest: int) -> tuple[int, str | None]:
    """Where a read of ``[offset, until)`` goes on after an offset-out-of-range answer, and what was lost.

    Spark's ``KafkaDataConsumer.getEarliestAvailableOffsetBetween``: the log now holds
    ``[earliest, latest)``. No overlap with ``[offset, until)``: everything is lost, go to ``until``.
    ``offset`` still inside the log (a topic recreated and refilled fast): read on at ``offset``. Else
    skip to ``earliest``. Never before ``offset``: rows below a task's start are never read again.
    """
    if offset >= latest or earliest >= until:
        return (
            until,
            f"offsets {offset}..{until - 1} are no longer in the log (it now holds {earliest}..{latest - 1})",
        )
    if offset >= earliest:
        return offset, None
    return earliest, f"offsets {offset}..{earliest - 1} were deleted"


def backwards(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> Position:
    """Partitions whose latest offset is below the offset the query already reached (records deleted, or
    the topic deleted and created again): ``{tp: latest}``."""
    return {tp: offset for tp, offset in latest.items() if tp in start and offset < start[tp]}
