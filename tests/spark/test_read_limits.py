"""latestOffset's admission control without a broker: maxOffsetsPerTrigger, minOffsetsPerTrigger with
maxTriggerDelay, ReadAllAvailable, availableNow targets; data loss as Spark reports it (partitions that
vanish, offsets that go backwards, out-of-range reads, offsets JSON that leaves partitions out)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from tidelog.spark.fetch import DataLossError
from tidelog.spark.offsets import (
    OffsetRange,
    OffsetsJsonError,
    Position,
    check_json_covers,
    resume_after_out_of_range,
)
from tidelog.spark.options import OptionError, parse_reader_options
from tidelog.spark.reader import RangePartition, StreamReader


class FixedStreamReader(StreamReader):
    """A StreamReader whose broker is a dict of latest offsets (or a list of answers, one per ask)."""

    latest: Position
    answers: list[Position]
    asked = 0

    def _latest(self) -> Position:
        self.asked += 1
        if getattr(self, "answers", None):
            return dict(self.answers.pop(0))
        return dict(self.latest)


def _reader(latest: Position, **options: str) -> FixedStreamReader:
    reader = FixedStreamReader(
        parse_reader_options(
            {"kafka.bootstrap.servers": "unused:1", "subscribe": "t", **options}, streaming=True
        )
    )
    reader.latest = latest
    return reader


def test_default_read_limit_follows_the_options() -> None:
    assert _reader({}).getDefaultReadLimit() == ReadAllAvailable()
    assert _reader({}, maxOffsetsPerTrigger="5").getDefaultReadLimit() == ReadMaxRows(5)
    assert _reader({}, minOffsetsPerTrigger="7").getDefaultReadLimit() == ReadMinRows(7)
    both = _reader({}, minOffsetsPerTrigger="7", maxOffsetsPerTrigger="50")
    assert both.getDefaultReadLimit() == ReadMaxRows(50)


def test_max_rows_and_read_all_available() -> None:
    reader = _reader({("t", 0): 100, ("t", 1): 300}, maxOffsetsPerTrigger="40")
    start = {"t": {"0": 0, "1": 0}}
    assert reader.latestOffset(start, ReadMaxRows(40)) == {"t": {"0": 10, "1": 30}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 300}}  # options ignored


def test_min_rows_wait_until_enough_or_the_delay_passed() -> None:
    reader = _reader({("t", 0): 50}, minOffsetsPerTrigger="100", maxTriggerDelay="1h")
    start = {"t": {"0": 0}}
    assert reader.latestOffset(start, ReadMinRows(100)) == {"t": {"0": 50}}  # the first batch: at once
    after = {"t": {"0": 50}}
    reader.latest = {("t", 0): 120}
    assert reader.latestOffset(after, ReadMinRows(100)) == after  # 70 < 100: wait
    reader.latest = {("t", 0): 150}
    assert reader.latestOffset(after, ReadMinRows(100)) == {"t": {"0": 150}}
    no_delay = _reader({("t", 0): 50}, minOffsetsPerTrigger="100", maxTriggerDelay="0s")
    no_delay.latestOffset(start, ReadMinRows(100))
    no_delay.latest = {("t", 0): 60}
    assert no_delay.latestOffset(after, ReadMinRows(100)) == {"t": {"0": 60}}
    both = _reader(
        {("t", 0): 50}, minOffsetsPerTrigger="100", maxOffsetsPerTrigger="10", maxTriggerDelay="1h"
    )
    assert both.latestOffset(start, ReadMaxRows(10)) == {"t": {"0": 10}}
    assert both.latestOffset({"t": {"0": 10}}, ReadMaxRows(10)) == {"t": {"0": 10}}  # 40 < 100: wait
    both.latest = {("t", 0): 500}
    assert both.latestOffset({"t": {"0": 10}}, ReadMaxRows(10)) == {"t": {"0": 20}}


def test_available_now_target_is_fixed_when_prepared() -> None:
    reader = _reader({("t", 0): 30}, maxOffsetsPerTrigger="20")
    reader.prepareForTriggerAvailableNow()
    reader.latest = {("t", 0): 1000}  # arrives after the trigger started: not read by this run
    first = reader.latestOffset({"t": {"0": 0}}, ReadMaxRows(20))
    assert first == {"t": {"0": 20}}
    assert reader.latestOffset(first, ReadMaxRows(20)) == {"t": {"0": 30}}
    assert reader.latestOffset({"t": {"0": 30}}, ReadMaxRows(20)) == {"t": {"0": 30}}


def test_new_partitions_start_at_zero_and_vanished_ones_are_data_loss() -> None:
    reader = _reader({("t", 0): 10, ("t", 1): 5})
    assert reader.latestOffset({"t": {"0": 10}}, ReadAllAvailable()) == {"t": {"0": 10, "1": 5}}
    parts = reader.partitions({"t": {"0": 10}}, {"t": {"0": 10, "1": 5}})
    assert [p.range for p in parts if isinstance(p, RangePartition)] == [OffsetRange("t", 1, 0, 5)]
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        reader.latestOffset({"t": {"0": 10, "2": 3}}, ReadAllAvailable())
    lenient = _reader({("t", 0): 10}, failOnDataLoss="false")
    # t-2 is kept at its offset (issue 16: never read again from 0 should it come back)
    assert lenient.latestOffset({"t": {"0": 4, "2": 3}}, ReadAllAvailable()) == {"t": {"0": 10, "2": 3}}


def test_max_trigger_delay_option() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert parse_reader_options(base, streaming=True).max_trigger_delay_ms == 15 * 60_000
    assert (
        parse_reader_options({**base, "maxTriggerDelay": "30s"}, streaming=True).max_trigger_delay_ms
        == 30_000
    )
    assert (
        parse_reader_options({**base, "maxTriggerDelay": "250ms"}, streaming=True).max_trigger_delay_ms == 250
    )
    with pytest.raises(OptionError, match="maxTriggerDelay"):
        parse_reader_options({**base, "maxTriggerDelay": "soon"}, streaming=True)


def test_report_latest_offset_reuses_the_triggers_fetch() -> None:
    reader = _reader({("t", 0): 10, ("t", 1): 5})
    reader.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable())
    assert reader.reportLatestOffset() == {"t": {"0": 10, "1": 5}}
    assert reader.asked == 1


def test_offsets_that_go_backwards_are_asked_again_then_reported() -> None:
    start = {"t": {"0": 100, "1": 10}}
    # a stale answer (KAFKA-7703) followed by the right one: no loss, three asks at most
    flaky = _reader({}, **{"fetchOffset.numRetries": "3"})
    flaky.answers = [{("t", 0): 40, ("t", 1): 12}, {("t", 0): 130, ("t", 1): 12}]
    assert flaky.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 130, "1": 12}}
    assert flaky.asked == 2

    # the topic was deleted and created again: offset 40 < 100 on every ask
    strict = _reader({("t", 0): 40, ("t", 1): 12})
    end = strict.latestOffset(start, ReadMaxRows(1000))
    assert end == {"t": {"0": 40, "1": 12}}
    assert strict.asked == 3  # fetchOffset.numRetries
    with pytest.raises(DataLossError, match="Partition t-0's offset was changed from 100 to 40"):
        strict.partitions(start, end)

    lenient = _reader({("t", 0): 40, ("t", 1): 12}, failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadMaxRows(1000))
    parts = lenient.partitions(start, end)
    assert [p.range for p in parts if isinstance(p, RangePartition)] == [OffsetRange("t", 1, 10, 12)]
    lenient.latest = {("t", 0): 45, ("t", 1): 12}
    parts = lenient.partitions(end, lenient.latestOffset(end, ReadAllAvailable()))
    assert [p.range for p in parts if isinstance(p, RangePartition)] == [OffsetRange("t", 0, 40, 45)]


def test_a_partition_briefly_missing_is_not_read_again_from_zero() -> None:
    reader = _reader({("t", 0): 10}, failOnDataLoss="false")
    start = {"t": {"0": 10, "1": 500}}
    end = reader.latestOffset(start, ReadAllAvailable())  # t-1 missing from metadata this trigger
    assert end == {"t": {"0": 10, "1": 500}}  # kept where it was
    reader.latest = {("t", 0): 10, ("t", 1): 520}  # back
    following = reader.latestOffset(end, ReadAllAvailable())
    parts = reader.partitions(end, following)
    assert [p.range for p in parts if isinstance(p, RangePartition)] == [OffsetRange("t", 1, 500, 520)]


@pytest.mark.parametrize(
    ("offset", "until", "earliest", "latest", "resume", "lost"),
    [
        (50, 100, 0, 200, 50, None),  # still in the log (recreated and refilled): read on, never below
        (50, 100, 70, 200, 70, "offsets 50..69 were deleted"),
        (50, 100, 120, 200, 100, "offsets 50..99 are no longer in the log (it now holds 120..199)"),
        (50, 100, 0, 30, 100, "offsets 50..99 are no longer in the log (it now holds 0..29)"),
    ],
)
def test_out_of_range_reads_never_go_below_where_they_were(
    offset: int, until: int, earliest: int, latest: int, resume: int, lost: str | None
) -> None:
    assert resume_after_out_of_range(offset, until, earliest, latest) == (resume, lost)


def test_offsets_json_must_name_every_partition_read() -> None:
    check_json_covers("startingOffsets", {("t", 0), ("t", 1)}, {("t", 0), ("t", 1)})
    with pytest.raises(
        OffsetsJsonError, match="If startingOffsets contains specific offsets, you must specify all"
    ) as info:
        check_json_covers("startingOffsets", {("t", 0)}, {("t", 0), ("t", 1)})
    assert str(info.value).endswith("Specified: {t-0} Assigned: {t-0, t-1}")
    with pytest.raises(OffsetsJsonError, match=r"Specified: \{t-0, u-3\}"):
        check_json_covers("endingOffsets", {("t", 0), ("u", 3)}, {("t", 0)})
