"""A streaming read without ``maxOffsetsPerTrigger`` is warned about once per query run, naming the option
(pure: the reader's ``getDefaultReadLimit`` is called directly, no Spark, no broker)."""

from __future__ import annotations

import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from tidelog.spark.options import parse_reader_options
from tidelog.spark.reader import StreamReader

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "tidelog.spark" and r.levelno == logging.WARNING
    ]


def test_a_read_without_max_offsets_per_trigger_warns_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    reader = StreamReader(parse_reader_options(BASE, streaming=True))
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        limits = [reader.getDefaultReadLimit() for _ in range(3)]
    assert all(isinstance(limit, ReadAllAvailable) for limit in limits)
    expected = (
        "the streaming read of Subscribe(topics=('events',)) has no maxOffsetsPerTrigger: a micro-batch reads "
        "every offset available (after a pause or at the first start, the whole backlog at once); set "
        "maxOffsetsPerTrigger to bound it"
    )
    assert _warnings(caplog) == [expected]


def test_min_offsets_alone_still_warns(caplog: pytest.LogCaptureFixture) -> None:
    reader = StreamReader(parse_reader_options({**BASE, "minOffsetsPerTrigger": "10"}, streaming=True))
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        assert isinstance(reader.getDefaultReadLimit(), ReadMinRows)
    assert len(_warnings(caplog)) == 1
    assert "no maxOffsetsPerTrigger" in _warnings(caplog)[0]


def test_a_bounded_read_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    reader = StreamReader(parse_reader_options({**BASE, "maxOffsetsPerTrigger": "500"}, streaming=True))
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows)
    assert limit.max_rows == 500
    assert _warnings(caplog) == []
