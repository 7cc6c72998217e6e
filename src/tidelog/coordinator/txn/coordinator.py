"""The transaction coordinator of one broker: its ``__transaction_state`` partitions and request routing.

This is the object the server runtime talks to (Kafka's ``TransactionCoordinator`` with its
``TransactionStateManager``, minus threads, log appends and the marker channel: the runtime appends
the records and writes the markers). A transactional id lives on
``partition_for(transactional_id, transaction.state.log.num.partitions)``.

Lifecycle of a partition: :meth:`TransactionCoordinator.begin_loading` at a coordinator epoch
(requests for its ids get COORDINATOR_LOAD_IN_PROGRESS), :meth:`~TransactionCoordinator.replay`
every record of its log in order, :meth:`~TransactionCoordinator.complete_loading` (which asks for
the markers of transactions left in PrepareCommit/PrepareAbort), later
:meth:`~TransactionCoordinator.unload`. Ids on partitions this broker does not own get NOT_COORDINATOR.

It has the entry points every coordinator has (:class:`~tidelog.coordinator.common.coordinator_protocol.
PartitionedCoordinator`), so a runtime can drive it as it drives the group coordinator; markers
(:meth:`~TransactionCoordinator.on_markers_written`) and the produce path's verification are its own.

Requests (:data:`TRANSACTION_COORDINATOR_REQUESTS`) go through :meth:`~TransactionCoordinator.handle`;
the produce path asks :meth:`~TransactionCoordinator.verify_partitions` (KIP-890 verification).
Every entry point returns a :class:`~tidelog.coordinator.common.result.CoordinatorResult` (keyed by
:class:`~tidelog.coordinator.txn.timers.TxnTimerKey`).

Invariants: pure (time comes in as ``now_ms``; new producer ids only through the injected allocator;
topic existence only through the injected ``partition_exists``); requests are answered with Kafka's
error codes at the request's version (PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for old
versions). Transaction version 1 semantics (no epoch bump per transaction, KIP-890 part 2): the
runtime should advertise EndTxn up to v4.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidelog.coordinator.common.coordinator_protocol import PartitionedCoordinator
from tidelog.coordinator.common.internal_topics import (
    GROUP_METADATA_TOPIC_NAME,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC_NAME,
)
from tidelog.coordinator.common.partitioning import partition_for
from tidelog.coordinator.common.result import CoordinatorResult, WriteTxnMarkers
from tidelog.coordinator.txn.config import TransactionCoordinatorConfig
from tidelog.coordinator.txn.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TransactionMetadata,
)
from tidelog.coordinator.txn.partition import ProducerIdAllocator, TxnPartition
from tidelog.coordinator.txn.responses import (
    add_offsets_to_txn_response,
    add_partitions_result,
    add_partitions_to_txn_response,
    end_txn_response,
    init_producer_id_response,
    requested_partitions,
    txn_append_error_to_response_error,
    txn_error_response,
)
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKey
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from tidelog.protocol.schema import Request, Response

__all__ = ["TRANSACTION_COORDINATOR_REQUESTS", "TransactionCoordinator"]

TRANSACTION_COORDINATOR_REQUESTS: tuple[type[Request], ...] = (
    InitProducerIdRequest,
    AddPartitionsToTxnRequest,
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
"""The requests :meth:`TransactionCoordinator.handle` takes."""


def _every_partition_exists(_topic: str, _partition: int) -> bool:
    return True


class TransactionCoordinator:
    def __init__(
        self,
        config: TransactionCoordinatorConfig | None = None,
        *,
        allocate_producer_id: ProducerIdAllocator,
        partition_exists: Callable[[str, int], bool] = _every_partition_exists,
    ) -> None:
        """``allocate_producer_id`` hands out fresh producer ids (the broker's ``ProducerIdManager``);
        ``partition_exists`` answers whether a topic partition exists (AddPartitionsToTxn refuses
        unknown ones with UNKNOWN_TOPIC_OR_PARTITION, as Kafka's metadata cache check does)."""
        self.config = config or TransactionCoordinatorConfig()
        self._allocate_producer_id = allocate_producer_id
        self._partition_exists = partition_exists
        self._partitions: dict[int, TxnPartition] = {}

    # -- partitions ----------------------------------------------------------------------------------

    @property
    def topic_name(self) -> str:
        return TRANSACTION_STATE_TOPIC_NAME

    @property
    def num_partitions(self) -> int:
        return self.config.transaction_state_log_num_partitions

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id`` (for FindCoordinator too)."""
        return partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    @property
    def owned_partitions(self) -> list[int]:
        return sorted(self._partitions)

    def txn_partition(self, partition: int) -> TxnPartition | None:
        return self._partitions.get(partition)

    def is_loading(self, partition: int) -> bool:
        owned = self._partitions.get(partition)
        return owned is not None and owned.loading

    def begin_loading(self, partition: int, coordinator_epoch: int) -> TxnPartition:
        """Become the coordinator of ``partition`` at ``coordinator_epoch`` (the partition's leader epoch):
        a fresh, empty, loading partition."""
        if partition in self._partitions:
            raise RuntimeError(f"{TRANSACTION_STATE_TOPIC_NAME}-{partition} is already owned")
        if not 0 <= partition < self.config.transaction_state_log_num_partitions:
            raise ValueError(f"no {TRANSACTION_STATE_TOPIC_NAME} partition {partition}")
        owned = TxnPartition(partition, coordinator_epoch, self.config, self._allocate_producer_id)
        self._partitions[partition] = owned
        return owned

    def replay(
        self,
        partition: int,
        key: bytes | memoryview,
        value: bytes | memoryview | None,
        producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        """Apply one record of ``partition``'s log while it loads. ``producer_id`` (its batch's) is
        ignored: ``__transaction_state`` records are never part of a transaction."""
        del producer_id
        self._partitions[partition].replay(key, value)

    def replay_end_transaction_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """Nothing to do: no transaction writes to ``__transaction_state``, so a marker found there (none
        ever is) settles nothing. Here so that every coordinator takes the same replay calls."""
        del partition, producer_id, committed

    def complete_loading(self, partition: int, now_ms: int) -> CoordinatorResult[TxnTimerKey]:
        return self._partitions[partition].complete_loading(now_ms)

    def unload(self, partition: int) -> CoordinatorResult[TxnTimerKey]:
        """Stop coordinating ``partition``: its timers go; markers in flight will be ignored."""
        owned = self._partitions.pop(partition, None)
        return CoordinatorResult() if owned is None else owned.unload()

    def _route(self, transactional_id: str) -> TxnPartition | ErrorCode:
        owned = self._partitions.get(self.partition_for(transactional_id))
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if owned.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return owned

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The current metadata of ``transactional_id`` if a loaded partition of this broker has it."""
        owned = self._route(transactional_id)
        return None if isinstance(owned, ErrorCode) else owned.transactions.get(transactional_id)

    # -- requests ------------------------------------------------------------------------------------

    def handle(
        self, request: Request, api_version: int, *, now_ms: int, client_id: str = "", client_host: str = ""
    ) -> CoordinatorResult[TxnTimerKey]:
        """Serve one transaction coordinator request (any version's body, with that version). The
        client's id and host are not recorded by the transaction coordinator."""
        del client_id, client_host
        if isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(request, api_version, now_ms)
        if isinstance(request, AddPartitionsToTxnRequest):
            if api_version < 4:
                return self._add_partitions_v3(request, api_version, now_ms)
            return self._add_partitions_batched(request, now_ms)
        if isinstance(request, AddOffsetsToTxnRequest):
            return self._add_offsets(request, api_version, now_ms)
        if isinstance(request, EndTxnRequest):
            return self._end_txn(request, api_version, now_ms)
        if isinstance(request, DescribeTransactionsRequest):
            return CoordinatorResult(response=self._describe(request))
        if isinstance(request, ListTransactionsRequest):
            return CoordinatorResult(response=self._list(request, now_ms))
        raise TypeError(f"{type(request).__name__} is not a transaction coordinator request")

    def _init_producer_id(
        self, request: InitProducerIdRequest, api_version: int, now_ms: int
    ) -> CoordinatorResult[TxnTimerKey]:
        pid, epoch = request.producer_id, request.producer_epoch
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            return CoordinatorResult(
                response=init_producer_id_response(api_version, ErrorCode.INVALID_REQUEST)
            )
        expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
        transactional_id = request.transactional_id
        if transactional_id is None:
            # An idempotent producer: always a new producer id (Kafka never bumps a bare producer id).
            try:
                producer_id = self._allocate_producer_id()
            except OSError:
                return CoordinatorResult(
                    response=init_producer_id_response(api_version, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
                )
            return CoordinatorResult(
                response=init_producer_id_response(api_version, ErrorCode.NONE, producer_id, 0)
            )
        if not transactional_id:
            return CoordinatorResult(
                response=init_producer_id_response(api_version, ErrorCode.INVALID_REQUEST)
            )
        enable_2pc, keep_prepared = request.enable2_pc, request.keep_prepared_txn
        if keep_prepared and not enable_2pc:
            return CoordinatorResult(
                response=init_producer_id_response(api_version, ErrorCode.INVALID_REQUEST)
            )
        if enable_2pc and not self.config.transaction_two_phase_commit_enable:
            # KIP-939: refused as an authorization failure, so a client cannot probe the broker's setting
            return CoordinatorResult(
                response=init_producer_id_response(
                    api_version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                )
            )
        timeout = request.transaction_timeout_ms
        if enable_2pc:
            timeout = TWO_PHASE_COMMIT_TIMEOUT_MS  # Kafka's mark of a 2PC transaction: no timeout at all
        elif not 0 < timeout <= self.config.transaction_max_timeout_ms:
            return CoordinatorResult(
                response=init_producer_id_response(api_version, ErrorCode.INVALID_TRANSACTION_TIMEOUT)
            )
        owned = self._route(transactional_id)
        if isinstance(owned, ErrorCode):
            return CoordinatorResult(response=init_producer_id_response(api_version, owned))
        owned.begin()
        error, producer_id, producer_epoch, ongoing = owned.init_producer_id(
            transactional_id, timeout, expected, now_ms, keep_prepared_txn=keep_prepared
        )
        result = owned.finish()
        result.response = init_producer_id_response(api_version, error, producer_id, producer_epoch, ongoing)
        return result

    def _check_partitions(
        self, partitions: list[TopicPartition], *, from_client: bool
    ) -> dict[TopicPartition, ErrorCode] | None:
        """KafkaApis' checks before the coordinator: clients may not add internal topics
        (TOPIC_AUTHORIZATION_FAILED) nor unknown partitions (UNKNOWN_TOPIC_OR_PARTITION); if any
        fails, the rest are OPERATION_NOT_ATTEMPTED. ``None`` when all pass."""
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            if from_client and tp.topic in INTERNAL_TOPICS:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not self._partition_exists(tp.topic, tp.partition):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not errors:
            return None
        return {tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}

    def _add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        now_ms: int,
        result: CoordinatorResult[TxnTimerKey],
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        owned = self._route(transactional_id)
        if isinstance(owned, ErrorCode):
            return owned
        owned.begin()
        error = owned.add_partitions(transactional_id, producer_id, producer_epoch, partitions, now_ms)
        result.merge(owned.finish())
        return error

    def _add_partitions_v3(
        self, request: AddPartitionsToTxnRequest, api_version: int, now_ms: int
    ) -> CoordinatorResult[TxnTimerKey]:
        partitions = requested_partitions(request.v3_and_below_topics)
        result: CoordinatorResult[TxnTimerKey] = CoordinatorResult()
        errors = self._check_partitions(partitions, from_client=True)
        if errors is None:
            error = self._add_partitions(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                partitions,
                now_ms,
                result,
            )
            errors = dict.fromkeys(partitions, error)
        result.response = add_partitions_to_txn_response(api_version, errors)
        return result

    def _add_partitions_batched(
        self, request: AddPartitionsToTxnRequest, now_ms: int
    ) -> CoordinatorResult[TxnTimerKey]:
        """v4+ (broker to broker): several transactions, each added to or only verified."""
        result: CoordinatorResult[TxnTimerKey] = CoordinatorResult()
        results: list[AddPartitionsToTxnResponse.AddPartitionsToTxnResult] = []
        for txn in request.transactions:
            partitions = requested_partitions(txn.topics)
            errors = self._check_partitions(partitions, from_client=False)
            if errors is None:
                if txn.verify_only:
                    errors = self.verify_partitions(
                        txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions
                    )
                else:
                    error = self._add_partitions(
                        txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions, now_ms, result
                    )
                    errors = dict.fromkeys(partitions, error)
            results.append(add_partitions_result(txn.transactional_id, errors))
        result.response = AddPartitionsToTxnResponse(results_by_transaction=results)
        return result

    def _add_offsets(
        self, request: AddOffsetsToTxnRequest, api_version: int, now_ms: int
    ) -> CoordinatorResult[TxnTimerKey]:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction, so the
        transaction's markers settle the offsets TxnOffsetCommit leaves pending there."""
        offsets_partition = TopicPartition(
            GROUP_METADATA_TOPIC_NAME,
            partition_for(request.group_id, self.config.offsets_topic_num_partitions),
        )
        result: CoordinatorResult[TxnTimerKey] = CoordinatorResult()
        error = self._add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [offsets_partition],
            now_ms,
            result,
        )
        result.response = add_offsets_to_txn_response(api_version, error)
        return result

    def _end_txn(
        self, request: EndTxnRequest, api_version: int, now_ms: int
    ) -> CoordinatorResult[TxnTimerKey]:
        transactional_id = request.transactional_id
        if not transactional_id:
            return CoordinatorResult(response=end_txn_response(api_version, ErrorCode.INVALID_REQUEST))
        owned = self._route(transactional_id)
        if isinstance(owned, ErrorCode):
            return CoordinatorResult(response=end_txn_response(api_version, owned))
        owned.begin()
        error = owned.end_transaction(
            transactional_id, request.producer_id, request.producer_epoch, request.committed, now_ms
        )
        result = owned.finish()
        result.response = end_txn_response(api_version, error, request.producer_id, request.producer_epoch)
        return result

    def _describe(self, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
        states = []
        for transactional_id in request.transactional_ids:
            owned = self._route(transactional_id) if transactional_id else ErrorCode.INVALID_REQUEST
            if isinstance(owned, ErrorCode):
                states.append(
                    DescribeTransactionsResponse.TransactionState(
                        error_code=owned, transactional_id=transactional_id
                    )
                )
            else:
                states.append(owned.describe(transactional_id))
        return DescribeTransactionsResponse(transaction_states=states)

    def _list(self, request: ListTransactionsRequest, now_ms: int) -> ListTransactionsResponse:
        """Kafka's ``listTransactionStates``: nothing while any partition loads; unknown state names are
        reported back (and match nothing)."""
        if any(owned.loading for owned in self._partitions.values()):
            return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        unknown: list[str] = []
        states: frozenset[TransactionState] | None = None
        if request.state_filters:
            known = {name: TransactionState.from_name(name) for name in request.state_filters}
            unknown = [name for name, state in known.items() if state is None]
            states = frozenset(s for s in known.values() if s is not None)
        listed: list[ListTransactionsResponse.TransactionState] = []
        for partition in sorted(self._partitions):
            listed.extend(
                self._partitions[partition].list_transactions(
                    frozenset(request.producer_id_filters), states, request.duration_filter, now_ms
                )
            )
        return ListTransactionsResponse(
            error_code=ErrorCode.NONE, unknown_state_filters=unknown, transaction_states=listed
        )

    @staticmethod
    def error_response(request: Request, api_version: int, error: ErrorCode) -> Response:
        """Answer a whole transaction request with ``error`` (NOT_COORDINATOR, an append failure ...)."""
        return txn_error_response(request, api_version, error)

    @staticmethod
    def append_error_to_response_error(error: ErrorCode) -> ErrorCode:
        """What the client is told when this coordinator's records could not be appended."""
        return txn_append_error_to_response_error(error)

    # -- the produce path ----------------------------------------------------------------------------

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 verification of a transactional produce: NONE for each partition already added to the
        producer's ongoing transaction; INVALID_TXN_STATE if it was not added; otherwise one error for
        all (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while markers are
        written, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_REQUEST for an empty id)."""
        wanted = list(dict.fromkeys(partitions))
        owned = self._route(transactional_id) if transactional_id else ErrorCode.INVALID_REQUEST
        if isinstance(owned, ErrorCode):
            return dict.fromkeys(wanted, owned)
        return owned.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)

    def verify_partition(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> ErrorCode:
        """:meth:`verify_partitions` for one partition, in the shape of the server's
        ``TransactionVerifier`` (a missing transactional id is INVALID_REQUEST, as in Kafka)."""
        tp = TopicPartition(topic, partition)
        return self.verify_partitions(transactional_id or "", producer_id, producer_epoch, [tp])[tp]

    def is_partition_in_transaction(
        self, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> bool:
        """Whether ``producer_id`` at ``producer_epoch`` has an Ongoing transaction, coordinated here,
        that ``topic``-``partition`` was added to (the produce path's check when it only knows the
        producer id)."""
        for owned in self._partitions.values():
            transactional_id = owned.by_producer_id.get(producer_id)
            if transactional_id is None or owned.loading:
                continue
            txn = owned.transactions[transactional_id]
            return (
                txn.producer_epoch == producer_epoch
                and txn.state is TransactionState.ONGOING
                and TopicPartition(topic, partition) in txn.topic_partitions
            )
        return False

    # -- markers and time ----------------------------------------------------------------------------

    def on_markers_written(
        self, markers: WriteTxnMarkers, now_ms: int, partitions: Iterable[TopicPartition] | None = None
    ) -> CoordinatorResult[TxnTimerKey]:
        """The runtime has written ``markers`` on ``partitions`` (all of ``markers.partitions`` when
        ``None``). When the transaction's last marker is in, the CompleteCommit/CompleteAbort record
        comes back to append. Stale reports (an unloaded partition, an older coordinator epoch, a
        transaction that moved on) return an empty result."""
        owned = self._partitions.get(markers.txn_partition)
        if owned is None:
            return CoordinatorResult()
        return owned.on_markers_written(markers, partitions, now_ms)

    def on_timeout(self, key: TxnTimerKey, now_ms: int) -> CoordinatorResult[TxnTimerKey]:
        """A timer the coordinator asked for has fired."""
        owned = self._partitions.get(key.partition)
        return CoordinatorResult() if owned is None else owned.on_timeout(key, now_ms)

    def expire_transactional_ids(self, now_ms: int) -> CoordinatorResult[TxnTimerKey]:
        """Remove expired transactional ids on every loaded partition now (also runs on its own timer)."""
        result: CoordinatorResult[TxnTimerKey] = CoordinatorResult()
        for partition in sorted(self._partitions):
            owned = self._partitions[partition]
            if not owned.loading:
                owned.begin()
                owned.expire_transactional_ids(now_ms)
                result.merge(owned.finish())
        return result


if TYPE_CHECKING:

    def _is_a_partitioned_coordinator(
        coordinator: TransactionCoordinator,
    ) -> PartitionedCoordinator[TxnTimerKey]:
        """mypy checks here that a runtime can drive :class:`TransactionCoordinator` through the protocol."""
        return coordinator
