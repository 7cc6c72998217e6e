"""Event-time windowed counts with a watermark, written back to a topic.

    tidelog pipeline examples/windowed_counts.py --source clicks --sink click-counts

Counts records per key in tumbling windows of the records' event time (their Kafka timestamp). The
watermark lets records arrive up to ``--watermark`` late; a window's count is written once (``append``
output mode, the one the tidelog sink takes), when the watermark passes the window's end, as a JSON value
``{"key": ..., "window_start": ..., "window_end": ..., "count": ...}`` keyed by ``<key>@<window_start>``.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--source", required=True, help="topic to read")
    parser.add_argument("--sink", required=True, help="topic to write the counts to")
    parser.add_argument("--window", default="1 minute", help="window length (default: %(default)s)")
    parser.add_argument("--watermark", default="30 seconds", help="allowed lateness (default: %(default)s)")
    parser.add_argument("--starting-offsets", default="earliest")


def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter:
    events = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.source)
        .option("startingOffsets", args.starting_offsets)
        .load()
        .select(F.col("key").cast("string").alias("key"), F.col("timestamp").alias("event_time"))
    )
    counts = (
        events.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window), "key")
        .count()
    )
    start = F.date_format(F.col("window.start"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    end = F.date_format(F.col("window.end"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    out = counts.select(
        F.concat_ws("@", "key", start).alias("key"),
        F.to_json(
            F.struct(F.col("key"), start.alias("window_start"), end.alias("window_end"), F.col("count"))
        ).alias("value"),
    )
    return (
        out.writeStream.format("tidelog")
        .outputMode("append")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("topic", args.sink)
    )
