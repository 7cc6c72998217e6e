"""Authorization of the transaction APIs (Kafka's ``KafkaApis`` checks), in front of the transaction
coordinator.

Invariants:

- AddPartitionsToTxn (v0-3, from clients) needs WRITE on the transactional id (else every partition is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic: when a topic is refused (or does not exist)
  nothing is added, the refused partitions answer TOPIC_AUTHORIZATION_FAILED, the missing ones
  UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED. Its batched form (v4+, broker to
  broker) needs CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
- AddOffsetsToTxn needs WRITE on the transactional id and READ on the group; EndTxn WRITE on the
  transactional id.
- DescribeTransactions needs DESCRIBE on each transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  in its place) and lists only topics the principal may DESCRIBE; ListTransactions lists only the
  transactional ids it may DESCRIBE.
"""

from __future__ import annotations

from collections.abc import Callable

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
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.security.acl import AclOperation

from .answers import then
from .authz import Authz, cluster_allowed, group_allowed, topic_allowed, txn_allowed

__all__ = ["authorize_txn_request"]

_TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_Forward = Callable[[Request], Answer]


def authorize_txn_request(
    authz: Authz, ctx: RequestContext, request: Request, metadata: MetadataCache, forward: _Forward
) -> Answer:
    """The answer to ``request``: refused, filtered, or ``forward``-ed to the coordinator as it is."""
    if authz is None:
        return forward(request)
    if isinstance(request, AddPartitionsToTxnRequest):
        return _add_partitions(authz, ctx, request, metadata, forward)
    if isinstance(request, AddOffsetsToTxnRequest):
        if not txn_allowed(authz, ctx, AclOperation.WRITE, request.transactional_id):
            return AddOffsetsToTxnResponse(error_code=_TXN_DENIED)
        if not group_allowed(authz, ctx, AclOperation.READ, request.group_id):
            return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return forward(request)
    if isinstance(request, EndTxnRequest):
        if not txn_allowed(authz, ctx, AclOperation.WRITE, request.transactional_id):
            return EndTxnResponse(error_code=_TXN_DENIED)
        return forward(request)
    if isinstance(request, DescribeTransactionsRequest):
        return _describe(authz, ctx, request, forward)
    if isinstance(request, ListTransactionsRequest):

        def visible(answer: ListTransactionsResponse) -> Response:
            answer.transaction_states = [
                s
                for s in answer.transaction_states
                if txn_allowed(authz, ctx, AclOperation.DESCRIBE, s.transactional_id)
            ]
            return answer

        return then(forward(request), ListTransactionsResponse, visible)
    return forward(request)


def _add_partitions(
    authz: Authz,
    ctx: RequestContext,
    request: AddPartitionsToTxnRequest,
    metadata: MetadataCache,
    forward: _Forward,
) -> Answer:
    if ctx.api_version >= 4:
        if not cluster_allowed(authz, ctx, AclOperation.CLUSTER_ACTION):
            return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return forward(request)
    topics = request.v3_and_below_topics

    def answer(error_of: Callable[[str, int], int]) -> AddPartitionsToTxnResponse:
        return AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=error_of(t.name, p)
                        )
                        for p in t.partitions
                    ],
                )
                for t in topics
            ]
        )

    if not txn_allowed(authz, ctx, AclOperation.WRITE, request.v3_and_below_transactional_id):
        return answer(lambda _t, _p: _TXN_DENIED)
    refused = {t.name for t in topics if not topic_allowed(authz, ctx, AclOperation.WRITE, t.name)}
    if not refused:
        return forward(request)

    def error_of(topic: str, partition: int) -> int:
        if topic in refused:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if not metadata.has_partition(topic, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.OPERATION_NOT_ATTEMPTED

    return answer(error_of)


def _describe(
    authz: Authz, ctx: RequestContext, request: DescribeTransactionsRequest, forward: _Forward
) -> Answer:
    ids = list(request.transactional_ids)
    refused = {t for t in ids if not txn_allowed(authz, ctx, AclOperation.DESCRIBE, t)}

    def merge(answer: DescribeTransactionsResponse) -> Response:
        by_id = {s.transactional_id: s for s in answer.transaction_states}
        merged = []
        for tid in ids:
            if tid in refused:
                merged.append(
                    DescribeTransactionsResponse.TransactionState(
                        error_code=_TXN_DENIED, transactional_id=tid, transaction_state="", topics=[]
                    )
                )
                continue
            state = by_id[tid]
            state.topics = [
                t for t in state.topics if topic_allowed(authz, ctx, AclOperation.DESCRIBE, t.topic)
            ]
            merged.append(state)
        answer.transaction_states = merged
        return answer

    allowed = [t for t in ids if t not in refused]
    if not allowed:
        return merge(DescribeTransactionsResponse())
    request.transactional_ids = allowed
    return then(forward(request), DescribeTransactionsResponse, merge)
