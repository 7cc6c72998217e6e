"""The shape of an exactly-once micro-batch and the checks of its replay (pure: Arrow batches, no Spark)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from tidelog.spark.replay_shape import (
    BatchShape,
    ReplayChangedError,
    RowsDigest,
    TaskMark,
    check_partition_count,
    check_replayed_task,
    check_unrecorded_task,
)


def _batch(values: list[bytes], **extra: list[object]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": [b"k" + v for v in values], "value": values, **extra})


def _digest(*batches: pa.RecordBatch) -> RowsDigest:
    digest = RowsDigest()
    for batch in batches:
        digest.update(batch)
    return digest


def test_the_digest_ignores_row_order_and_batch_boundaries() -> None:
    one = _digest(_batch([b"a", b"b", b"c"]))
    other = _digest(_batch([b"c"]), _batch([b"b", b"a"]))
    assert one.hexdigest() == other.hexdigest()
    assert one.rows == other.rows == 3
    assert len(one.hexdigest()) == 64


def test_the_digest_sees_a_changed_missing_or_repeated_row() -> None:
    base = _digest(_batch([b"a", b"b"])).hexdigest()
    assert _digest(_batch([b"a", b"B"])).hexdigest() != base
    assert _digest(_batch([b"a"])).hexdigest() != base
    assert _digest(_batch([b"a", b"b", b"b"])).hexdigest() != base
    assert _digest(_batch([b"a", b"a", b"b", b"b"])).hexdigest() != base  # a sum, not a xor
    assert _digest().hexdigest() == "0" * 64


def test_the_digest_covers_the_written_columns_only() -> None:
    base = _digest(_batch([b"a"])).hexdigest()
    assert _digest(_batch([b"a"], offset=[7])).hexdigest() == base  # an ignored column
    assert _digest(_batch([b"a"], partition=[1])).hexdigest() != base
    assert _digest(_batch([b"a"], topic=["t"])).hexdigest() != base
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert _digest(_batch([b"a"], timestamp=[moment])).hexdigest() != base
    headers = pa.array([[{"key": "h", "value": b"1"}]])
    with_headers = pa.RecordBatch.from_pydict({"key": [b"ka"], "value": [b"a"], "headers": headers})
    assert _digest(with_headers).hexdigest() != base


def test_marks_and_shapes_travel_as_offset_metadata() -> None:
    mark = TaskMark(batch=4, partition=1, rows=10, digest="ab" * 32)
    assert mark.to_metadata() == '{"batch":4,"partition":1,"rows":10,"digest":"' + "ab" * 32 + '"}'
    assert TaskMark.from_metadata(mark.to_metadata()) == mark
    shape = BatchShape(batch=4, partitions=3)
    assert BatchShape.from_metadata(shape.to_metadata()) == shape
    for nothing in (None, "", "not json", '{"batch": 4}', "[]"):
        assert TaskMark.from_metadata(nothing) is None
        assert BatchShape.from_metadata(nothing) is None


def test_a_replayed_task_must_have_the_committed_rows() -> None:
    digest = _digest(_batch([b"a", b"b"]))
    committed = TaskMark(7, 1, digest.rows, digest.hexdigest())
    check_replayed_task(7, 1, committed, _digest(_batch([b"b", b"a"])))  # same rows: fine
    check_replayed_task(7, 1, None, _digest(_batch([b"x"])))  # a mark without a shape: nothing to compare
    check_replayed_task(8, 1, committed, _digest(_batch([b"x"])))  # the mark is of another batch
    other = _digest(_batch([b"a", b"c", b"d"]))
    with pytest.raises(ReplayChangedError) as raised:
        check_replayed_task(7, 1, committed, other)
    assert str(raised.value) == (
        f"micro-batch 7 was replayed with different rows in write partition 1: 2 rows (digest "
        f"{digest.hexdigest()[:16]}) were committed, the replay has 3 rows (digest {other.hexdigest()[:16]}); "
        "the plan is not deterministic (a nondeterministic function, or rows sent to other partitions), and "
        "writing the replay would give a second, different answer"
    )


def test_a_recorded_batch_replayed_on_more_partitions_fails_before_writing() -> None:
    check_unrecorded_task(5, 3, None)
    check_unrecorded_task(5, 3, BatchShape(4, 2))  # batch 5 was not recorded: a first run or a retry
    with pytest.raises(ReplayChangedError) as raised:
        check_unrecorded_task(5, 3, BatchShape(5, 2))
    assert str(raised.value) == (
        "micro-batch 5 was committed by 2 write partitions; its replay has write partition 3, which would "
        "write rows a second time: keep the number of partitions of the write the same across a restart "
        "(minPartitions, repartition)"
    )


def test_the_driver_compares_the_partition_count_of_a_recorded_batch() -> None:
    check_partition_count(5, 4, None)
    check_partition_count(5, 4, BatchShape(4, 2))
    check_partition_count(5, 4, BatchShape(5, 4))
    with pytest.raises(ReplayChangedError) as raised:
        check_partition_count(5, 2, BatchShape(5, 4))
    assert str(raised.value) == (
        "micro-batch 5 was committed by 4 write partitions; its replay has 2: keep the number of partitions "
        "of the write the same across a restart (minPartitions, repartition)"
    )
