"""Batch and streaming writers of the ``tidelog`` data source: at-least-once, with a confluent-kafka producer.

Invariants:

- Input columns are Spark's Kafka sink's: ``value`` (binary or string, required), ``key`` (binary or
  string, optional), ``topic`` (string; the ``topic`` option, when given, wins for every row),
  ``partition`` (int, optional: null or absent lets the producer's partitioner choose), ``headers``
  (array<struct<key string, value binary>>, optional). Any other column is an error named at plan time.
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
from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

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
    """Raise :class:`OptionError` for a DataFrame the sink cannot write (checked on the driver)."""
    fields = {f.name: f.dataType for f in schema.fields}
    text = (BinaryType, StringType)
    allowed = {"key", "value", "topic", "partition", "headers"}
    extra = sorted(set(fields) - allowed)
    if extra:
        raise OptionError(
            f"the tidelog sink writes key, value, topic, partition, headers; unexpected columns {extra}"
        )
    if "value" not in fields:
        raise OptionError("the tidelog sink needs a value column (binary or string)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], text):
            raise OptionError(f"column {name} must be binary or string, not {fields[name].simpleString()}")
    if options.topic is None and "topic" not in fields:
        raise OptionError("the tidelog sink needs the topic option or a topic column")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"column topic must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"column partition must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
        )
        if not ok:
            raise OptionError("column headers must be array<struct<key: string, value: binary>>")


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
            while True:
                try:
                    # partition -1: librdkafka's "unassigned" (the partitioner chooses)
                    produce(
                        topic,
                        values[i],
                        keys[i],
                        partition=-1 if partition is None else partition,
                        headers=headers,
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
