"""Option parsing, offset JSON and admission control (pure functions: no Spark, no broker)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.spark.offsets import OffsetRange, position_from_json, position_to_json, rate_limit, split_ranges
from tidelog.spark.options import (
    Assign,
    OffsetBound,
    OptionError,
    Subscribe,
    SubscribePattern,
    parse_reader_options,
    parse_writer_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_spark_option_names_are_case_insensitive_and_typed() -> None:
    options = parse_reader_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "SUBSCRIBE": "a, b",
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "maxOffsetsPerTrigger": "100",
            "failOnDataLoss": "false",
            "includeHeaders": "true",
            "kafka.isolation.level": "read_committed",
            "kafka.fetch.min.bytes": "1",
        },
        streaming=True,
    )
    assert options.subscription == Subscribe(("a", "b"))
    assert options.starting == OffsetBound("offsets", offsets={"a": {0: 5, 1: -2}})
    assert options.max_offsets_per_trigger == 100
    assert options.fail_on_data_loss is False
    assert options.include_headers is True
    assert options.read_committed is True
    config = options.consumer_config()
    assert config["isolation.level"] == "read_committed"
    assert config["fetch.min.bytes"] == "1"
    assert config["enable.auto.commit"] is False


def test_defaults_follow_spark() -> None:
    streaming = parse_reader_options({**BASE, "subscribe": "a"}, streaming=True)
    batch = parse_reader_options({**BASE, "subscribe": "a"}, streaming=False)
    assert streaming.starting.kind == "latest"
    assert batch.starting.kind == "earliest"
    assert batch.ending.kind == "latest"
    assert streaming.fail_on_data_loss is True
    assert streaming.include_headers is False
    assert streaming.read_committed is False


def test_subscriptions() -> None:
    assert parse_reader_options({**BASE, "subscribePattern": "ev-.*"}, streaming=True).subscription == (
        SubscribePattern("ev-.*")
    )
    assign = parse_reader_options({**BASE, "assign": '{"b": [1, 0], "a": [2]}'}, streaming=True)
    assert assign.subscription == Assign((("a", 2), ("b", 0), ("b", 1)))
    assert SubscribePattern("ev-.*").matches("ev-1")
    assert not SubscribePattern("ev-.*").matches("xev-1")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
        ({}, "exactly one of"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "x"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"subscribe": "a", "startingOffsets": "{bad"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "startingOffsets"),
        ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"assign": '{"a": "0"}'}, "assign"),
        ({"subscribe": "a", "endingOffsets": "latest"}, "endingOffsets"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        parse_reader_options({**BASE, **options}, streaming=True)


def test_bootstrap_servers_are_required() -> None:
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        parse_reader_options({"subscribe": "a"}, streaming=False)


def test_batch_refuses_latest_start_and_earliest_end() -> None:
    with pytest.raises(OptionError, match="startingOffsets=latest"):
        parse_reader_options({**BASE, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OptionError, match="endingOffsets=earliest"):
        parse_reader_options({**BASE, "subscribe": "a", "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="ending offset"):
        parse_reader_options({**BASE, "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, streaming=False)


def test_timestamps() -> None:
    options = parse_reader_options(
        {**BASE, "subscribe": "a", "startingTimestamp": "1700000000000"}, streaming=True
    )
    assert options.starting == OffsetBound("timestamp", timestamp=1700000000000)
    by_partition = parse_reader_options(
        {**BASE, "subscribe": "a", "startingOffsetsByTimestamp": '{"a": {"0": 5}}'}, streaming=True
    )
    assert by_partition.starting == OffsetBound("timestamps", offsets={"a": {0: 5}})


def test_writer_options() -> None:
    options = parse_writer_options({**BASE, "topic": "out", "kafka.linger.ms": "0"})
    assert options.topic == "out"
    assert options.exactly_once is False
    assert options.producer_config()["linger.ms"] == "0"
    assert parse_writer_options({**BASE, "deliveryGuarantee": "exactly-once"}).exactly_once is True
    with pytest.raises(OptionError, match="deliveryGuarantee"):
        parse_writer_options({**BASE, "deliveryGuarantee": "twice"})


def test_position_json_is_sparks_and_canonical() -> None:
    position = {("b", 1): 7, ("a", 10): 3, ("a", 2): 4}
    as_json = position_to_json(position)
    assert as_json == {"a": {"2": 4, "10": 3}, "b": {"1": 7}}
    assert list(as_json) == ["a", "b"]
    assert position_from_json(as_json) == position
    assert position_from_json('{"a": {"0": 1}}') == {("a", 0): 1}


def test_rate_limit_spreads_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50, ("t", 3): 100}  # t-3 is new: starts at 0
    end = rate_limit(start, latest, 100)
    # backlogs 300, 100, 0, 100 of 500: shares 60, 20, 0, 20
    assert end == {("t", 0): 60, ("t", 1): 120, ("t", 2): 50, ("t", 3): 20}
    assert rate_limit(start, latest, 10_000) == latest


backlogs = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
)


@settings(deadline=None)
@given(backlogs, st.integers(1, 3000))
def test_rate_limit_admits_exactly_min_of_limit_and_backlog(ranges: dict, max_rows: int) -> None:
    start = {tp: a for tp, (a, _) in ranges.items()}
    latest = {tp: a + b for tp, (a, b) in ranges.items()}
    end = rate_limit(start, latest, max_rows)
    assert set(end) == set(latest)
    for tp, offset in latest.items():
        assert start[tp] <= end[tp] <= offset
    total = sum(latest[tp] - start[tp] for tp in latest)
    assert sum(end[tp] - start[tp] for tp in latest) == min(max_rows, total)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=4), st.integers(1, 50))
def test_draining_takes_ceil_backlog_over_limit_batches(sizes: list[int], max_rows: int) -> None:
    position = {("t", p): 0 for p in range(len(sizes))}
    latest = {("t", p): n for p, n in enumerate(sizes)}
    batches = 0
    while position != latest:
        position = rate_limit(position, latest, max_rows)
        batches += 1
    assert batches == math.ceil(sum(sizes) / max_rows)


@settings(deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=5), st.one_of(st.none(), st.integers(1, 12)))
def test_split_ranges_covers_every_offset_once(sizes: list[int], min_partitions: int | None) -> None:
    ranges = [OffsetRange("t", p, 10 * p, 10 * p + n) for p, n in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions)
    covered = [(r.partition, o) for r in pieces for o in range(r.from_offset, r.until_offset)]
    expected = [(r.partition, o) for r in ranges for o in range(r.from_offset, r.until_offset)]
    assert covered == expected
    assert all(r.size > 0 for r in pieces)
    if min_partitions and len(pieces) < min_partitions:
        assert all(r.size == 1 for r in pieces) or len(pieces) >= min_partitions - len(sizes)
