"""The exactly-once streaming writer: one Kafka transaction per task, committed with its progress mark.

The design and its limits are in :mod:`tidelog.spark.exactly_once`. Invariants of this module:

- A task of micro-batch ``b`` in Spark partition ``p`` of query ``q`` uses the transactional id and the
  progress group ``tidelog-spark-{q}-{p}``; it writes only after ``init_transactions()`` fenced every
  earlier attempt and a ``read_committed`` (``require_stable``) lookup of the group's offset on
  ``__tidelog_spark_sinks-0`` said ``<= b``.
- Rows and the progress mark ``b + 1`` commit in one transaction; any failure before the commit aborts
  the transaction and fails the task (Spark retries it; the retry writes everything again, once).
- A task whose mark already says ``> b`` writes nothing and reports ``skipped``.
- Each progress mark carries the task's :class:`~tidelog.spark.replay_shape.TaskMark` (rows, digest);
  ``commit`` records the batch's :class:`~tidelog.spark.replay_shape.BatchShape` (partition count) in
  the query's ``tidelog-spark-{q}-batches`` group before Spark records the batch. A replay whose rows
  or partitions differ raises :class:`~tidelog.spark.replay_shape.ReplayChangedError` before writing
  (the partition count is checked in the tasks against the shape read when the writer was built, and
  again in ``commit``).
- ``commit`` and ``abort`` fence the query's leftover open transactions (:mod:`tidelog.spark.fencing`)
  unless building the writer already did.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import confluent_kafka.admin as kafka_admin
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from tidelog.spark.exactly_once import ExactlyOnceUnavailableError
from tidelog.spark.fencing import fence_leftovers, query_of, transactional_id
from tidelog.spark.options import WriterOptions
from tidelog.spark.replay_shape import (
    BatchShape,
    RowsDigest,
    TaskMark,
    check_partition_count,
    check_replayed_task,
    check_unrecorded_task,
)
from tidelog.spark.retry import kafka_unreachable, ride_through
from tidelog.spark.writer import ProducerWriteError, failure_collector, produce_rows

__all__ = [
    "PROGRESS_TOPIC",
    "TransactionalCommit",
    "TransactionalStreamWriter",
    "ensure_progress_topic",
    "probe_transactions",
    "read_batch_shape",
    "record_batch_shape",
]

PROGRESS_TOPIC = "__tidelog_spark_sinks"
_TIMEOUT_S = 60.0
_TRANSACTION_TIMEOUT_MS = 900_000


@dataclass(frozen=True)
class TransactionalCommit(WriterCommitMessage):
    """What a task reports: rows committed in its transaction, or ``skipped`` (an earlier run did it)."""

    rows: int
    skipped: bool
    transactional_id: str


def ensure_progress_topic(options: WriterOptions) -> None:
    """Create ``__tidelog_spark_sinks`` (one partition) unless it exists (driver side, at plan time)."""
    admin = kafka_admin.AdminClient({"bootstrap.servers": options.bootstrap_servers, **options.client_config})
    futures = admin.create_topics(
        [kafka_admin.NewTopic(PROGRESS_TOPIC, num_partitions=1, replication_factor=-1)]
    )
    try:
        futures[PROGRESS_TOPIC].result(_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def probe_transactions(options: WriterOptions, timeout_s: float = 15.0) -> None:
    """Raise :class:`ExactlyOnceUnavailableError` unless the broker hands out a transactional producer id.

    A plain ``init_transactions()`` (no record written), so it works with any security settings; a broker
    without transactions answers COORDINATOR_NOT_AVAILABLE until the timeout. An attempt waits up to
    ``timeout_s``; a broker away for now (a refused or lost connection, a timeout, NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: also what a transaction coordinator moving to
    another broker looks like, and Spark builds the writer again for every commit) is asked again with the
    source's retry policy (:func:`~tidelog.spark.retry.ride_through`, up to 60 s); any other error
    (authorization, an unsupported version) raises at once.
    """
    producer = Producer(
        {
            "bootstrap.servers": options.bootstrap_servers,
            **options.client_config,
            "transactional.id": "tidelog-spark-probe",
        }
    )

    def attempt(seconds_left: float) -> None:
        producer.init_transactions(min(timeout_s, seconds_left))

    try:
        ride_through("asking the broker for a transactional producer id", attempt, kafka_unreachable)
    except KafkaException as exc:
        raise ExactlyOnceUnavailableError(
            f"broker transactions (InitProducerId with a transactional.id: {exc})"
        ) from exc


def _task_identity() -> tuple[str, int, int]:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once writer runs only inside a Spark task")
    query_id = context.getLocalProperty("sql.streaming.queryId")
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    if query_id is None or batch_id is None:
        raise RuntimeError(
            "the exactly-once writer needs a streaming query (no query or batch id on the task)"
        )
    return query_id, int(batch_id), context.partitionId()


def _committed_mark(options: WriterOptions, group: str) -> tuple[int, str | None]:
    """The progress mark of ``group`` on ``__tidelog_spark_sinks-0`` and its metadata: for a task's group
    the number of batches its slot committed (0 if none) and its :class:`TaskMark`."""
    consumer = Consumer(
        {
            **options.client_config,
            "bootstrap.servers": options.bootstrap_servers,
            "group.id": group,  # the progress group: never a user's kafka.group.id
            "enable.auto.commit": False,
            "isolation.level": "read_committed",  # OffsetFetch with require_stable
        }
    )
    try:
        [committed] = consumer.committed([TopicPartition(PROGRESS_TOPIC, 0)], timeout=_TIMEOUT_S)
        return max(0, int(committed.offset)), committed.metadata
    finally:
        consumer.close()


def _shape_group(query_id: str) -> str:
    return f"tidelog-spark-{query_id}-batches"


def read_batch_shape(options: WriterOptions, query_id: str) -> BatchShape | None:
    """The :class:`BatchShape` the driver last recorded for query ``query_id`` (None if none)."""
    _, metadata = _committed_mark(options, _shape_group(query_id))
    return BatchShape.from_metadata(metadata)


def record_batch_shape(options: WriterOptions, query_id: str, shape: BatchShape) -> None:
    """Record ``shape`` (a plain offset commit of the query's batches group; read by the next run)."""
    consumer = Consumer(
        {
            **options.client_config,
            "bootstrap.servers": options.bootstrap_servers,
            "group.id": _shape_group(query_id),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(PROGRESS_TOPIC, 0, shape.batch + 1, metadata=shape.to_metadata())],
            asynchronous=False,
        )
    finally:
        consumer.close()


def _digesting(batches: Iterator[pa.RecordBatch], digest: RowsDigest) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        digest.update(batch)
        yield batch


def _group_metadata(options: WriterOptions, group: str) -> object:
    """The opaque consumer group metadata of ``group`` that ``send_offsets_to_transaction`` takes."""
    consumer = Consumer({"bootstrap.servers": options.bootstrap_servers, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


class TransactionalStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("tidelog").option("deliveryGuarantee", "exactly-once")``."""

    def __init__(
        self, options: WriterOptions, fenced_query: str | None = None, shape: BatchShape | None = None
    ) -> None:
        self.options = options
        self.fenced_query = fenced_query  # the query whose leftover transactions were fenced building this
        self.shape = shape  # the last batch shape recorded for fenced_query when this was built

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TransactionalCommit:
        query_id, batch_id, partition = _task_identity()
        name = transactional_id(query_id, partition)
        failures, on_delivery = failure_collector()
        config: dict[str, object] = dict(self.options.producer_config())
        config.update({"transactional.id": name, "on_delivery": on_delivery})
        config.setdefault("transaction.timeout.ms", _TRANSACTION_TIMEOUT_MS)
        config.setdefault("delivery.report.only.error", True)
        producer = Producer(config)
        try:
            producer.init_transactions(_TIMEOUT_S)
        except KafkaException as exc:
            raise ExactlyOnceUnavailableError(f"broker transactions (InitProducerId failed: {exc})") from exc
        committed, metadata = _committed_mark(self.options, name)
        if committed > batch_id:  # an earlier run committed this task: its replay must be the same rows
            replay = RowsDigest()
            for batch in iterator:
                replay.update(batch)
            check_replayed_task(batch_id, partition, TaskMark.from_metadata(metadata), replay)
            return TransactionalCommit(0, True, name)
        check_unrecorded_task(batch_id, partition, self.shape)
        digest = RowsDigest()
        producer.begin_transaction()
        try:
            rows = produce_rows(producer, self.options, _digesting(iterator, digest), failures)
            if producer.flush(600) or failures:
                raise ProducerWriteError(
                    f"{len(failures)} rows were not written; first: {failures[0] if failures else 'timeout'}"
                )
            mark = TaskMark(batch_id, partition, digest.rows, digest.hexdigest())
            producer.send_offsets_to_transaction(
                [TopicPartition(PROGRESS_TOPIC, 0, batch_id + 1, metadata=mark.to_metadata())],
                _group_metadata(self.options, name),
                _TIMEOUT_S,
            )
            producer.commit_transaction(_TIMEOUT_S)
        except BaseException:
            # fenced or broker gone: the next attempt's init_transactions() aborts it
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(_TIMEOUT_S)
            raise
        return TransactionalCommit(rows, False, name)

    def _queries(self, messages: list[WriterCommitMessage | None]) -> list[str]:
        """The query of this writer: the one it was built for, else the one the tasks report."""
        if self.fenced_query is not None:
            return [self.fenced_query]
        queries = {query_of(m.transactional_id) for m in messages if isinstance(m, TransactionalCommit)}
        return sorted(q for q in queries if q is not None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        missing = sum(1 for m in messages if not isinstance(m, TransactionalCommit))
        if missing:
            raise RuntimeError(f"micro-batch {batchId}: {missing} tasks reported no transaction")
        for query_id in self._queries(messages):
            if self.fenced_query is None:
                fence_leftovers(self.options, query_id)
            shape = self.shape if self.fenced_query is not None else read_batch_shape(self.options, query_id)
            check_partition_count(batchId, len(messages), shape)
            record_batch_shape(self.options, query_id, BatchShape(batchId, len(messages)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Open transactions of the failed attempts are fenced (here, or when Spark built this writer)."""
        if self.fenced_query is None:
            for query_id in self._queries(messages):
                fence_leftovers(self.options, query_id)
