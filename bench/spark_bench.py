"""Spark benchmark: rows/s through the ``tidelog`` data source beside confluent-kafka and PySpark's ceiling.

For each topic partition count of ``--partitions`` (default ``1,16``, issue 16's shape) fills a topic with
N records of ``--record-bytes`` value bytes (default 10 million x 100 B, keyless), then measures, each
``--runs`` times (the best run is reported, the others shown), on that same topic in the same run:

- ``confluent-kafka``: one consumer, assign + seek to the beginning, ``consume(10000)`` until every
  record arrived, touching each value (``len``): what a plain Python client reaches.
- ``spark batch read``: ``spark.read.format("tidelog") ... .write.format("noop")`` — every record
  becomes a row of Arrow batches in the Python workers and crosses into the JVM; nothing else. Once per
  reader path: ``librdkafka`` (confluent-kafka messages, the default) and ``arrow`` (``arrowDecode=true``:
  raw record batches decoded straight into Arrow columns). The table names the Spark task count.
- with ``--streaming``, ``spark streaming micro-batch``: one ``availableNow`` micro-batch over the whole
  topic into the noop sink (fresh checkpoint each run); rows / the micro-batch's ``triggerExecution`` time.
- ``pyspark ceiling``: a Python data source whose tasks yield the same number of rows as prebuilt Arrow
  batches of the same schema and sizes (no broker): the most any Python data source can reach here.
- with ``--write``, ``spark batch write``: N rows of the same size written by the at-least-once writer.

Spark runs on ``--master`` (default ``local[*]``); Spark reads with ``minPartitions`` = ``--min-partitions``
(default: 2 x cores; a topic with more partitions gets one task per partition). The broker is a
``tidelog.testing`` broker started here, or ``--bootstrap-server``. Not a test: nothing is asserted.

    python bench/spark_bench.py                                  # 10 million records, 1 and 16 partitions
    python bench/spark_bench.py --n 1000000 --runs 1             # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import functools
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


def _batch_df(spark: Any, bootstrap: str, topic: str, min_partitions: int, arrow: bool) -> Any:
    return (
        spark.read.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("minPartitions", str(min_partitions))
        .option("arrowDecode", str(arrow).lower())
        .load()
    )


def spark_tasks(spark: Any, bootstrap: str, topic: str, min_partitions: int) -> int:
    """How many Spark tasks a batch read of the topic runs (one per planned offset range)."""
    return int(_batch_df(spark, bootstrap, topic, min_partitions, False).rdd.getNumPartitions())


def spark_batch(spark: Any, bootstrap: str, topic: str, min_partitions: int, arrow: bool) -> float:
    df = _batch_df(spark, bootstrap, topic, min_partitions, arrow)
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
    parser.add_argument(
        "--partitions", default="1,16", help="topic partition counts, one topic each (default: %(default)s)"
    )
    parser.add_argument(
        "--min-partitions",
        type=int,
        default=2 * (os.cpu_count() or 1),
        help="Spark's minPartitions (default: 2 x cores)",
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--bootstrap-server", help="use this broker instead of starting one")
    parser.add_argument(
        "--paths", default="librdkafka,arrow", help="reader paths to time (default: %(default)s)"
    )
    parser.add_argument("--streaming", action="store_true", help="also time one availableNow micro-batch")
    parser.add_argument("--write", action="store_true", help="also time the at-least-once writer (N rows)")
    args = parser.parse_args()
    partition_counts = [int(p) for p in args.partitions.split(",")]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]

    with contextlib.ExitStack() as stack:
        if args.bootstrap_server:
            bootstrap = args.bootstrap_server
        else:
            broker = stack.enter_context(tidelog.testing.broker({"log.segment.bytes": 256 * 1024 * 1024}))
            bootstrap = broker.bootstrap_servers
        spark = session(args.master, app_name="tidelog spark bench", conf={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(ceiling_source(args.n, args.min_partitions, args.record_bytes))
        table = Table(title=f"{args.n:,} records x {args.record_bytes} B, master {args.master}")
        table.add_column("topic partitions", justify="right")
        table.add_column("path")
        table.add_column("Spark tasks", justify="right")
        table.add_column("best rows/s", justify="right")
        table.add_column("runs (s)", justify="right")

        def measure(partitions: int | str, name: str, tasks: int | str, case: Any) -> None:
            times = []
            for _ in range(args.runs):
                times.append(case())
                console.print(f"  {name}: {times[-1]:.2f} s")
            row = [str(partitions), name, str(tasks), f"{args.n / min(times):,.0f}"]
            table.add_row(*row, ", ".join(f"{t:.2f}" for t in times))

        for partitions in partition_counts:
            topic = f"spark-bench-{partitions}p-{int(time.time())}"
            console.print(
                f"filling {topic}: {args.n:,} x {args.record_bytes} B in {partitions} partitions ..."
            )
            fill_s = fill(bootstrap, topic, args.n, args.record_bytes, partitions)
            console.print(f"  produced in {fill_s:.1f} s ({args.n / fill_s:,.0f} rows/s)")
            tasks = spark_tasks(spark, bootstrap, topic, args.min_partitions)
            measure(
                partitions,
                "confluent-kafka (1 consumer, direct)",
                1,
                functools.partial(confluent_read, bootstrap, topic, args.n, partitions),
            )
            for path in paths:
                measure(
                    partitions,
                    f"spark batch read -> noop ({path})",
                    tasks,
                    functools.partial(
                        spark_batch, spark, bootstrap, topic, args.min_partitions, path == "arrow"
                    ),
                )
            if args.streaming:
                measure(
                    partitions,
                    "spark streaming micro-batch -> noop",
                    tasks,
                    functools.partial(spark_stream, spark, bootstrap, topic, args.min_partitions, args.n),
                )
            if args.write:
                measure(
                    partitions,
                    "spark batch write (at-least-once)",
                    args.min_partitions,
                    functools.partial(
                        spark_write,
                        spark,
                        bootstrap,
                        f"{topic}-out",
                        args.n,
                        args.record_bytes,
                        args.min_partitions,
                    ),
                )
        measure(
            "-", "pyspark ceiling (prebuilt Arrow batches)", args.min_partitions, lambda: spark_ceiling(spark)
        )
        console.print(table)
        spark.stop()


if __name__ == "__main__":
    main()
