"""A pipeline written for Spark's own Kafka connector (``format("kafka")``), kept as such.

It mirrors one topic into another with the options a Spark user's job has: Java client keys
(``kafka.security.protocol``, ``kafka.max.poll.records``, ``kafka.partitioner.class``, ``kafka.acks``,
``kafka.enable.idempotence``, ``kafka.max.block.ms``), Spark's ``groupIdPrefix`` and
``fetchOffset.*``, and the source's rows written as they are (``load().writeStream``: the sink ignores
offset, timestampType ... and keeps key, value, headers and timestamp). test_examples.py runs this file
with only ``format("kafka")`` replaced by ``format("tidelog")``.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)


def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter:
    rows = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("kafka.security.protocol", "PLAINTEXT")
        .option("kafka.max.poll.records", "500")
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250")
        .option("failOnDataLoss", "true")
        .option("groupIdPrefix", "mirror")
        .option("fetchOffset.numRetries", "5")
        .option("fetchOffset.retryIntervalMs", "100")
        .option("includeHeaders", "true")
        .load()
    )
    return (
        rows.drop("partition")  # let the sink's partitioner place each key, as the Java producer does
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("kafka.security.protocol", "PLAINTEXT")
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        .option("kafka.partitioner.class", "org.apache.kafka.clients.producer.internals.DefaultPartitioner")
        .option("kafka.max.block.ms", "60000")
        .option("topic", args.sink)
    )
