"""The shape of an exactly-once micro-batch, so that a replay that would write a different answer fails.

A replayed micro-batch is exactly-once only if Spark sends the same rows to the same write partitions
again (a changed ``minPartitions``, a repartition or a nondeterministic UDF break that). The sink keeps
what each batch looked like and compares a replay with it (pure logic here; the records live with the
sink's progress marks, :mod:`tidelog.spark.transactional`):

- Each task's progress mark carries a :class:`TaskMark` in its committed metadata: batch, partition,
  row count and :class:`RowsDigest` of the rows it wrote, committed in the same transaction as the rows.
- The driver's ``commit`` records a :class:`BatchShape` (batch, number of write partitions) after every
  task committed and before Spark records the batch.

Invariants:

- The digest is of the columns the sink writes (``topic``, ``partition``, ``key``, ``value``,
  ``headers``, ``timestamp``; any other column is ignored, as the sink ignores it), per row, and is
  independent of the order of the rows and of how they are split into Arrow batches (a shuffle may hand
  a task the same rows in another order), but not of how many times a row occurs.
- :func:`check_replayed_task` raises when a task's replay of a batch it committed has other rows;
  :func:`check_unrecorded_task` when a batch the driver recorded as complete is replayed with a partition
  it did not have; :func:`check_partition_count` when the replay's partition count differs. Each
  :class:`ReplayChangedError` names the batch and what changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import pyarrow as pa

__all__ = [
    "WRITTEN_COLUMNS",
    "BatchShape",
    "ReplayChangedError",
    "RowsDigest",
    "TaskMark",
    "check_partition_count",
    "check_replayed_task",
    "check_unrecorded_task",
]

WRITTEN_COLUMNS = ("topic", "partition", "key", "value", "headers", "timestamp")
_MODULUS = 1 << 256


class ReplayChangedError(RuntimeError):
    """A replayed micro-batch differs from what the sink committed for it; writing it would give a second,
    different answer."""


class RowsDigest:
    """An order-independent digest of a multiset of rows: the sum of each row's BLAKE2b-256, mod 2**256."""

    def __init__(self) -> None:
        self.rows = 0
        self._sum = 0

    def update(self, batch: pa.RecordBatch) -> None:
        names = tuple(name for name in WRITTEN_COLUMNS if batch.schema.get_field_index(name) >= 0)
        columns = [batch.column(batch.schema.get_field_index(name)).to_pylist() for name in names]
        # Each row's hash is keyed by the column names, so the same values in other columns differ.
        key = hashlib.sha256(repr(names).encode()).digest()
        blake2b, from_bytes = hashlib.blake2b, int.from_bytes
        total = self._sum
        for values in zip(*columns, strict=True):
            total += from_bytes(blake2b(repr(values).encode(), digest_size=32, key=key).digest(), "big")
        self._sum = total % _MODULUS
        self.rows += batch.num_rows

    def hexdigest(self) -> str:
        return f"{self._sum:064x}"


@dataclass(frozen=True)
class TaskMark:
    """What write partition ``partition`` committed for micro-batch ``batch``."""

    batch: int
    partition: int
    rows: int
    digest: str

    def to_metadata(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_metadata(cls, metadata: str | None) -> TaskMark | None:
        """The mark in a committed offset's metadata; None for none (a mark from before shapes were kept)."""
        try:
            fields = json.loads(metadata or "")
            return cls(
                int(fields["batch"]), int(fields["partition"]), int(fields["rows"]), str(fields["digest"])
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class BatchShape:
    """Micro-batch ``batch`` was committed by every one of its ``partitions`` write partitions."""

    batch: int
    partitions: int

    def to_metadata(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_metadata(cls, metadata: str | None) -> BatchShape | None:
        try:
            fields = json.loads(metadata or "")
            return cls(int(fields["batch"]), int(fields["partitions"]))
        except (ValueError, KeyError, TypeError):
            return None


def check_replayed_task(batch: int, partition: int, committed: TaskMark | None, replay: RowsDigest) -> None:
    """A task found its partition's mark of ``batch`` committed: the replay's rows must be the same."""
    if committed is None or committed.batch != batch:
        return  # nothing recorded for this batch (an older mark): nothing to compare
    if committed.rows != replay.rows or committed.digest != replay.hexdigest():
        raise ReplayChangedError(
            f"micro-batch {batch} was replayed with different rows in write partition {partition}: "
            f"{committed.rows} rows (digest {committed.digest[:16]}) were committed, the replay has "
            f"{replay.rows} rows (digest {replay.hexdigest()[:16]}); the plan is not deterministic "
            "(a nondeterministic function, or rows sent to other partitions), and writing the replay would "
            "give a second, different answer"
        )


def check_unrecorded_task(batch: int, partition: int, shape: BatchShape | None) -> None:
    """A task found no mark of ``batch`` for its partition: the batch must not be one recorded complete."""
    if shape is not None and shape.batch == batch:
        raise ReplayChangedError(
            f"micro-batch {batch} was committed by {shape.partitions} write partitions; its replay has write "
            f"partition {partition}, which would write rows a second time: keep the number of partitions "
            "of the write the same across a restart (minPartitions, repartition)"
        )


def check_partition_count(batch: int, partitions: int, shape: BatchShape | None) -> None:
    """The driver's commit of ``batch``: a replay of a recorded batch must have as many partitions."""
    if shape is not None and shape.batch == batch and shape.partitions != partitions:
        raise ReplayChangedError(
            f"micro-batch {batch} was committed by {shape.partitions} write partitions; its replay has "
            f"{partitions}: keep the number of partitions of the write the same across a restart "
            "(minPartitions, repartition)"
        )
