"""latestOffset's admission control without a broker: maxOffsetsPerTrigger, minOffsetsPerTrigger with
maxTriggerDelay, ReadAllAvailable, availableNow targets, partitions that vanish."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from tidelog.spark.fetch import DataLossError
from tidelog.spark.offsets import OffsetRange, Position
from tidelog.spark.options import OptionError, parse_reader_options
from tidelog.spark.reader import RangePartition, StreamReader


class FixedStreamReader(StreamReader):
    """A StreamReader whose broker is a dict of latest offsets."""

    latest: Position

    def _latest(self) -> Position:
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
    assert reader.latestOffset(start, ReadMinRows(100)) == start  # 50 < 100: wait
    reader.latest = {("t", 0): 100}
    assert reader.latestOffset(start, ReadMinRows(100)) == {"t": {"0": 100}}
    no_delay = _reader({("t", 0): 50}, minOffsetsPerTrigger="100", maxTriggerDelay="0s")
    assert no_delay.latestOffset(start, ReadMinRows(100)) == {"t": {"0": 50}}
    both = _reader(
        {("t", 0): 50}, minOffsetsPerTrigger="100", maxOffsetsPerTrigger="10", maxTriggerDelay="1h"
    )
    assert both.latestOffset(start, ReadMaxRows(10)) == start
    both.latest = {("t", 0): 500}
    assert both.latestOffset(start, ReadMaxRows(10)) == {"t": {"0": 10}}


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
    assert lenient.latestOffset({"t": {"0": 4, "2": 3}}, ReadAllAvailable()) == {"t": {"0": 10}}


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
