"""The shape of an exactly-once micro-batch and the checks of its replay: pure tests on Arrow batches, and
one query whose replayed batch differs from the committed one (it fails, naming the batch, and writes
nothing)."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.errors import StreamingQueryException
from tests.spark.conftest import Kafka, read_committed

from tidelog.spark import pipeline
from tidelog.spark.fencing import transactional_id
from tidelog.spark.replay_shape import (
    BatchShape,
    ReplayChangedError,
    RowsDigest,
    TaskMark,
    check_partition_count,
    check_replayed_task,
    check_unrecorded_task,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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


# ---- against Spark: a replay whose rows differ from what was committed fails, writing nothing ----------


@pytest.mark.clients
def test_a_replay_with_other_rows_fails_naming_the_batch(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    kafka.create(source, 2)
    kafka.create(sink, 1)
    kafka.produce(source, [{"value": b"v%d" % i, "partition": i % 2} for i in range(50)])
    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    query_id = str(uuid.uuid4())
    (checkpoint / "metadata").write_text(f'{{"id":"{query_id}"}}')  # Spark takes the query id from it
    args = [
        str(EXAMPLES / "transform.py"),
        *("--bootstrap-server", bootstrap, "--checkpoint", str(checkpoint)),
        *("--source", source, "--sink", sink, "--exactly-once", "--available-now"),
    ]
    module, parsed = pipeline.parse_args(args)
    query = pipeline.start(module, parsed, spark)
    query.awaitTermination(180)
    assert query.exception() is None
    expected = sorted(b"V%d" % i for i in range(50))
    assert sorted(read_committed(bootstrap, sink)) == expected

    # As if batch 0 had been written with other rows in partition 0 (a nondeterministic plan), and the
    # driver died before Spark recorded it: Spark replays batch 0.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    name = transactional_id(query_id, 0)
    producer: Any = Producer({"bootstrap.servers": bootstrap, "transactional.id": name})
    producer.init_transactions(30)
    producer.begin_transaction()
    other = TaskMark(batch=0, partition=0, rows=25, digest="0" * 64).to_metadata()
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": name}).consumer_group_metadata()
    producer.send_offsets_to_transaction(
        [TopicPartition("__tidelog_spark_sinks", 0, 1, metadata=other)], group, 30
    )
    producer.commit_transaction(30)

    query = pipeline.start(module, parsed, spark)
    with pytest.raises(StreamingQueryException) as raised:
        query.awaitTermination(180)
    assert "micro-batch 0 was replayed with different rows in write partition 0: 25 rows (digest " in str(
        raised.value
    )
    assert sorted(read_committed(bootstrap, sink)) == expected  # nothing written a second time
