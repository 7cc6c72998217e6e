"""The exactly-once sink (``deliveryGuarantee=exactly-once``): its design, and why it is refused today.

Status: not implemented. It needs broker transactions, which tidelog does not have yet (``InitProducerId``
with a ``transactional.id`` answers COORDINATOR_NOT_AVAILABLE; ``AddPartitionsToTxn``, ``EndTxn``,
``WriteTxnMarkers``, the last stable offset and ``read_committed`` fetches are missing). Asking for it
raises :class:`ExactlyOnceUnavailableError`, which names the missing broker feature, when the query is
planned; ``deliveryGuarantee=at-least-once`` (the default) works now.

Design (what lands once the broker has transactions)
----------------------------------------------------

Goal: the rows of micro-batch ``b`` become visible to ``read_committed`` consumers exactly once, even if
tasks are retried, the driver dies at any instruction, and the query restarts from its checkpoint
(Spark then re-runs ``b`` with the same input offsets, because its offset log has ``b`` and its commit
log does not).

1. Identity. Spark sets the local properties ``sql.streaming.queryId`` and ``streaming.sql.batchId`` on
   every task of a micro-batch, and ``TaskContext`` gives the partition id, so a task's transactional id
   is ``tidelog-spark-{queryId}-{batchId}-{partitionId}`` — derived, never stored, the same for every
   attempt of the same task in every run of the same batch. (``write()`` gets no batch id as an argument;
   the local property carries it.)

2. Tasks write, and do not commit. ``write()``: ``init_transactions()`` on that id (which fences any
   earlier attempt of the same task and aborts its open transaction), ``begin_transaction()``, produce
   every row, ``flush()``; then it returns a commit message holding (transactional id, producer id,
   producer epoch, row count) and exits without committing. The transaction stays open on the broker.

3. The driver decides. ``commit(messages, batchId)`` first appends a *decision record* for
   ``(queryId, batchId)`` listing those (transactional id, producer id, epoch) triples to the compacted
   topic ``__tidelog_spark_sinks`` (acks=all) — the commit point — then completes each task's
   transaction by sending ``EndTxn(commit)`` with the recorded producer id and epoch on the Kafka protocol
   (a small client on :mod:`tidelog.protocol`; librdkafka cannot commit another process's transaction).
   ``EndTxn`` of an already committed transaction with the same epoch succeeds, so completing is
   idempotent. ``abort(messages, batchId)`` sends ``EndTxn(abort)`` for whatever messages it got.

4. Replays roll forward. When ``b`` runs again after a restart, each task first looks up the decision
   record for ``(queryId, b)``. Present: the earlier run reached its commit point, so the task writes
   nothing and returns a marker, and the driver's ``commit`` re-sends ``EndTxn(commit)`` for the recorded
   transactions (finishing any the dead driver did not reach). Absent: the earlier run never decided, and
   the task's ``init_transactions()`` on the same transactional id aborts the earlier attempt's open
   transaction before it writes again. Either way ``b``'s rows are committed exactly once.

5. Limits. The decided-but-not-completed window must be shorter than ``transaction.timeout.ms`` (set to
   15 minutes by the sink; the broker aborts older open transactions): a query down longer than that
   after its driver decided loses that batch, which ``EndTxn`` reports (INVALID_PRODUCER_EPOCH) and the
   sink raises per ``failOnDataLoss``. Speculative execution must stay off (Spark's default): a
   speculative copy of a finished task would fence it. Readers of the output topic must use
   ``read_committed``; transactional ids expire on the broker after ``transactional.id.expiration.ms``.
"""

from __future__ import annotations

__all__ = ["MISSING_BROKER_FEATURE", "ExactlyOnceUnavailableError", "refuse_exactly_once"]

MISSING_BROKER_FEATURE = (
    "broker transactions (InitProducerId with a transactional.id, AddPartitionsToTxn, EndTxn, "
    "transaction markers and read_committed fetches)"
)


class ExactlyOnceUnavailableError(NotImplementedError):
    """``deliveryGuarantee=exactly-once`` was asked for, but the broker feature it needs is missing."""

    def __init__(self, missing_feature: str = MISSING_BROKER_FEATURE) -> None:
        self.missing_feature = missing_feature
        super().__init__(
            f"deliveryGuarantee=exactly-once needs {missing_feature}, which this tidelog version does not "
            "provide yet; use deliveryGuarantee=at-least-once (the default)"
        )


def refuse_exactly_once() -> None:
    raise ExactlyOnceUnavailableError()
