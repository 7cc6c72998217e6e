"""Archive a topic to Parquet files partitioned by date (like nsq_to_file, but columnar).

    tidelog pipeline examples/archive_parquet.py --source events --path archive/events

Every record lands once under ``<path>/date=YYYY-MM-DD/`` (the date of its Kafka timestamp, UTC) with its
key, value, topic, partition, offset, timestamp and headers. Spark's file sink commits each micro-batch
through its ``_spark_metadata`` log, so readers of ``<path>`` with Spark see every record exactly once,
even across restarts.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--source", required=True, help="topic (or comma-separated topics) to archive")
    parser.add_argument("--path", required=True, help="output directory")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="records per Parquet micro-batch")


def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    reader = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.source)
        .option("startingOffsets", args.starting_offsets)
        .option("includeHeaders", "true")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    records = reader.load().withColumn("date", F.to_date("timestamp"))
    return records.writeStream.format("parquet").option("path", args.path).partitionBy("date")
