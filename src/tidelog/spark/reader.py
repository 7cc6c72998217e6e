"""Batch and streaming readers of the ``tidelog`` data source.

Invariants:

- Reader objects hold only the parsed options (immutable) plus, in the process that plans micro-batches,
  a cached :class:`~tidelog.spark.cluster.ClusterView` and the ``availableNow`` target: Spark runs the
  offset methods, ``read()`` and the writers in different Python processes, so nothing else may be
  carried between calls. Everything a task needs travels in its :class:`RangePartition`.
- Streaming offsets are Spark's Kafka JSON (``{"topic": {"0": 42}}``) and are the next offset to read
  per partition; a micro-batch reads ``[start, end)`` of every partition in ``end``.
- ``latestOffset`` answers the high watermark (the last stable offset under ``read_committed``) of every
  partition the subscription covers now, fetched in one Metadata and one batched ListOffsets request
  and kept for ``reportLatestOffset`` of the same trigger. Partitions that appear later (new
  partitions, new topics matching ``subscribePattern``) start at offset 0, i.e. from their earliest
  record. With a :class:`ReadMaxRows` limit (``maxOffsetsPerTrigger``) the end is
  :func:`~tidelog.spark.offsets.rate_limit` of it; with ``ReadAllAvailable`` the options' limit is
  ignored, as Spark requires. ``minOffsetsPerTrigger`` holds a micro-batch back (answers ``start``)
  until that many offsets are available or ``maxTriggerDelay`` (default 15m) passed since the last one;
  the first micro-batch of a run is never held, as in Spark.
  After ``prepareForTriggerAvailableNow`` no end passes the latest offsets of that moment.
  Without ``maxOffsetsPerTrigger`` the reader logs one warning per query run naming the option
  (``getDefaultReadLimit``, which Spark asks once per run).
- Data loss, as Spark's Kafka source reports it (raised as :class:`~tidelog.spark.fetch.DataLossError`
  with ``failOnDataLoss=true``, logged and skipped with ``false``):
  a partition of the start position missing from the broker's metadata (its topic deleted) is reported
  in ``latestOffset``; with ``false`` it stays in the end position at its start offset, so a partition
  only briefly missing goes on where it was and is never read again from 0. A latest offset below the
  start (records deleted, or the topic deleted and created again) is first asked again
  (``fetchOffset.numRetries`` times, as Spark does against KAFKA-7703), then becomes the end offset and
  is reported in ``partitions``; that partition reads on from the new, lower offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from tidelog.spark.cluster import ClusterView
from tidelog.spark.fetch import DataLossError, read_range
from tidelog.spark.fetch_arrow import read_range_arrow
from tidelog.spark.offsets import (
    OffsetRange,
    Position,
    backwards,
    position_from_json,
    position_to_json,
    rate_limit,
    split_ranges,
)
from tidelog.spark.options import ReaderOptions

__all__ = ["BatchReader", "RangePartition", "StreamReader", "unbounded_read_warning"]

log = logging.getLogger("tidelog.spark")


def unbounded_read_warning(options: ReaderOptions) -> str:
    """What a streaming read without ``maxOffsetsPerTrigger`` is warned (once per query run)."""
    return (
        f"the streaming read of {options.subscription} has no maxOffsetsPerTrigger: a micro-batch reads every "
        "offset available (after a pause or at the first start, the whole backlog at once); set "
        "maxOffsetsPerTrigger to bound it"
    )


def _report_data_loss(options: ReaderOptions, message: str) -> None:
    """Spark's ``reportDataLoss``: raise with failOnDataLoss=true, else log and go on."""
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because they are not available in Kafka any more; "
            "either the data was aged out by Kafka or the topic may have been deleted before all the data "
            "in the topic was processed. If you don't want your streaming query to fail on such cases, set "
            'the source option "failOnDataLoss" to "false".'
        )
    log.warning("%s. Some data may have been lost; failOnDataLoss=false: going on.", message)


class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic-partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


def _read(options: ReaderOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """One task's rows: librdkafka's messages, or with ``arrowDecode`` raw batches decoded into Arrow."""
    return (read_range_arrow if options.arrow_decode else read_range)(options, offset_range)


def _partitions(ranges: list[OffsetRange], options: ReaderOptions) -> list[RangePartition]:
    return [RangePartition(r) for r in split_ranges(ranges, options.min_partitions)]


class BatchReader(DataSourceReader):
    """``spark.read.format("tidelog")``: offsets fixed when the plan is made."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        with ClusterView(self.options) as cluster:
            tps = cluster.partitions()
            watermarks = cluster.watermarks(tps)
            start = cluster.resolve(self.options.starting, tps, watermarks, option="startingOffsets")
            end = cluster.resolve(self.options.ending, tps, watermarks, option="endingOffsets")
        ranges = []
        for tp in tps:
            if end[tp] < start[tp]:
                raise ValueError(
                    f"{tp[0]}:{tp[1]}: ending offset {end[tp]} is before starting offset {start[tp]}"
                )
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        parts = _partitions(ranges, self.options)
        return parts or [RangePartition(OffsetRange("", -1, 0, 0))]  # Spark wants at least one

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return _read(self.options, partition.range)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("tidelog")``."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self._cluster: ClusterView | None = None
        self._available_now: Position | None = None
        self._last_trigger: float | None = None  # monotonic time of the last admitted micro-batch
        self._reported: Position | None = None  # the latest offsets fetched by this trigger
        self._warned_unbounded = False  # the missing maxOffsetsPerTrigger was reported in this run

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_cluster": None, "_reported": None}

    # ---- driver side (the planner process) ----

    def _view(self) -> ClusterView:
        if self._cluster is None:
            self._cluster = ClusterView(self.options)
        return self._cluster

    def _latest(self) -> Position:
        cluster = self._view()
        return cluster.latest(cluster.partitions())

    def _latest_after(self, begin: Position) -> Position:
        """Latest offsets, asked again while some went below ``begin`` (Spark's KAFKA-7703 guard)."""
        attempts = max(1, self.options.fetch_offset_retries)
        for attempt in range(1, attempts + 1):
            latest = self._latest()
            wrong = backwards(begin, latest)
            if not wrong or attempt == attempts:
                return latest
            log.warning(
                "latest offsets went backwards (partition: offset reached -> offset now): %s; asking again",
                ", ".join(f"{t}-{p}: {begin[(t, p)]} -> {o}" for (t, p), o in sorted(wrong.items())),
            )
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def initialOffset(self) -> dict[str, dict[str, int]]:
        cluster = self._view()
        tps = cluster.partitions()
        watermarks = cluster.watermarks(tps)
        start = cluster.resolve(self.options.starting, tps, watermarks, option="startingOffsets")
        return position_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark asks this once per query run, in the process that plans every micro-batch of that run
        # (streamReader() itself also runs in the processes that plan reads, so it cannot warn once).
        if self.options.max_offsets_per_trigger is None and not self._warned_unbounded:
            self._warned_unbounded = True
            log.warning("%s", unbounded_read_warning(self.options))
        # PySpark has no composite limit: with both options set, the maximum is Spark's limit and the
        # minimum is applied here (latestOffset), as Spark's Kafka source does with its CompositeReadLimit.
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def _too_few(self, begin: Position, latest: Position, limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger: wait for more, unless maxTriggerDelay passed since the last batch."""
        if isinstance(limit, ReadAllAvailable) or self._available_now is not None:
            return False
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.options.min_offsets_per_trigger
        if min_rows is None:
            return False
        now = time.monotonic()
        if self._last_trigger is None:  # the run's first micro-batch fires at once, as in Spark
            self._last_trigger = now
            return False
        available = sum(max(0, offset - begin.get(tp, 0)) for tp, offset in latest.items())
        if available >= min_rows or (now - self._last_trigger) * 1000 >= self.options.max_trigger_delay_ms:
            self._last_trigger = now
            return False
        return True

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        begin = position_from_json(start)
        if self._available_now is not None:
            latest = dict(self._available_now)
        else:
            latest = self._latest_after(begin)
            self._reported = dict(latest)
        gone = sorted(set(begin) - set(latest))
        if gone:
            _report_data_loss(self.options, f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone")
            for tp in gone:  # failOnDataLoss=false: kept where it was, in case it comes back
                latest[tp] = begin[tp]
        lower = backwards(begin, latest)  # reported by partitions(), read on from there (as Spark)
        if self._too_few(begin, latest, limit):
            return start
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
            end.update(lower)
            return position_to_json(end)
        return position_to_json(latest)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        """The latest offsets ``latestOffset`` fetched in this trigger (no second round trip)."""
        if self._reported is None:
            self._reported = self._latest()
        return position_to_json(self._reported)

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        begin = position_from_json(start)
        until = position_from_json(end)
        for (topic, partition), offset in sorted(backwards(begin, until).items()):
            _report_data_loss(
                self.options,
                f"Partition {topic}-{partition}'s offset was changed from {begin[(topic, partition)]} to "
                f"{offset}, some data may have been missed",
            )
        ranges = [
            OffsetRange(tp[0], tp[1], begin.get(tp, 0), offset)
            for tp, offset in sorted(until.items())
            if offset > begin.get(tp, 0)
        ]
        return _partitions(ranges, self.options)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to the broker."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    # ---- executor side ----

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return _read(self.options, partition.range)
