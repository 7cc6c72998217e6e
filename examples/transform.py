"""Consume-transform-produce: read a topic, transform each record, write the result to another topic.

    tidelog pipeline examples/transform.py --source events --sink events-upper

Keys and headers are kept; the value becomes upper case. ``--exactly-once`` writes through the
transactional sink (``deliveryGuarantee=exactly-once``): each record of the source lands in the sink
exactly once for ``read_committed`` readers, even when the pipeline is killed and started again; against
brokers with ``transaction.two.phase.commit.enable=true`` each micro-batch becomes visible whole
(``--two-phase-commit``: auto, true, false). The default is at-least-once (faster; a micro-batch cut short
is written again).

``--kafka KEY=VALUE`` (repeatable) passes a client setting to both sides as ``kafka.KEY``, with the Java
client's keys a Spark job already has, e.g. for a SASL_SSL cluster::

    --kafka security.protocol=SASL_SSL --kafka sasl.mechanism=SCRAM-SHA-512 \
    --kafka 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="etl" password="...";' \
    --kafka ssl.truststore.location=ca.pem --kafka ssl.truststore.type=PEM
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--source", required=True, help="topic to read")
    parser.add_argument("--sink", required=True, help="topic to write")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest, latest or Spark's JSON")
    parser.add_argument("--max-offsets-per-trigger", type=int, help="admission control per micro-batch")
    parser.add_argument(
        "--exactly-once", action="store_true", help="transactional sink (read the sink read_committed)"
    )
    parser.add_argument(
        "--two-phase-commit",
        choices=("auto", "true", "false"),
        default="auto",
        help="with --exactly-once: commit each micro-batch whole, in two phases (auto: when the brokers allow it)",
    )
    parser.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a client setting for both sides, as kafka.KEY (Java client keys work; repeatable)",
    )


def _client_options(args: argparse.Namespace) -> dict[str, str]:
    options = {}
    for pair in args.kafka:
        key, _, value = pair.partition("=")
        options[f"kafka.{key}"] = value
    return options


def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter:
    reader = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.source)
        .option("startingOffsets", args.starting_offsets)
        .option("includeHeaders", "true")
        .options(**_client_options(args))
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    transformed = reader.load().select(
        "key",
        F.upper(F.col("value").cast("string")).alias("value"),
        "headers",
    )
    return (
        transformed.writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("topic", args.sink)
        .option("deliveryGuarantee", "exactly-once" if args.exactly_once else "at-least-once")
        .option("twoPhaseCommit", args.two_phase_commit)
        .options(**_client_options(args))
    )
