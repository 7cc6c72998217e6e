"""One transactional id's metadata and the transitions Kafka allows it (Kafka's ``TransactionMetadata``).

A :class:`TransactionMetadata` is immutable. Each ``prepare_*`` method returns the metadata a request
would move it to (Kafka's ``TxnTransitMetadata``); the coordinator persists that as a
``TransactionLogValue`` and then replays the record, which is the only way its state changes.

Invariants:

- Every transition is checked against :data:`~tidelog.coordinator.txn.state.VALID_PREVIOUS_STATES`
  and Kafka's sanity rules (producer id >= 0, epoch >= 0); a violation is a bug, raised as
  :class:`IllegalTransitionError`, never answered to a client.
- ``topic_partitions`` is empty in Empty, CompleteCommit and CompleteAbort; ``txn_start_timestamp``
  is -1 until a transaction starts (the first partition added after Empty/Complete*).
- Only :meth:`durable` fields are persisted. ``last_producer_id`` and ``last_producer_epoch`` (what
  KIP-360 uses to recognise a retried InitProducerId) live in memory only, exactly as Kafka keeps them
  with ``TransactionLogValue`` v0, so after a reload they are -1 and such a retry is fenced.
- A KIP-939 two-phase-commit transaction is one whose ``txn_timeout_ms`` is :data:`TWO_PHASE_COMMIT_TIMEOUT_MS`
  (``Integer.MAX_VALUE``, exactly Kafka's ``isDistributedTwoPhaseCommitTxn``): the mark is persisted in
  ``TransactionLogValue.transaction_timeout_ms`` of every record version, with no new field, and such a
  transaction is never aborted by its timeout.
- ``ongoing_txn_producer_epoch`` is the epoch an Ongoing 2PC transaction was written with before
  InitProducerId(KeepPreparedTxn) bumped the epoch to fence its old producer; -1 otherwise. It is
  persisted in tidelog's private tagged field (:mod:`~tidelog.coordinator.txn.kept_epoch`), so the record
  of a kept transaction is written at value version 1; every other record stays v0.
- The epoch never exceeds 32767: a producer id whose epoch reached 32766 is *exhausted*, and the next
  InitProducerId rotates to a new producer id, so a fence (+1) always fits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from tidelog.coordinator.txn.kept_epoch import kept_epoch_of, with_kept_epoch
from tidelog.coordinator.txn.records import TransactionLogValue, partitions_of, partitions_schema
from tidelog.coordinator.txn.state import TransactionState
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "TWO_PHASE_COMMIT_TIMEOUT_MS",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "IllegalTransitionError",
    "TransactionMetadata",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
MAX_PRODUCER_EPOCH: Final = 32767
"""``Short.MAX_VALUE``."""
TWO_PHASE_COMMIT_TIMEOUT_MS: Final = 2_147_483_647
"""``Integer.MAX_VALUE``: the transaction timeout that marks a KIP-939 two-phase-commit transaction."""

_S = TransactionState


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: no epoch is handed to a client past 32766, so a fence always fits."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalTransitionError(RuntimeError):
    """A transition Kafka's state machine forbids was attempted: a coordinator bug."""


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    """When the current (or last) transaction started; -1 before the first partition is added."""
    txn_last_update_timestamp: int
    last_producer_id: int = NO_PRODUCER_ID
    """In memory only: the producer id before the last InitProducerId (a rotation's old id)."""
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    """In memory only: the epoch before a KIP-360 bump, so a retried InitProducerId gets the same answer."""
    ongoing_txn_producer_epoch: int = NO_PRODUCER_EPOCH
    """The epoch of a kept 2PC transaction's writes (before KeepPreparedTxn bumped it), else -1."""

    # -- records -------------------------------------------------------------------------------------

    def to_log_value(self) -> TransactionLogValue:
        """The ``TransactionLogValue`` Kafka writes for this metadata (partitions null when Empty)."""
        if self.state is _S.EMPTY and self.topic_partitions:
            raise IllegalTransitionError(
                f"{self.transactional_id}: Empty with partitions {self.topic_partitions}"
            )
        value = TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=int(self.state),
            transaction_partitions=None
            if self.state is _S.EMPTY
            else partitions_schema(self.topic_partitions),
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
        )
        if self.state is _S.ONGOING and self.ongoing_txn_producer_epoch != NO_PRODUCER_EPOCH:
            value = with_kept_epoch(value, self.ongoing_txn_producer_epoch)
        return value

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """Kafka's ``readTxnRecordValue``: the last epoch is unknown after a load; partitions are
        ignored in Empty."""
        state = TransactionState(value.transaction_status)
        kept = kept_epoch_of(value)
        return cls(
            transactional_id=transactional_id,
            producer_id=value.producer_id,
            producer_epoch=value.producer_epoch,
            txn_timeout_ms=value.transaction_timeout_ms,
            state=state,
            topic_partitions=frozenset() if state is _S.EMPTY else partitions_of(value),
            txn_start_timestamp=value.transaction_start_timestamp_ms,
            txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
            last_producer_id=value.previous_producer_id,
            ongoing_txn_producer_epoch=NO_PRODUCER_EPOCH if kept is None or state is not _S.ONGOING else kept,
        )

    def durable(self) -> TransactionMetadata:
        """This metadata as a reload would rebuild it from its record."""
        return replace(
            self,
            last_producer_id=NO_PRODUCER_ID,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )

    # -- queries -------------------------------------------------------------------------------------

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def is_two_phase_commit(self) -> bool:
        """Kafka's ``isDistributedTwoPhaseCommitTxn``: no timeout ever aborts this id's transactions."""
        return self.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    # -- transitions ---------------------------------------------------------------------------------

    def _transit(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_id: int | None = None,
        last_producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        topic_partitions: frozenset[TopicPartition] | None = None,
        txn_start_timestamp: int | None = None,
        update_timestamp: int,
    ) -> TransactionMetadata:
        """Kafka's ``prepareTransitionTo``: the checks, then the new metadata."""
        if self.state not in state.valid_previous_states:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name} is not a valid transition"
            )
        new = replace(
            self,
            state=state,
            producer_id=self.producer_id if producer_id is None else producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_id=self.last_producer_id if last_producer_id is None else last_producer_id,
            last_producer_epoch=self.last_producer_epoch
            if last_producer_epoch is None
            else last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            topic_partitions=self.topic_partitions if topic_partitions is None else topic_partitions,
            txn_start_timestamp=self.txn_start_timestamp
            if txn_start_timestamp is None
            else txn_start_timestamp,
            txn_last_update_timestamp=update_timestamp,
        )
        if new.producer_id < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: illegal producer id {new.producer_id}")
        if state is not _S.DEAD and not 0 <= new.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(
                f"{self.transactional_id}: illegal producer epoch {new.producer_epoch}"
            )
        return new

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_producer_epoch: int | None, now_ms: int
    ) -> TransactionMetadata | ErrorCode:
        """InitProducerId on an id with no transaction in flight: epoch + 1 (epoch 0 for a new id).

        With a KIP-360 expected epoch: bump if it is the current epoch (or the id is new); answer the
        current epoch again if it is the last epoch (a retry whose response was lost); else
        PRODUCER_FENCED. The caller rotates the producer id instead when the epoch is exhausted and
        the expected epoch (if any) is the current one; the other cases never bump, so they are
        answered here even then (where Kafka would fail the request with an IllegalStateException)."""
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch in (NO_PRODUCER_EPOCH, expected_producer_epoch):
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        if epoch > MAX_PRODUCER_EPOCH - 1:
            raise IllegalTransitionError(
                f"{self.transactional_id}: producer {self.producer_id} has no epochs left"
            )
        return self._transit(
            _S.EMPTY,
            producer_epoch=epoch,
            last_producer_id=self.producer_id,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, *, record_last_epoch: bool
    ) -> TransactionMetadata:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        if self.state.has_pending_transaction:
            raise IllegalTransitionError(
                f"{self.transactional_id}: cannot rotate with a transaction in flight"
            )
        return self._transit(
            _S.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_id=self.producer_id,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            update_timestamp=now_ms,
        )

    def prepare_keep_prepared(self, now_ms: int) -> TransactionMetadata:
        """InitProducerId(Enable2Pc, KeepPreparedTxn) on an Ongoing 2PC transaction (KIP-939): the
        transaction stays Ongoing with its partitions, the epoch goes up by one so the old producer is
        fenced, and the new session finishes the transaction with EndTxn at the bumped epoch (its markers
        carry that epoch). ``ongoing_txn_producer_epoch`` keeps the epoch its records were written at."""
        if self.state is not _S.ONGOING or not self.is_two_phase_commit:
            raise IllegalTransitionError(f"{self.transactional_id}: no prepared 2PC transaction to keep")
        if self.producer_epoch >= MAX_PRODUCER_EPOCH - 1:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        kept = self._transit(
            _S.ONGOING,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            update_timestamp=now_ms,
        )
        original = (
            self.producer_epoch
            if self.ongoing_txn_producer_epoch == NO_PRODUCER_EPOCH
            else self.ongoing_txn_producer_epoch
        )
        return replace(kept, ongoing_txn_producer_epoch=original)

    def prepare_add_partitions(
        self, partitions: Iterable[TopicPartition], now_ms: int
    ) -> TransactionMetadata:
        """AddPartitionsToTxn / AddOffsetsToTxn: Ongoing; a new transaction starts now."""
        starting = self.state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
        return self._transit(
            _S.ONGOING,
            topic_partitions=self.topic_partitions | frozenset(partitions),
            txn_start_timestamp=now_ms if starting else self.txn_start_timestamp,
            update_timestamp=now_ms,
        )

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TransactionMetadata:
        """EndTxn: PrepareCommit or PrepareAbort, same epoch and partitions."""
        if state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTransitionError(f"{self.transactional_id}: EndTxn cannot move to {state.kafka_name}")
        return self._transit(state, update_timestamp=now_ms)

    def prepare_fence_and_abort(self, now_ms: int) -> TransactionMetadata:
        """Kafka's ``prepareFenceProducerEpoch`` followed by the abort it leads to (InitProducerId on an
        Ongoing transaction, or its timeout): PrepareAbort with the epoch bumped, so the old producer's
        next request, and its late writes to the partitions, are fenced. PrepareEpochFence itself is
        never persisted."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        fencing = self._transit(
            _S.PREPARE_EPOCH_FENCE,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            update_timestamp=self.txn_last_update_timestamp,
        )
        return fencing._transit(_S.PREPARE_ABORT, update_timestamp=now_ms)

    def prepare_complete(self, now_ms: int) -> TransactionMetadata:
        """All markers are written: CompleteCommit / CompleteAbort, no partitions."""
        if not self.state.is_prepare:
            raise IllegalTransitionError(
                f"{self.transactional_id}: nothing to complete in {self.state.kafka_name}"
            )
        state = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        return self._transit(state, topic_partitions=frozenset(), update_timestamp=now_ms)

    def prepare_dead(self) -> TransactionMetadata:
        """Expiry of an idle transactional id (persisted as a tombstone, never as Dead)."""
        return self._transit(
            _S.DEAD, topic_partitions=frozenset(), update_timestamp=self.txn_last_update_timestamp
        )
