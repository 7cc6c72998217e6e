"""The two-phase sink's durable commit intent: which prepared transactions make up micro-batch ``b``,
written before the driver commits the first of them (:mod:`tidelog.spark.two_phase`).

A query ``q`` keeps one intent, the latest: a record in ``__tidelog_spark_sinks-0`` (key
``tidelog-spark-{q}-2pc``, value :meth:`BatchIntent.to_json`) and a pointer to it, the committed offset of
the consumer group ``tidelog-spark-{q}-2pc`` on that partition (offset ``b + 1``, metadata
``{"batch": b, "offset": <record offset>}``).

Invariants:

- :func:`record_intent` returns only after both the record (acks=all, idempotent) and the pointer are
  durable; a crash between the two leaves a record nothing points at, which is never read (the batch has no
  intent, as if the driver died before writing it).
- :func:`read_intent` answers the intent the pointer names, or None when there is no pointer; a record
  that is gone (``__tidelog_spark_sinks``'s retention, after a long stop) gives the pointer's batch with no
  transactions, and a warning.
- Across a failover of ``__tidelog_spark_sinks-0``'s leader or of the group's coordinator, the pointer's
  commit and read are asked again (a retriable or connection error, with :mod:`tidelog.spark.retry`'s
  backoff, up to 60 s), and
  a connection error while reading the record is waited out (librdkafka follows the new leader): a
  failover never fails the micro-batch's commit by itself.
- A pointer moves forward only: the driver writes intent ``b + 1`` after every transaction of intent ``b``
  was committed (the driver's ``commit`` returned), so only the latest intent can be incomplete.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tidelog.client.txn_producer import PreparedTransaction
from tidelog.spark.options import WriterOptions
from tidelog.spark.retry import ride_through
from tidelog.spark.transactional import PROGRESS_TOPIC

__all__ = ["BatchIntent", "intent_group", "read_intent", "record_intent"]

log = logging.getLogger("tidelog.spark")

_TIMEOUT_S = 60.0
_T = TypeVar("_T")

# errors of a broker going away or a leader / coordinator moving: asking again shortly is expected to work
_TRANSIENT = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
    }
)


def _transient(error: KafkaError) -> bool:
    return not error.fatal() and (error.code() in _TRANSIENT or error.retriable())


def _transient_exception(exc: BaseException) -> bool:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(error, KafkaError) and _transient(error)


def _retrying(what: str, call: Callable[[], _T]) -> _T:
    """``call()``, asked again while it fails with a transient error (the source's retry policy,
    :func:`~tidelog.spark.retry.ride_through`: backoff 0.1 s doubling to 1 s, for up to 60 s)."""
    return ride_through(what, lambda _left: call(), _transient_exception)


@dataclass(frozen=True)
class BatchIntent:
    """Micro-batch ``batch`` is these prepared transactions, one per write task (committed all or none)."""

    batch: int
    transactions: tuple[PreparedTransaction, ...]

    def to_json(self) -> str:
        return json.dumps(
            {"batch": self.batch, "transactions": [json.loads(t.to_json()) for t in self.transactions]},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> BatchIntent:
        data = json.loads(text)
        return cls(
            int(data["batch"]),
            tuple(PreparedTransaction.from_json(json.dumps(t)) for t in data["transactions"]),
        )


def intent_group(query_id: str) -> str:
    return f"tidelog-spark-{query_id}-2pc"


def _consumer(options: WriterOptions, group: str) -> Consumer:
    return Consumer(
        {
            **options.client_config,
            "bootstrap.servers": options.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


def record_intent(options: WriterOptions, query_id: str, intent: BatchIntent) -> None:
    """Write ``intent`` durably (the record, then the pointer to it)."""
    key = intent_group(query_id)
    written: list[Message] = []
    failed: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failed.append(error)
        else:
            written.append(message)

    producer = Producer(
        {
            "bootstrap.servers": options.bootstrap_servers,
            **options.client_config,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    producer.produce(
        PROGRESS_TOPIC, intent.to_json().encode(), key.encode(), partition=0, on_delivery=on_delivery
    )
    if producer.flush(_TIMEOUT_S) or failed or not written:
        raise RuntimeError(
            f"cannot record the commit intent of micro-batch {intent.batch}: {failed or 'timeout'}"
        )
    offset = written[0].offset()
    assert offset is not None
    pointer = json.dumps({"batch": intent.batch, "offset": offset}, separators=(",", ":"))
    consumer = _consumer(options, key)
    try:
        _retrying(
            f"recording the commit intent of micro-batch {intent.batch}",
            lambda: consumer.commit(
                offsets=[TopicPartition(PROGRESS_TOPIC, 0, intent.batch + 1, metadata=pointer)],
                asynchronous=False,
            ),
        )
    finally:
        consumer.close()


def read_intent(options: WriterOptions, query_id: str) -> BatchIntent | None:
    """The latest intent recorded for query ``query_id``, or None."""
    key = intent_group(query_id)
    consumer = _consumer(options, key)
    try:
        [committed] = _retrying(
            f"reading the commit intent of query {query_id}",
            lambda: consumer.committed([TopicPartition(PROGRESS_TOPIC, 0)], timeout=_TIMEOUT_S),
        )
        try:
            pointer = json.loads(committed.metadata or "")
            batch, offset = int(pointer["batch"]), int(pointer["offset"])
        except (ValueError, KeyError, TypeError):
            return None
        consumer.assign([TopicPartition(PROGRESS_TOPIC, 0, offset)])
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            message = consumer.poll(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise RuntimeError(
                    f"timed out reading the commit intent of query {query_id} at offset {offset}"
                )
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                if _transient(error) and time.monotonic() < deadline:
                    continue  # a broker went away: librdkafka reconnects, or follows the new leader
                raise RuntimeError(f"cannot read the commit intent of query {query_id}: {error}")
            if message.offset() != offset:
                break
            value, found_key = message.value(), message.key()
            if found_key != key.encode() or value is None:
                break
            return BatchIntent.from_json(value.decode())
        log.warning(
            "the commit intent of micro-batch %d of query %s (offset %d of %s-0) is gone (retention): its "
            "transactions cannot be completed from it; open ones are aborted as leftovers",
            batch,
            query_id,
            offset,
            PROGRESS_TOPIC,
        )
        return BatchIntent(batch, ())
    finally:
        consumer.close()
