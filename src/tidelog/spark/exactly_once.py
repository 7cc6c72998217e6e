"""The exactly-once sink (``deliveryGuarantee=exactly-once``): its design, and its error without broker transactions.

Status: implemented by :mod:`tidelog.spark.transactional` for streaming writes. When a query starts,
the sink checks that the broker hands out a transactional producer id (``init_transactions()``); a broker
without transactions makes it raise :class:`ExactlyOnceUnavailableError`, which names the missing broker
feature. ``deliveryGuarantee=at-least-once`` (the default) needs nothing from the broker.

Two modes: against brokers with ``transaction.two.phase.commit.enable=true`` (KIP-939) the tasks prepare and
the driver commits (:mod:`tidelog.spark.two_phase`: a micro-batch becomes visible whole); otherwise, or with
``twoPhaseCommit=false``, each task commits its own transaction, as designed below.

Design
------

Goal: every row of micro-batch ``b`` becomes visible to ``read_committed`` consumers exactly once, even if
tasks are retried, the driver dies at any instruction, and the query restarts from its checkpoint
(Spark then re-runs ``b`` over the same input offsets, because its offset log has ``b`` and its commit
log does not).

Why not "tasks write, the driver commits" (without KIP-939): Spark runs ``write()`` and ``commit()`` in different
processes, and committing a transaction from another process needs its producer id and epoch, which
librdkafka neither exposes nor accepts (Flink's Kafka sink does it by reflection into the Java client).
So each *task* commits its own transaction, and the commit carries a durable "this task is done" mark:

1. Identity. Spark sets the local properties ``sql.streaming.queryId`` and ``streaming.sql.batchId`` on
   every task of a micro-batch (``write()`` gets no batch id as an argument; ``TaskContext.get()
   .getLocalProperty`` reads both in the Python worker, checked on PySpark 4.3.0), and ``TaskContext`` gives
   the Spark partition id ``p``. The task's transactional id is ``tidelog-spark-{queryId}-{p}``, the same
   for every attempt of that task in every batch, and its *progress group* is the consumer group
   ``tidelog-spark-{queryId}-{p}``.

2. Fence, then look. ``write()`` calls ``init_transactions()`` (which fences every earlier attempt of the
   task and completes or aborts its open transaction), then reads the progress group's committed offset
   on the sink's bookkeeping partition ``__tidelog_spark_sinks-0`` with ``require_stable`` (so a commit
   still in flight is waited for, never missed). An offset ``> b`` means this task of batch ``b`` was
   already committed by an earlier attempt or run: the task writes nothing and reports the rows it
   skipped.

3. Write and mark atomically. Otherwise: ``begin_transaction()``, produce every row,
   ``send_offsets_to_transaction([__tidelog_spark_sinks-0 @ b + 1], <progress group>)``,
   ``commit_transaction()``. The rows and the mark commit together or not at all, so a retry of the task
   (same batch) either finds the mark and skips, or finds nothing and writes everything again, while the
   previous attempt's open transaction was aborted by step 2's fencing.

4. The driver. ``commit(messages, batchId)`` checks that every task reported and records the batch's
   partition count; open transactions of failed attempts are aborted by the next attempt's fencing, and
   those no attempt will fence (a restart on fewer partitions) when the query restarts and in ``commit`` /
   ``abort`` (:mod:`tidelog.spark.fencing`). The sink creates ``__tidelog_spark_sinks`` (one partition) when
   the query starts.

5. Limits. Rows are exactly once; a batch becomes visible task by task, not all at once. The replay of a
   batch must put the same rows in the same Spark partitions (true for deterministic plans: Spark replays
   the same offsets and restores state of that batch version; round-robin ``repartition`` is made
   deterministic by Spark's sort before repartition). A replay that does not is refused, before it writes
   (:mod:`tidelog.spark.replay_shape`: each mark carries its partition's row digest, the driver records
   each batch's partition count). One case goes undetected: if the driver died between the tasks' commits
   and that record, a replay on more partitions writes the rows of the partitions the batch did not have
   (the tasks cannot tell them from tasks the killed run never finished). Speculative execution is harmless (the attempts
   fence each other, one commits). Readers of the output topic must use ``read_committed``.

Broker features this needs: ``InitProducerId`` with a transactional id, ``AddPartitionsToTxn``,
``AddOffsetsToTxn``, ``TxnOffsetCommit``, ``EndTxn`` with markers, ``OffsetFetch`` with
``require_stable``, and ``read_committed`` fetches.
"""

from __future__ import annotations

__all__ = ["MISSING_BROKER_FEATURE", "ExactlyOnceUnavailableError"]

MISSING_BROKER_FEATURE = (
    "broker transactions (InitProducerId with a transactional.id, AddPartitionsToTxn, EndTxn, "
    "transaction markers and read_committed fetches)"
)


class ExactlyOnceUnavailableError(NotImplementedError):
    """``deliveryGuarantee=exactly-once`` was asked for, but the broker feature it needs is missing."""

    def __init__(self, missing_feature: str = MISSING_BROKER_FEATURE) -> None:
        self.missing_feature = missing_feature
        super().__init__(
            f"deliveryGuarantee=exactly-once needs {missing_feature}, which this broker does not provide; "
            "use deliveryGuarantee=at-least-once (the default)"
        )
