"""Response bodies the transaction coordinator builds, at the version they will be encoded at.

Invariants: an error a request version cannot carry is translated the way Kafka's ``KafkaApis`` does:
PRODUCER_FENCED (KIP-588) becomes INVALID_PRODUCER_EPOCH for InitProducerId < v4, AddPartitionsToTxn
< v2, AddOffsetsToTxn < v2 and EndTxn < v2. AddPartitionsToTxn v0-3 answers one error per requested
partition, in request order; :func:`txn_error_response` answers any transaction request with one error
everywhere it can go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tidelog.coordinator.common.append_errors import COORDINATOR_APPEND_ERRORS
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from tidelog.protocol.schema import Request, Response

__all__ = [
    "add_offsets_to_txn_response",
    "add_partitions_result",
    "add_partitions_to_txn_response",
    "end_txn_response",
    "fenced_error",
    "init_producer_id_response",
    "requested_partitions",
    "txn_append_error_to_response_error",
    "txn_error_response",
]

_FENCED_FROM_VERSION: dict[type[Request], int] = {
    InitProducerIdRequest: 4,
    AddPartitionsToTxnRequest: 2,
    AddOffsetsToTxnRequest: 2,
    EndTxnRequest: 2,
}


def fenced_error(request_type: type[Request], api_version: int, error: ErrorCode) -> ErrorCode:
    """``error`` as a client of this version understands it (PRODUCER_FENCED is new in KIP-588)."""
    if error is ErrorCode.PRODUCER_FENCED and api_version < _FENCED_FROM_VERSION.get(request_type, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


_TXN_APPEND_ERRORS: Final[Mapping[ErrorCode, ErrorCode]] = {
    **COORDINATOR_APPEND_ERRORS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def txn_append_error_to_response_error(error: ErrorCode) -> ErrorCode:
    """What Kafka's ``TransactionStateManager.appendTransactionToLog`` tells a client when the
    ``__transaction_state`` append failed (the common translation, plus NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
    return _TXN_APPEND_ERRORS.get(error, error)


def init_producer_id_response(
    api_version: int,
    error: ErrorCode,
    producer_id: int = -1,
    producer_epoch: int = -1,
    ongoing: tuple[int, int] | None = None,
) -> InitProducerIdResponse:
    """``ongoing``: the (producer id, epoch) of the transaction KeepPreparedTxn kept (v6+), -1/-1 if none."""
    error = fenced_error(InitProducerIdRequest, api_version, error)
    if error is not ErrorCode.NONE:
        producer_id, producer_epoch, ongoing = -1, -1, None
    ongoing_id, ongoing_epoch = (-1, -1) if ongoing is None else ongoing
    return InitProducerIdResponse(
        error_code=error,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        ongoing_txn_producer_id=ongoing_id,
        ongoing_txn_producer_epoch=ongoing_epoch,
    )


def add_offsets_to_txn_response(api_version: int, error: ErrorCode) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(error_code=fenced_error(AddOffsetsToTxnRequest, api_version, error))


def end_txn_response(
    api_version: int, error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1
) -> EndTxnResponse:
    error = fenced_error(EndTxnRequest, api_version, error)
    if error is not ErrorCode.NONE:
        producer_id, producer_epoch = -1, -1
    return EndTxnResponse(error_code=error, producer_id=producer_id, producer_epoch=producer_epoch)


def requested_partitions(
    topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],
) -> list[TopicPartition]:
    """The partitions of an AddPartitionsToTxn topic list, in request order, without repeats."""
    return list(dict.fromkeys(TopicPartition(t.name, p) for t in topics for p in t.partitions))


def _topic_results(
    errors: Mapping[TopicPartition, ErrorCode],
) -> list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
    for tp, error in errors.items():
        by_topic.setdefault(tp.topic, []).append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(
                partition_index=tp.partition, partition_error_code=error
            )
        )
    return [
        AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=results)
        for topic, results in by_topic.items()
    ]


def add_partitions_result(
    transactional_id: str, errors: Mapping[TopicPartition, ErrorCode]
) -> AddPartitionsToTxnResponse.AddPartitionsToTxnResult:
    """One transaction's entry of a v4+ response."""
    return AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
        transactional_id=transactional_id, topic_results=_topic_results(errors)
    )


def add_partitions_to_txn_response(
    api_version: int, errors: Mapping[TopicPartition, ErrorCode]
) -> AddPartitionsToTxnResponse:
    """A v0-3 response: one error per partition."""
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=_topic_results(
            {tp: fenced_error(AddPartitionsToTxnRequest, api_version, e) for tp, e in errors.items()}
        )
    )


def txn_error_response(request: Request, api_version: int, error: ErrorCode) -> Response:
    """Answer a whole transaction request with ``error`` (NOT_COORDINATOR, an append failure ...)."""
    if isinstance(request, InitProducerIdRequest):
        return init_producer_id_response(api_version, error)
    if isinstance(request, AddOffsetsToTxnRequest):
        return add_offsets_to_txn_response(api_version, error)
    if isinstance(request, EndTxnRequest):
        return end_txn_response(api_version, error)
    if isinstance(request, AddPartitionsToTxnRequest):
        if api_version < 4:
            partitions = requested_partitions(request.v3_and_below_topics)
            return add_partitions_to_txn_response(api_version, dict.fromkeys(partitions, error))
        # v4+ (broker to broker): a whole-request error goes in the top-level error code, as Kafka's
        # AddPartitionsToTxnRequest.getErrorResponse does.
        return AddPartitionsToTxnResponse(error_code=error)
    if isinstance(request, DescribeTransactionsRequest):
        return DescribeTransactionsResponse(
            transaction_states=[
                DescribeTransactionsResponse.TransactionState(error_code=error, transactional_id=t)
                for t in request.transactional_ids
            ]
        )
    if isinstance(request, ListTransactionsRequest):
        return ListTransactionsResponse(error_code=error)
    raise TypeError(f"{type(request).__name__} is not a transaction coordinator request")
