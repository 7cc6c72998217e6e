"""Batch and streaming writers of the ``tidelog`` data source: at-least-once, with a confluent-kafka producer.

Invariants:

- Input columns are Spark's Kafka sink's: ``value`` (binary or string, required), ``key`` (binary or
  string, optional), ``topic`` (string; the ``topic`` option, when given, wins for every row),
  ``partition`` (int, optional: null or absent lets the producer's partitioner, murmur2 of the key as
  in the Java client, choose), ``headers`` (array<struct<key string, value binary>>, optional) and, as
  in Spark 4, ``timestamp`` (timestamp, optional: the record's CreateTime; null means now). Any other
  column is ignored, as Spark does, so a source's rows (``load().writeStream``) can be written as they
  are. A column of the wrong type fails at plan time with Spark's message.
- Each Spark task writes its rows with one producer and returns only after every row was acknowledged
  (``flush``); a single failed delivery fails the task, so Spark retries it: rows of a retried task may
  be written twice (at-least-once), a committed batch never misses a row.
- Writers read Arrow batches (``DataSourceArrowWriter`` / ``DataSourceStreamArrowWriter``), never rows.
- ``deliveryGuarantee=exactly-once`` is refused by :mod:`tidelog.spark.exactly_once` until the broker
  has transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypedDict

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from tidelog.spark.options import OptionError, WriterOptions

__all__ = [
    "BatchWriter",
    "ProducerWriteError",
    "StreamWriter",
    "WrittenRows",
    "check_input_schema",
    "produce_batches",
]

_QUEUE_FULL_WAIT_S = 0.05


class ProducerWriteError(RuntimeError):
    """At least one row was not acknowledged by the broker (the Spark task fails and is retried)."""


@dataclass(frozen=True)
class WrittenRows(WriterCommitMessage):
    """What a task reports to the driver: rows it wrote, acknowledged."""

    rows: int


def check_input_schema(schema: StructType, options: WriterOptions) -> None:
    """Raise :class:`OptionError` for a DataFrame the sink cannot write (checked on the driver).

    Spark's Kafka sink's checks and messages (``KafkaWriter.validateQuery``); other columns are ignored.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    text = (BinaryType, StringType)

    def unsupported(name: str, expected: str) -> OptionError:
        return OptionError(
            f"{name} attribute unsupported type {fields[name].simpleString()}. {name} attribute type must be "
            f"a {expected}"
        )

    if options.topic is None and "topic" not in fields:
        raise OptionError(
            "topic option required when no 'topic' attribute is present. Use the topic option for setting a "
            "topic."
        )
    if options.topic is None and not isinstance(fields["topic"], StringType):
        raise unsupported("topic", "string")
    if "key" in fields and not isinstance(fields["key"], text):
        raise unsupported("key", "string or binary")
    if "value" not in fields:
        raise OptionError("Required attribute 'value' not found")
    if not isinstance(fields["value"], text):
        raise unsupported("value", "string or binary")
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [(f.name, type(f.dataType)) for f in headers.elementType.fields]
            == [("key", StringType), ("value", BinaryType)]
        )
        if not ok:
            raise unsupported("headers", "array<struct<key:string,value:binary>>")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise unsupported("partition", "int")
    if "timestamp" in fields and not isinstance(fields["timestamp"], TimestampType | TimestampNTZType):
        raise unsupported("timestamp", "timestamp")


class _Header(TypedDict):
    key: str
    value: bytes | None


# The Python values of a column, as pyarrow (untyped) hands them: their types are the ones
# check_input_schema admits at plan time.


def _text_column(batch: pa.RecordBatch, name: str) -> list[str | bytes | None] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    values: list[str | bytes | None] = batch.column(index).to_pylist()
    return values


def _int_column(batch: pa.RecordBatch, name: str) -> list[int | None] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    values: list[int | None] = batch.column(index).to_pylist()
    return values


def _timestamp_column(batch: pa.RecordBatch) -> list[int | None] | None:
    """The ``timestamp`` column as milliseconds since the epoch (Arrow gives microseconds)."""
    index = batch.schema.get_field_index("timestamp")
    if index < 0:
        return None
    micros: list[int | None] = pc.cast(batch.column(index), pa.int64()).to_pylist()
    return [None if us is None else us // 1000 for us in micros]


def _headers_column(batch: pa.RecordBatch) -> list[list[_Header] | None] | None:
    index = batch.schema.get_field_index("headers")
    if index < 0:
        return None
    values: list[list[_Header] | None] = batch.column(index).to_pylist()
    return values


_DeliveryCallback = Callable[[KafkaError | None, Message], None]


def produce_rows(
    producer: Producer, options: WriterOptions, batches: Iterator[pa.RecordBatch], failures: list[str]
) -> int:
    """Hand every row of ``batches`` to ``producer`` (not flushed); stops early once ``failures`` fills."""
    produce = producer.produce
    rows = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = _text_column(batch, "value")
        assert values is not None
        keys = _text_column(batch, "key") or [None] * n
        topics = [options.topic] * n if options.topic is not None else _text_column(batch, "topic")
        assert topics is not None
        partitions = _int_column(batch, "partition")
        header_lists = _headers_column(batch)
        timestamps = _timestamp_column(batch)
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ProducerWriteError("a row has a null topic and no topic option is set")
            assert isinstance(topic, str)  # a string column (check_input_schema)
            partition = partitions[i] if partitions is not None else None
            row_headers = header_lists[i] if header_lists is not None else None
            headers: list[tuple[str, str | bytes | None]] | None = (
                [(h["key"], h["value"]) for h in row_headers] if row_headers else None
            )
            timestamp = timestamps[i] if timestamps is not None else None
            while True:
                try:
                    # partition -1: librdkafka's "unassigned" (the partitioner chooses); timestamp 0: now
                    produce(
                        topic,
                        values[i],
                        keys[i],
                        partition=-1 if partition is None else partition,
                        headers=headers,
                        timestamp=timestamp or 0,
                    )
                    break
                except BufferError:
                    producer.poll(_QUEUE_FULL_WAIT_S)
        rows += n
        producer.poll(0)
        if failures:
            break
    return rows


def failure_collector() -> tuple[list[str], _DeliveryCallback]:
    """A list that fills with failed deliveries, and the ``on_delivery`` callback that fills it."""
    failures: list[str] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}[{message.partition()}]: {error}")

    return failures, on_delivery


def produce_batches(options: WriterOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of ``batches``; returns the row count once all are acknowledged."""
    failures, on_delivery = failure_collector()
    config: dict[str, object] = dict(options.producer_config())
    config["on_delivery"] = on_delivery
    config.setdefault("delivery.report.only.error", True)
    producer = Producer(config)
    rows = produce_rows(producer, options, batches, failures)
    remaining = producer.flush(600)
    if failures:
        raise ProducerWriteError(f"{len(failures)} rows were not written; first: {failures[0]}")
    if remaining:
        raise ProducerWriteError(f"{remaining} rows were still unacknowledged after 600 s")
    return rows


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("tidelog")`` (append only, like Spark's Kafka sink)."""

    def __init__(self, options: WriterOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return WrittenRows(produce_batches(self.options, iterator))


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("tidelog")``; a micro-batch is committed once every task flushed."""

    def __init__(self, options: WriterOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRows:
        return WrittenRows(produce_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every row is already acknowledged by the broker; nothing to complete."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows of the failed micro-batch that were acknowledged stay (at-least-once): Spark replays it."""
