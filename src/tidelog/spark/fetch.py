"""Read one offset range of one partition into Arrow record batches (what a Spark task runs).

Invariants:

- A read is a confluent-kafka consumer assigned to exactly one partition at ``from_offset`` (assign and
  seek, no group, nothing committed), borrowed from the worker's :mod:`~tidelog.spark.consumer_pool` (a
  micro-batch that starts where the last one of that partition ended starts with the records the pooled
  consumer had already taken off its queue), and it
  yields every record with ``from_offset <= offset < until_offset`` once, in offset order, as
  :class:`pyarrow.RecordBatch` es of the exact schema :func:`tidelog.spark.schema.arrow_schema` gives
  (never Python tuples), at most ``kafka.max.poll.records`` records per batch when set.
- The consumer's buffers are bounded (16 MB queued, 16 MB per fetch, 8 MB per partition fetch) unless the
  user's ``kafka.queued.max.messages.kbytes`` / ``fetch.max.bytes`` / ``max.partition.fetch.bytes`` say
  otherwise.
- With ``read_committed`` the broker leaves out aborted records and control batches; the read ends when
  a record at ``until_offset - 1`` arrived or the consumer reached the partition's end at or past
  ``until_offset`` (the records in between were control or aborted ones).
- An offset-out-of-range answer (offsets deleted by retention, a topic deleted and created again) is
  data loss as Spark's connector decides it (:func:`~tidelog.spark.offsets.resume_after_out_of_range`):
  :class:`DataLossError` when ``failOnDataLoss`` is true; otherwise the read goes on at the first offset
  still in the log, never below the offset it had reached, and the lost offsets are skipped.
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

from tidelog.spark.consumer_pool import POOL, pool_key
from tidelog.spark.offsets import OffsetRange, resume_after_out_of_range
from tidelog.spark.options import ReaderOptions
from tidelog.spark.schema import HEADERS_TYPE, TIMESTAMP_TYPE, arrow_schema

__all__ = ["DataLossError", "FetchTimeoutError", "fetch_config", "messages_to_batch", "read_range"]

_CONSUME_BATCH = 20_000
_QUEUE_KBYTES = 16 * 1024
_FETCH_MAX_BYTES = 16 * 1024 * 1024
_PARTITION_FETCH_BYTES = 8 * 1024 * 1024
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


def fetch_config(options: ReaderOptions, size: int) -> dict[str, str | bool | int]:
    """The executor's consumer settings: bounded buffers unless the user's ``kafka.*`` options say else."""
    config = options.consumer_config("executor")
    # librdkafka stops fetching while its queue is above these thresholds and then, by default, waits up to
    # fetch.queue.backoff.ms=1000 before fetching again: with a reader that drains the queue in bursts that
    # halves throughput. 2 ms keeps fetches flowing without spinning (0 busy-loops a core).
    config.setdefault("fetch.queue.backoff.ms", 2)
    config.setdefault("queued.min.messages", max(1000, min(500_000, size)))
    # Bounded: what one task's consumer holds outside Spark's memory accounting (a pooled, idle one too).
    config.setdefault("queued.max.messages.kbytes", _QUEUE_KBYTES)
    config.setdefault("fetch.max.bytes", _FETCH_MAX_BYTES)
    config.setdefault("max.partition.fetch.bytes", _PARTITION_FETCH_BYTES)
    return config


def _release(consumer: Consumer) -> None:
    """An idle pooled consumer fetches nothing: it is unassigned, not paused. librdkafka's pause and resume
    race its assign (librdkafka issues 2190 and 5591: an assign's start offset dropped, a partition left
    paused for good), and a partition paused across a broker restart was seen never to fetch again; a fresh
    assign at an explicit offset starts the fetcher from scratch every time."""
    consumer.unassign()


def read_range(options: ReaderOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of ``offset_range`` as Arrow batches (see the module invariants)."""
    topic, partition = offset_range.topic, offset_range.partition
    start, until = offset_range.from_offset, offset_range.until_offset
    if start >= until:
        return
    config = fetch_config(options, until - start)
    key = pool_key(config, topic, partition)
    entry = POOL.borrow(key, lambda: Consumer(config))
    consumer = entry.consumer
    tp = TopicPartition(topic, partition)
    finished = False
    # Tens of thousands of Message objects per consume(): with the cyclic GC on, its collections over
    # them cost about as much as the conversion itself. Nothing here makes cycles; it is back on after.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        pending: list[Message] = []
        fetch_from = start
        if entry.next_offset == start and entry.leftover:  # the pooled consumer stopped exactly here
            pending, entry.leftover = entry.leftover, []
            fetch_from = _offset_of(pending[-1]) + 1
        entry.leftover = []
        consumer.assign([TopicPartition(topic, partition, fetch_from)])
        entry.next_offset = None
        position = start  # the first offset not yet yielded
        batch_size = options.max_poll_records or _CONSUME_BATCH
        timeout_s = options.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        while True:
            messages = pending or consumer.consume(num_messages=batch_size, timeout=0.5)
            pending = []
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
                        low, high = consumer.get_watermark_offsets(
                            tp, timeout=_WATERMARK_TIMEOUT_S, cached=False
                        )
                        resume, lost = resume_after_out_of_range(position, until, int(low), int(high))
                        if lost is not None:
                            _data_loss(options, f"{topic}:{partition} {lost}")
                        if resume >= until:
                            return
                        consumer.assign([TopicPartition(topic, partition, resume)])
                        position = resume
                        records = []
                        break
                    elif not error.retriable():
                        raise RuntimeError(f"{topic}:{partition}: {error}")
            if records:
                if _offset_of(records[-1]) >= until - 1:
                    done = True
                    if _offset_of(records[-1]) >= until:
                        offsets = [_offset_of(m) for m in records]
                        cut = bisect.bisect_left(offsets, until)
                        records, entry.leftover = records[:cut], records[cut:]
                if records:
                    yield messages_to_batch(records, topic, partition, options.include_headers)
                    position = _offset_of(records[-1]) + 1
            if done:
                entry.next_offset = until
                finished = True
                return
    finally:
        if finished:
            POOL.give_back(key, entry, _release)
        else:
            POOL.discard(entry)
        if gc_was_enabled:
            gc.enable()
