"""The transaction coordinator of one ``__transaction_state`` partition (Kafka's ``TxnMetadataCacheEntry``
plus the transitions of ``TransactionCoordinator``).

A partition owns the transactional ids that hash to it. It is created *loading* at a coordinator
epoch (the partition's leader epoch, stamped on every marker it asks for): the runtime feeds it
every record of the partition with :meth:`TxnPartition.replay`, then calls
:meth:`TxnPartition.complete_loading`, which asks again for the markers of every transaction left in
PrepareCommit/PrepareAbort and re-arms the timeouts of Ongoing ones.

Invariants:

- Durable state (``transactions``) changes only in :meth:`TxnPartition._apply`, fed a
  ``TransactionLogValue`` (or a tombstone) by loading or, live, by :meth:`TxnPartition._write` for the
  record the partition itself emits. The only state outside records: each id's in-memory
  ``last_producer_*`` fields (as in Kafka), the markers still to be written for Prepare* transactions
  (rebuilt as "all partitions" by a reload), and timers.
- ``pending_markers`` has an entry exactly for the Prepare* transactions; a CompleteCommit /
  CompleteAbort record is written once, when its last partition is reported written.
- An Ongoing transaction has exactly one TRANSACTION_TIMEOUT timer, due when Kafka's
  ``txn_start_timestamp + txn_timeout_ms < now`` first holds; no other state has one, nor has an Ongoing
  KIP-939 two-phase-commit transaction (only EndTxn or a new InitProducerId ends it).
- Pure and single-threaded: ``now_ms`` comes in; one call at a time; ``out`` collects the result of a
  call between :meth:`begin` and :meth:`finish`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from tidelog.coordinator.common.result import CancelTimer, CoordinatorResult, ScheduleTimer, WriteTxnMarkers
from tidelog.coordinator.txn.config import TransactionCoordinatorConfig
from tidelog.coordinator.txn.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    is_epoch_exhausted,
)
from tidelog.coordinator.txn.records import (
    TransactionLogValue,
    TxnRecordError,
    decode_key,
    decode_value,
    txn_record,
)
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKey, TxnTimerKind
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DescribeTransactionsResponse, ListTransactionsResponse
from tidelog.protocol.records import ControlRecordType

__all__ = ["ProducerIdAllocator", "TxnPartition"]

_S = TransactionState

ProducerIdAllocator = Callable[[], int]
"""Hands out a producer id never used before (the server's ``ProducerIdManager.generate_producer_id``);
may raise ``OSError`` when it cannot reserve ids."""


class TxnPartition:
    def __init__(
        self,
        partition: int,
        coordinator_epoch: int,
        config: TransactionCoordinatorConfig,
        allocate_producer_id: ProducerIdAllocator,
    ) -> None:
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.config = config
        self._allocate_producer_id = allocate_producer_id
        self.loading = True
        self.transactions: dict[str, TransactionMetadata] = {}
        self.by_producer_id: dict[int, str] = {}
        """Which transactional id currently uses a producer id (for produce-path verification)."""
        self.pending_markers: dict[str, set[TopicPartition]] = {}
        """Prepare* transactions: the partitions whose marker has not been reported written yet."""
        self.timers: dict[TxnTimerKey, int] = {}
        self.out: CoordinatorResult[TxnTimerKey] = CoordinatorResult()

    # -- call bracket --------------------------------------------------------------------------------

    def begin(self) -> None:
        self.out = CoordinatorResult()

    def finish(self) -> CoordinatorResult[TxnTimerKey]:
        out, self.out = self.out, CoordinatorResult()
        return out

    # -- loading -------------------------------------------------------------------------------------

    def replay(self, key: bytes | memoryview, value: bytes | memoryview | None) -> None:
        """Apply one record of the partition's log, in log order (loading only)."""
        if not self.loading:
            raise RuntimeError(f"__transaction_state-{self.partition} is loaded: it applies its own records")
        transactional_id = decode_key(key)
        if transactional_id is None:
            return  # not a transaction log key: Kafka skips it too
        decoded = decode_value(value)
        if decoded is not None and decoded.transaction_status in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise TxnRecordError(
                f"{transactional_id!r} persisted in the transient state {_S(decoded.transaction_status).kafka_name}"
            )
        self._apply(transactional_id, decoded)

    def complete_loading(self, now_ms: int) -> CoordinatorResult[TxnTimerKey]:
        """The whole partition has been replayed: serve requests; finish Prepare* transactions; arm timers."""
        self.begin()
        self.loading = False
        for txn in list(self.transactions.values()):
            if txn.state.is_prepare:
                self._emit_markers(txn, now_ms)
            self._sync_timeout_timer(txn.transactional_id)
        self._schedule(
            TxnTimerKey(TxnTimerKind.TRANSACTIONAL_ID_EXPIRATION, self.partition),
            now_ms + self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
        )
        return self.finish()

    def unload(self) -> CoordinatorResult[TxnTimerKey]:
        """The partition moves away (or the broker stops): drop every timer; answer nothing more."""
        self.begin()
        for key in list(self.timers):
            self._cancel(key)
        self.loading = True
        return self.finish()

    # -- the one state change ------------------------------------------------------------------------

    def _apply(self, transactional_id: str, value: TransactionLogValue | None) -> None:
        old = self.transactions.pop(transactional_id, None)
        if old is not None and self.by_producer_id.get(old.producer_id) == transactional_id:
            del self.by_producer_id[old.producer_id]
        self.pending_markers.pop(transactional_id, None)
        if value is None:
            return
        txn = TransactionMetadata.from_log_value(transactional_id, value)
        self.transactions[transactional_id] = txn
        self.by_producer_id[txn.producer_id] = transactional_id
        if txn.state.is_prepare:
            self.pending_markers[transactional_id] = set(txn.topic_partitions)

    def _write(self, new: TransactionMetadata) -> None:
        """Persist ``new`` (emit its record and replay it), keep its in-memory fields, and emit what the
        new state needs: markers for Prepare*, the timeout timer for Ongoing."""
        value = new.to_log_value()
        self.out.records.setdefault(self.partition, []).append(txn_record(new.transactional_id, value))
        self._apply(new.transactional_id, value)
        applied = self.transactions[new.transactional_id]
        self.transactions[new.transactional_id] = replace(
            applied,
            last_producer_id=new.last_producer_id,
            last_producer_epoch=new.last_producer_epoch,
        )
        if new.state.is_prepare:
            self._emit_markers(new, new.txn_last_update_timestamp)
        self._sync_timeout_timer(new.transactional_id)

    def _tombstone(self, transactional_id: str) -> None:
        self.out.records.setdefault(self.partition, []).append(txn_record(transactional_id, None))
        self._apply(transactional_id, None)
        self._sync_timeout_timer(transactional_id)

    # -- outputs -------------------------------------------------------------------------------------

    def _emit_markers(self, txn: TransactionMetadata, now_ms: int) -> None:
        pending = self.pending_markers.get(txn.transactional_id, set())
        if not pending:
            # No partitions (an empty AddPartitionsToTxn made it Ongoing): complete at once, as Kafka does.
            self._complete(txn.transactional_id, now_ms)
            return
        self.out.markers.append(
            WriteTxnMarkers(
                transactional_id=txn.transactional_id,
                txn_partition=self.partition,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                coordinator_epoch=self.coordinator_epoch,
                result=ControlRecordType.COMMIT
                if txn.state is _S.PREPARE_COMMIT
                else ControlRecordType.ABORT,
                partitions=tuple(sorted(pending)),
            )
        )

    def _schedule(self, key: TxnTimerKey, deadline_ms: int) -> None:
        if self.timers.get(key) != deadline_ms:
            self.timers[key] = deadline_ms
            self.out.timers.append(ScheduleTimer(key, deadline_ms))

    def _cancel(self, key: TxnTimerKey) -> None:
        if self.timers.pop(key, None) is not None:
            self.out.timers.append(CancelTimer(key))

    def _timeout_key(self, transactional_id: str) -> TxnTimerKey:
        return TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, self.partition, transactional_id)

    def _sync_timeout_timer(self, transactional_id: str) -> None:
        key = self._timeout_key(transactional_id)
        txn = self.transactions.get(transactional_id)
        if txn is not None and txn.state is _S.ONGOING and not txn.is_two_phase_commit:
            self._schedule(key, txn.txn_start_timestamp + txn.txn_timeout_ms + 1)
        else:
            self._cancel(key)

    # -- InitProducerId ------------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        *,
        keep_prepared_txn: bool = False,
    ) -> tuple[ErrorCode, int, int, tuple[int, int] | None]:
        """Kafka's ``handleInitProducerId`` for a transactional id (already validated and routed here).

        ``expected`` is the KIP-360 (producer id, epoch) of a v3+ request that carries one;
        ``txn_timeout_ms`` is already :data:`TWO_PHASE_COMMIT_TIMEOUT_MS` for an Enable2Pc request.
        Returns the error (answered once the records are durable), the producer id and epoch, and with
        ``keep_prepared_txn`` the (producer id, epoch) of the Ongoing 2PC transaction kept (KIP-939),
        ``None`` when there is none."""
        txn = self.transactions.get(transactional_id)
        if keep_prepared_txn and txn is not None and txn.state is _S.ONGOING:
            return self._keep_prepared(txn, expected, now_ms)
        error, producer_id, producer_epoch = self._init_producer_id(
            transactional_id, txn, txn_timeout_ms, expected, now_ms
        )
        return error, producer_id, producer_epoch, None

    def _keep_prepared(
        self, txn: TransactionMetadata, expected: tuple[int, int] | None, now_ms: int
    ) -> tuple[ErrorCode, int, int, tuple[int, int] | None]:
        """KIP-939 recovery: fence the old producer, keep its Ongoing transaction for this session."""
        if expected is not None and not self._is_valid_producer_id(txn, *expected):
            return ErrorCode.PRODUCER_FENCED, -1, -1, None
        if not txn.is_two_phase_commit or txn.producer_epoch >= MAX_PRODUCER_EPOCH - 1:
            # Only a transaction begun under Enable2Pc may outlive its producer (Kafka answers the same
            # for a non-2PC one); an exhausted epoch cannot be bumped without losing the transaction.
            return ErrorCode.INVALID_TXN_STATE, -1, -1, None
        new = txn.prepare_keep_prepared(now_ms)
        self._write(new)
        return (
            ErrorCode.NONE,
            new.producer_id,
            new.producer_epoch,
            (new.producer_id, new.ongoing_txn_producer_epoch),
        )

    def _init_producer_id(
        self,
        transactional_id: str,
        txn: TransactionMetadata | None,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> tuple[ErrorCode, int, int]:
        if txn is None:
            try:
                producer_id = self._allocate_producer_id()
            except OSError:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1
            txn = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=NO_PRODUCER_EPOCH,
                txn_timeout_ms=txn_timeout_ms,
                state=_S.EMPTY,
                topic_partitions=frozenset(),
                txn_start_timestamp=-1,
                txn_last_update_timestamp=now_ms,
            )
        if expected is not None and not self._is_valid_producer_id(txn, *expected):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if txn.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if txn.state is _S.ONGOING:
            # Abort the open transaction with a bumped epoch (fencing its producer), and let the client
            # retry: the retry bumps the epoch again (or rotates the producer id if that exhausted it).
            self._write(txn.prepare_fence_and_abort(now_ms))
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        new: TransactionMetadata | ErrorCode
        if txn.is_producer_epoch_exhausted and (expected is None or expected[1] == txn.producer_epoch):
            try:
                producer_id = self._allocate_producer_id()
            except OSError:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1
            new = txn.prepare_producer_id_rotation(
                producer_id, txn_timeout_ms, now_ms, record_last_epoch=expected is not None
            )
        else:
            new = txn.prepare_increment_producer_epoch(
                txn_timeout_ms, None if expected is None else expected[1], now_ms
            )
        if isinstance(new, ErrorCode):
            return new, -1, -1
        self._write(new)
        return ErrorCode.NONE, new.producer_id, new.producer_epoch

    @staticmethod
    def _is_valid_producer_id(txn: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
        """KIP-360: may the producer that holds (``producer_id``, ``producer_epoch``) re-initialise?"""
        return (
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == txn.producer_id
            or (producer_id == txn.last_producer_id and is_epoch_exhausted(producer_epoch))
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> ErrorCode:
        """Kafka's ``handleAddPartitionsToTransaction``."""
        txn = self.transactions.get(transactional_id)
        wanted = frozenset(partitions)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if txn.state is _S.ONGOING and wanted <= txn.topic_partitions:
            return ErrorCode.NONE  # already in the transaction: nothing to write
        self._write(txn.prepare_add_partitions(wanted, now_ms))
        return ErrorCode.NONE

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's ``handleVerifyPartitionsInTransaction`` (AddPartitionsToTxn v4+ ``verify_only``): NONE
        for each partition already in the transaction, INVALID_TXN_STATE for one that is not."""
        wanted = list(dict.fromkeys(partitions))
        txn = self.transactions.get(transactional_id)
        error = ErrorCode.NONE
        if txn is None or txn.producer_id != producer_id:
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif txn.producer_epoch != producer_epoch:
            error = ErrorCode.PRODUCER_FENCED
        elif txn.state.is_prepare:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error is not ErrorCode.NONE or txn is None:
            return dict.fromkeys(wanted, error)
        return {
            tp: ErrorCode.NONE if tp in txn.topic_partitions else ErrorCode.INVALID_TXN_STATE for tp in wanted
        }

    # -- EndTxn --------------------------------------------------------------------------------------

    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> ErrorCode:
        """Kafka's ``handleEndTransaction`` (transaction version 1): the answer once PrepareCommit /
        PrepareAbort is durable; the markers follow."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        state = txn.state
        if state is _S.ONGOING:
            self._write(
                txn.prepare_abort_or_commit(_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT, now_ms)
            )
            return ErrorCode.NONE
        if state is (_S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT):
            return ErrorCode.NONE  # a retry of an EndTxn that already completed
        if state is (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    # -- markers -------------------------------------------------------------------------------------

    def on_markers_written(
        self, markers: WriteTxnMarkers, partitions: Iterable[TopicPartition] | None, now_ms: int
    ) -> CoordinatorResult[TxnTimerKey]:
        """The runtime wrote ``markers`` on ``partitions`` (all of them when ``None``). Reports for another
        coordinator epoch, producer, epoch or outcome than the transaction's current one are stale and
        ignored."""
        self.begin()
        txn = self.transactions.get(markers.transactional_id)
        pending = self.pending_markers.get(markers.transactional_id)
        if (
            not self.loading
            and txn is not None
            and pending is not None
            and markers.coordinator_epoch == self.coordinator_epoch
            and markers.producer_id == txn.producer_id
            and markers.producer_epoch == txn.producer_epoch
            and (markers.result is ControlRecordType.COMMIT) == (txn.state is _S.PREPARE_COMMIT)
        ):
            pending.difference_update(markers.partitions if partitions is None else partitions)
            if not pending:
                self._complete(markers.transactional_id, now_ms)
        return self.finish()

    def _complete(self, transactional_id: str, now_ms: int) -> None:
        self._write(self.transactions[transactional_id].prepare_complete(now_ms))

    # -- time ----------------------------------------------------------------------------------------

    def on_timeout(self, key: TxnTimerKey, now_ms: int) -> CoordinatorResult[TxnTimerKey]:
        """A timer this partition scheduled has fired (stale or early firings are ignored)."""
        self.begin()
        deadline = self.timers.get(key)
        if deadline is not None and deadline <= now_ms and not self.loading:
            del self.timers[key]
            if key.kind is TxnTimerKind.TRANSACTION_TIMEOUT:
                self._abort_if_timed_out(key.transactional_id, now_ms)
            else:
                self.expire_transactional_ids(now_ms)
                self._schedule(
                    key, now_ms + self.config.transaction_remove_expired_transaction_cleanup_interval_ms
                )
        return self.finish()

    def _abort_if_timed_out(self, transactional_id: str, now_ms: int) -> None:
        """Kafka's ``abortTimedOutTransactions`` for one id: fence the producer and abort."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state is not _S.ONGOING:
            return
        if txn.is_two_phase_commit:
            return  # KIP-939: only EndTxn or InitProducerId ends a two-phase-commit transaction
        if txn.txn_start_timestamp + txn.txn_timeout_ms < now_ms:
            self._write(txn.prepare_fence_and_abort(now_ms))
        else:
            self._sync_timeout_timer(transactional_id)

    def expire_transactional_ids(self, now_ms: int) -> None:
        """Tombstone every id with no transaction in flight whose last update is older than
        ``transactional.id.expiration.ms`` (Kafka's transactionalId-expiration task)."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        for txn in list(self.transactions.values()):
            if txn.state.is_expiration_allowed and txn.txn_last_update_timestamp <= horizon:
                txn.prepare_dead()  # checks the transition is legal
                self._tombstone(txn.transactional_id)

    # -- describing ----------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
        txn = self.transactions.get(transactional_id)
        if txn is None:
            return DescribeTransactionsResponse.TransactionState(
                error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=transactional_id
            )
        # While markers are being written, only the partitions still waiting for theirs (as Kafka).
        partitions = self.pending_markers.get(transactional_id, txn.topic_partitions)
        topics: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            topics.setdefault(tp.topic, []).append(tp.partition)
        return DescribeTransactionsResponse.TransactionState(
            error_code=ErrorCode.NONE,
            transactional_id=transactional_id,
            transaction_state=txn.state.kafka_name,
            transaction_timeout_ms=txn.txn_timeout_ms,
            transaction_start_time_ms=txn.txn_start_timestamp,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            topics=[DescribeTransactionsResponse.TopicData(topic=t, partitions=p) for t, p in topics.items()],
        )

    def list_transactions(
        self,
        producer_ids: frozenset[int],
        states: frozenset[TransactionState] | None,
        duration_filter_ms: int,
        now_ms: int,
    ) -> list[ListTransactionsResponse.TransactionState]:
        """Kafka's ``listTransactionStates`` for this partition; ``states`` ``None`` means no filter."""
        return [
            ListTransactionsResponse.TransactionState(
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                transaction_state=txn.state.kafka_name,
            )
            for txn in self.transactions.values()
            if txn.state is not _S.DEAD
            and (not producer_ids or txn.producer_id in producer_ids)
            and (states is None or txn.state in states)
            and (duration_filter_ms < 0 or now_ms - txn.txn_start_timestamp > duration_filter_ms)
        ]
