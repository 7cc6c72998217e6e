"""Spark benchmark: rows/s through the ``tidelog`` data source beside confluent-kafka and PySpark's ceiling.

Fills a topic with N records of ``--record-bytes`` value bytes (default 10 million x 100 B, keyless),
then measures, each ``--runs`` times (the best run is reported, the others shown):

- ``confluent-kafka``: one consumer, assign + seek to the beginning, ``consume(10000)`` until every
  record arrived, touching each value (``len``): what a plain Python client reaches.
- ``spark batch read``: ``spark.read.format("tidelog") ... .write.format("noop")`` — every record
  becomes a row of Arrow batches in the Python workers and crosses into the JVM; nothing else.
- ``spark streaming micro-batch``: one ``availableNow`` micro-batch over the whole topic into the noop
  sink (fresh checkpoint each run); rows / the micro-batch's ``triggerExecution`` time.
- ``pyspark ceiling``: a Python data source whose tasks yield the same number of rows as prebuilt Arrow
  batches of the same schema and sizes (no broker): the most any Python data source can reach here.
- with ``--write``, ``spark batch write``: N rows of the same size written by the at-least-once writer.

Spark runs on ``--master`` (default ``local[*]``); Spark reads with as many tasks as ``--min-partitions``
(default: cores). The broker is a ``tidelog.testing`` broker started here, or ``--bootstrap-server``.
Not a test: nothing is asserted.

    python bench/spark_bench.py                  # 10 million records
    python bench/spark_bench.py --n 2000000 --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

import tidelog.testing
from tidelog.spark import session

console = Console()


def fill(bootstrap: str, topic: str, n: int, record_bytes: int, partitions: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "none",
        }
    )
    value = os.urandom(record_bytes // 2).hex().encode()[:record_bytes]
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(600) == 0
    return time.perf_counter() - start


def confluent_read(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            # the same fetch tuning as the tidelog reader (tidelog.spark.fetch)
            "fetch.queue.backoff.ms": 2,
            "queued.min.messages": 500_000,
            "queued.max.messages.kbytes": 256 * 1024,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    total_bytes = 0
    start = time.perf_counter()
    while seen < n:
        for m in consumer.consume(10_000, timeout=1.0):
            if m.error() is None:
                seen += 1
                total_bytes += len(m.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def spark_batch(spark: Any, bootstrap: str, topic: str, min_partitions: int) -> float:
    df = (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("minPartitions", str(min_partitions))
        .load()
    )
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def spark_stream(spark: Any, bootstrap: str, topic: str, min_partitions: int, n: int) -> float:
    checkpoint = tempfile.mkdtemp(prefix="spark-bench-cp-")
    try:
        query = (
            spark.readStream.format("tidelog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("minPartitions", str(min_partitions))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert sum(p["numInputRows"] for p in batches) == n, batches
        return sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def ceiling_source(n: int, tasks: int, record_bytes: int) -> type:
    """A Python data source yielding prebuilt Arrow batches of the tidelog schema: PySpark's own limit."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tidelog.spark.schema import arrow_schema, ddl

    class CeilingReader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:
            share, extra = divmod(n, tasks)
            return [InputPartition(share + (1 if i < extra else 0)) for i in range(tasks)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            rows = 20_000
            value = b"x" * record_bytes
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([None] * rows, pa.binary()),
                    pa.array([value] * rows, pa.binary()),
                    pa.array(["t"] * rows, pa.string()),
                    pa.array([0] * rows, pa.int32()),
                    pa.array(range(rows), pa.int64()),
                    pa.array([0] * rows, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                    pa.array([0] * rows, pa.int32()),
                ],
                schema=arrow_schema(False),
            )
            left = partition.value
            while left > 0:
                take = min(rows, left)
                yield batch if take == rows else batch.slice(0, take)
                left -= take

    class CeilingSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "tidelog_bench_ceiling"

        def schema(self) -> str:
            return ddl(False)

        def reader(self, schema: Any) -> CeilingReader:  # noqa: ARG002
            return CeilingReader()

    return CeilingSource


def spark_write(spark: Any, bootstrap: str, topic: str, n: int, record_bytes: int, tasks: int) -> float:
    """The at-least-once writer: n rows of record_bytes values from spark.range into a topic."""
    df = spark.range(0, n, 1, tasks).selectExpr(f"cast(repeat('x', {record_bytes}) as binary) as value")
    start = time.perf_counter()
    df.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode(
        "append"
    ).save()
    return time.perf_counter() - start


def spark_ceiling(spark: Any) -> float:
    start = time.perf_counter()
    spark.read.format("tidelog_bench_ceiling").load().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="records (default: %(default)s)")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2, help="topic partitions (default: %(default)s)")
    parser.add_argument(
        "--min-partitions",
        type=int,
        default=2 * (os.cpu_count() or 1),
        help="Spark tasks (default: 2 x cores)",
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--bootstrap-server", help="use this broker instead of starting one")
    parser.add_argument("--write", action="store_true", help="also time the at-least-once writer (N rows)")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        if args.bootstrap_server:
            bootstrap = args.bootstrap_server
        else:
            broker = stack.enter_context(tidelog.testing.broker({"log.segment.bytes": 256 * 1024 * 1024}))
            bootstrap = broker.bootstrap_servers
        topic = f"spark-bench-{int(time.time())}"
        console.print(
            f"filling {topic}: {args.n:,} x {args.record_bytes} B in {args.partitions} partitions ..."
        )
        fill_s = fill(bootstrap, topic, args.n, args.record_bytes, args.partitions)
        console.print(f"  produced in {fill_s:.1f} s ({args.n / fill_s:,.0f} rows/s)")

        spark = session(args.master, app_name="tidelog spark bench", conf={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(ceiling_source(args.n, args.min_partitions, args.record_bytes))

        cases = {
            "confluent-kafka (1 consumer, direct)": lambda: confluent_read(
                bootstrap, topic, args.n, args.partitions
            ),
            "spark batch read -> noop": lambda: spark_batch(spark, bootstrap, topic, args.min_partitions),
            "spark streaming micro-batch -> noop": lambda: spark_stream(
                spark, bootstrap, topic, args.min_partitions, args.n
            ),
            "pyspark ceiling (prebuilt Arrow batches)": lambda: spark_ceiling(spark),
        }
        if args.write:
            cases["spark batch write (at-least-once)"] = lambda: spark_write(
                spark, bootstrap, f"{topic}-out", args.n, args.record_bytes, args.min_partitions
            )
        table = Table(
            title=f"{args.n:,} records x {args.record_bytes} B, master {args.master}, "
            f"{args.partitions} topic partitions, {args.min_partitions} Spark tasks"
        )
        table.add_column("path")
        table.add_column("best rows/s", justify="right")
        table.add_column("runs (s)", justify="right")
        for name, case in cases.items():
            times = []
            for _ in range(args.runs):
                times.append(case())
                console.print(f"  {name}: {times[-1]:.2f} s")
            table.add_row(name, f"{args.n / min(times):,.0f}", ", ".join(f"{t:.2f}" for t in times))
        console.print(table)
        spark.stop()


if __name__ == "__main__":
    main()
