"""Fencing the exactly-once sink's leftover transactions (:mod:`tidelog.spark.fencing`).

- Pure: which listed transactions are this query's open leftovers; the query id in a transactional id and
  in a checkpoint's ``metadata`` file.
- A killed run simulated by transactions left open on the query's ids for write partitions 0..3 (the
  query id given by its checkpoint's metadata); the query restarted from that checkpoint writes to 2
  partitions, and a read_committed reader then reads its exact output (the open transactions of
  partitions 2 and 3 no longer hold the last stable offset back).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from tests.spark.conftest import Kafka, read_committed

from tidelog.spark import pipeline
from tidelog.spark.fencing import checkpoint_query_id, leftover_ids, query_of, transactional_id

QUERY = "0f6a3c52-9a4e-4c55-8a55-2b1f4e7f2a10"
OTHER = "7d1e2f33-0000-4c55-8a55-2b1f4e7f2a10"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_transactional_ids_name_query_and_partition() -> None:
    assert transactional_id(QUERY, 3) == f"tidelog-spark-{QUERY}-3"
    assert query_of(f"tidelog-spark-{QUERY}-3") == QUERY
    assert query_of(f"tidelog-spark-{QUERY}") is None  # the query's progress record, no partition
    assert query_of("tidelog-spark-probe") is None
    assert query_of("etl-1") is None


def test_leftovers_are_the_query_s_open_transactions_in_partition_order() -> None:
    listed = [
        (f"tidelog-spark-{QUERY}-10", "Ongoing"),
        (f"tidelog-spark-{QUERY}-2", "Ongoing"),
        (f"tidelog-spark-{QUERY}-3", "CompleteCommit"),  # not open
        (f"tidelog-spark-{OTHER}-1", "Ongoing"),  # another query
        (f"tidelog-spark-{QUERY}-x", "Ongoing"),  # not one of the sink's ids
        (f"tidelog-spark-{QUERY}-2", "Ongoing"),  # listed by two brokers
        ("tidelog-spark-probe", "Ongoing"),
        (f"other-tidelog-spark-{QUERY}-4", "Ongoing"),
    ]
    assert leftover_ids(listed, QUERY) == [f"tidelog-spark-{QUERY}-2", f"tidelog-spark-{QUERY}-10"]
    assert leftover_ids(listed, OTHER) == [f"tidelog-spark-{OTHER}-1"]
    assert leftover_ids([], QUERY) == []


def test_the_query_id_is_read_from_a_local_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text(f'{{"id":"{QUERY}"}}')
    assert checkpoint_query_id(str(tmp_path)) == QUERY
    assert checkpoint_query_id(f"file://{tmp_path}") == QUERY
    assert checkpoint_query_id(f"file:{tmp_path}") == QUERY
    assert checkpoint_query_id(str(tmp_path / "missing")) is None
    assert checkpoint_query_id("relative/checkpoint") is None
    assert checkpoint_query_id("s3a://bucket/checkpoint") is None
    assert checkpoint_query_id(None) is None
    (tmp_path / "metadata").write_text("not json")
    assert checkpoint_query_id(str(tmp_path)) is None


def _run(spark: Any, bootstrap: str, checkpoint: Path, source: str, sink: str) -> Any:
    module, parsed = pipeline.parse_args(
        [
            str(EXAMPLES / "transform.py"),
            "--bootstrap-server",
            bootstrap,
            "--checkpoint",
            str(checkpoint),
            "--source",
            source,
            "--sink",
            sink,
            "--exactly-once",
            "--available-now",
        ]
    )
    query = pipeline.start(module, parsed, spark)
    query.awaitTermination(180)
    assert query.exception() is None
    return query


@pytest.mark.clients
def test_a_restart_on_fewer_partitions_fences_the_killed_run_s_open_transactions(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    kafka.create(source, 2)
    kafka.create(sink, 1)
    kafka.produce(source, [{"value": b"v%d" % i, "partition": i % 2} for i in range(100)])
    # The checkpoint of a query that ran before: Spark takes the query id from its metadata file.
    checkpoint = tmp_path / "cp"
    checkpoint.mkdir()
    query_id = str(uuid.uuid4())
    (checkpoint / "metadata").write_text(f'{{"id":"{query_id}"}}')

    # That run wrote on 4 partitions and was killed mid-micro-batch: its tasks' transactions stay open.
    killed = []
    for p in range(4):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": transactional_id(query_id, p)}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(sink, b"half-written by partition %d" % p)
        assert producer.flush(60) == 0  # a bound: returns once the broker has the record
        killed.append(producer)
    assert read_committed(bootstrap, sink) == []  # the open transactions hold every reader back

    query = _run(spark, bootstrap, checkpoint, source, sink)  # 2 write partitions (2 source partitions)
    assert query.id == query_id
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [100]
    # Partitions 0 and 1 would have fenced their own ids; 2 and 3 were fenced when the query restarted.
    assert sorted(read_committed(bootstrap, sink)) == sorted(b"V%d" % i for i in range(100))
