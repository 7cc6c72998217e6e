"""Read one offset range of one partition into Arrow record batches (what a Spark task runs).

Invariants:

- A read is a confluent-kafka consumer assigned to exactly one partition at ``from_offset`` (assign and
  seek, no group, nothing committed) and it yields every record with ``from_offset <= offset <
  until_offset`` once, in offset order, as :class:`pyarrow.RecordBatch` es of the exact schema
  :func:`tidelog.spark.schema.arrow_schema` gives (never Python tuples).
- With ``read_committed`` the broker leaves out aborted records and control batches; the read ends when
  a record at ``until_offset - 1`` arrived or the consumer reached the partition's end at or past
  ``until_offset`` (the records in between were control or aborted ones).
- Offsets deleted by retention (``from_offset`` below the log start offset, or an offset-out-of-range
  answer while reading) raise :class:`DataLossError` when ``failOnDataLoss`` is true; otherwise the read
  continues at the log start offset and the lost offsets are skipped.
- No record for ``poll_timeout_ms`` while offsets are still owed raises :class:`FetchTimeoutError`.
"""

from __future__ import annotations

import bisect
import gc
import operator
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from tidelog.spark.offsets import OffsetRange
from tidelog.spark.options import ReaderOptions
from tidelog.spark.schema import HEADERS_TYPE, TIMESTAMP_TYPE, arrow_schema

__all__ = ["DataLossError", "FetchTimeoutError", "messages_to_batch", "read_range"]

_CONSUME_BATCH = 20_000
_key = Message.key
_value = Message.value
_offset = Message.offset
_timestamp = Message.timestamp
_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_WATERMARK_TIMEOUT_S = 30.0
_LOST_CODES = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}


def _offset_of(message: Message) -> int:
    """The offset of a consumed record or partition-end event (librdkafka always sets one on those)."""
    offset = message.offset()
    assert offset is not None
    return offset


class DataLossError(RuntimeError):
    """Offsets the query must read are gone (deleted by retention, or the topic was recreated)."""


class FetchTimeoutError(TimeoutError):
    """The broker sent nothing for ``kafkaConsumer.pollTimeoutMs`` while offsets were still owed."""


def _data_loss(options: ReaderOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost because it is no longer available in the broker "
            "(deleted by retention, or the topic was deleted). Set failOnDataLoss=false to skip it."
        )


def _headers(messages: Sequence[Message]) -> pa.Array:
    values = []
    for m in messages:
        headers = m.headers()
        # consumed headers are (name, bytes or None) pairs; confluent-kafka's type also admits a dict
        pairs = headers.items() if isinstance(headers, dict) else headers
        values.append(None if not pairs else [{"key": k, "value": v} for k, v in pairs])
    return pa.array(values, type=HEADERS_TYPE)


def messages_to_batch(
    messages: Sequence[Message], topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """confluent-kafka messages (all of one partition, no error events) -> one Arrow batch.

    The hot path of every read: one C-level ``map`` per column, constant columns as ``pa.repeat``.
    """
    n = len(messages)
    timestamps = list(map(_timestamp, messages))
    kinds = set(map(_first, timestamps))
    if len(kinds) == 1:
        timestamp_type = pa.repeat(pa.scalar(kinds.pop() - 1, pa.int32()), n)
    else:
        timestamp_type = pa.array([kind - 1 for kind in map(_first, timestamps)], type=pa.int32())
    millis = pa.array(list(map(_second, timestamps)), type=pa.int64())
    columns = [
        pa.array(list(map(_key, messages)), type=pa.binary()),
        pa.array(list(map(_value, messages)), type=pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(list(map(_offset, messages)), type=pa.int64()),
        pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE),
        timestamp_type,
    ]
    if include_headers:
        columns.append(_headers(messages))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def read_range(options: ReaderOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of ``offset_range`` as Arrow batches (see the module invariants)."""
    topic, partition = offset_range.topic, offset_range.partition
    start, until = offset_range.from_offset, offset_range.until_offset
    if start >= until:
        return
    config = options.consumer_config()
    # librdkafka stops fetching while its queue is above these thresholds and then, by default, waits up to
    # fetch.queue.backoff.ms=1000 before fetching again: with a reader that drains the queue in bursts that
    # halves throughput. 2 ms keeps fetches flowing without spinning (0 busy-loops a core). The queue is
    # deep, but never far past the range's end.
    config.setdefault("fetch.queue.backoff.ms", 2)
    config.setdefault("queued.min.messages", max(1000, min(500_000, until - start)))
    config.setdefault("queued.max.messages.kbytes", 256 * 1024)
    config.setdefault("fetch.max.bytes", 64 * 1024 * 1024)
    config.setdefault("max.partition.fetch.bytes", 16 * 1024 * 1024)
    consumer = Consumer(config)
    # Tens of thousands of Message objects per consume(): with the cyclic GC on, its collections over
    # them cost about as much as the conversion itself. Nothing here makes cycles; it is back on after.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=_WATERMARK_TIMEOUT_S, cached=False
        )
        if start < low:
            _data_loss(options, f"{topic}:{partition} offsets {start}..{min(low, until) - 1} were deleted")
            start = low
            if start >= until:
                return
        if high < start:
            _data_loss(
                options, f"{topic}:{partition} ends at {high}, before offset {start} the query reached"
            )
            return
        consumer.assign([TopicPartition(topic, partition, start)])
        timeout_s = options.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        while True:
            messages = consumer.consume(num_messages=_CONSUME_BATCH, timeout=0.5)
            if not messages:
                if time.monotonic() - last_progress > timeout_s:
                    raise FetchTimeoutError(
                        f"{topic}:{partition}: nothing received for {options.poll_timeout_ms} ms while reading "
                        f"offsets up to {until - 1} (kafkaConsumer.pollTimeoutMs)"
                    )
                continue
            last_progress = time.monotonic()
            records = messages
            done = False
            if any(m.error() is not None for m in messages):
                records = []
                for m in messages:
                    error = m.error()
                    if error is None:
                        records.append(m)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        done = done or _offset_of(m) >= until
                    elif error.code() in _LOST_CODES:
                        _data_loss(options, f"{topic}:{partition} offset out of range while reading: {error}")
                        low, _ = consumer.get_watermark_offsets(
                            TopicPartition(topic, partition), timeout=_WATERMARK_TIMEOUT_S, cached=False
                        )
                        if low >= until:
                            return
                        consumer.assign([TopicPartition(topic, partition, low)])
                        break
                    elif not error.retriable():
                        raise RuntimeError(f"{topic}:{partition}: {error}")
            if records:
                if _offset_of(records[-1]) >= until - 1:
                    done = True
                    if _offset_of(records[-1]) >= until:
                        offsets = [_offset_of(m) for m in records]
                        records = records[: bisect.bisect_left(offsets, until)]
                if records:
                    yield messages_to_batch(records, topic, partition, options.include_headers)
            if done:
                return
    finally:
        consumer.close()
        if gc_was_enabled:
            gc.enable()
