"""A stream-stream join of two topics: orders matched with their payments, written to a third topic.

    tidelog pipeline examples/stream_join.py --orders orders --payments payments --sink paid-orders

Both topics are keyed by order id. A payment matches an order with the same key whose timestamp is at
most ``--within`` earlier; watermarks on both sides bound the join's state. Each match is written as the
JSON value ``{"order_id", "order", "payment", "order_time", "payment_time"}`` keyed by the order id.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter


def add_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--orders", required=True, help="topic of orders (key: order id)")
    parser.add_argument("--payments", required=True, help="topic of payments (key: order id)")
    parser.add_argument("--sink", required=True, help="topic to write matched orders to")
    parser.add_argument(
        "--within", default="1 hour", help="a payment's delay after its order (default: %(default)s)"
    )
    parser.add_argument("--watermark", default="10 minutes", help="allowed lateness on each side")
    parser.add_argument("--starting-offsets", default="earliest")


def _side(spark: SparkSession, args: argparse.Namespace, topic: str, prefix: str):  # type: ignore[no-untyped-def]
    return (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", topic)
        .option("startingOffsets", args.starting_offsets)
        .load()
        .select(
            F.col("key").cast("string").alias(f"{prefix}_id"),
            F.col("value").cast("string").alias(prefix),
            F.col("timestamp").alias(f"{prefix}_time"),
        )
        .withWatermark(f"{prefix}_time", args.watermark)
    )


def build(spark: SparkSession, args: argparse.Namespace) -> DataStreamWriter:
    orders = _side(spark, args, args.orders, "order")
    payments = _side(spark, args, args.payments, "payment")
    joined = orders.join(
        payments,
        F.expr(
            f"payment_id = order_id AND payment_time >= order_time "
            f"AND payment_time <= order_time + interval {args.within}"
        ),
    )
    ts = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    out = joined.select(
        F.col("order_id").alias("key"),
        F.to_json(
            F.struct(
                "order_id",
                "order",
                "payment",
                F.date_format("order_time", ts).alias("order_time"),
                F.date_format("payment_time", ts).alias("payment_time"),
            )
        ).alias("value"),
    )
    return (
        out.writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("topic", args.sink)
    )
