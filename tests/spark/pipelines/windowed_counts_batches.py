"""Windowed counts (a shuffle and state) written exactly-once, each output record tagged with the write
task that wrote it, for the kill test in test_exactly_once.py.

Counts records per key in tumbling event-time windows (``--window``, of the records' Kafka timestamp) in
``append`` output mode behind a ``--watermark``: a window's count is written once, by the micro-batch in
which the watermark passes the window's end (the tidelog sink, a Python data source, takes append mode
only). Output: key ``<key>@<window start, epoch seconds>``, value the count (text), header ``task`` =
``<micro-batch id>:<write task's partition>`` (read from the task's context by a Python UDF that runs in
the write stage, so it names the task whose transaction carries the record).
"""

from __future__ import annotations

import argparse

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--window", default="2 seconds")
    parser.add_argument("--watermark", default="4 seconds")
    parser.add_argument("--max-offsets-per-trigger", type=int, required=True)
    parser.add_argument("--two-phase-commit", choices=("auto", "true", "false"), default="true")


def _task() -> bytes:
    context = TaskContext.get()
    assert context is not None
    return f"{context.getLocalProperty('streaming.sql.batchId')}:{context.partitionId()}".encode()


def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter:
    task = F.udf(_task, "binary").asNondeterministic()
    events = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
        .select(F.col("key").cast("string").alias("key"), F.col("timestamp").alias("event_time"))
    )
    counts = (
        events.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window), "key")
        .count()
    )
    out = counts.select(
        F.concat_ws("@", "key", F.col("window.start").cast("long").cast("string")).alias("key"),
        F.col("count").cast("string").alias("value"),
        F.array(F.struct(F.lit("task").alias("key"), task().alias("value"))).alias("headers"),
    )
    return (
        out.writeStream.format("tidelog")
        .outputMode("append")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("topic", args.sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("twoPhaseCommit", args.two_phase_commit)
    )
