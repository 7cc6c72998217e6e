"""The transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28),
DescribeTransactions (65) and ListTransactions (66); InitProducerId (22) with a transactional id comes here
from :mod:`.producer_id`.

The coordinator requests go to the broker's :class:`~tidelog.server.txn_runtime.TransactionRuntime`, which
answers once the coordinator's records are appended (and the markers written). TxnOffsetCommit goes to the
group coordinator (:class:`~tidelog.server.group_runtime.GroupRuntime`), which holds the offsets pending
until the transaction's marker reaches its ``__consumer_offsets`` partition.

Invariants:

- Versions: transaction version 1 (no epoch bump per transaction, KIP-890 part 2 is not served), so EndTxn
  is offered up to v4; AddPartitionsToTxn v4-5 is the broker-to-broker batch form (verify_only included).
- TxnOffsetCommit answers UNKNOWN_TOPIC_OR_PARTITION for each partition of a topic this broker does not
  have (as KafkaApis does); the others reach the group coordinator only if the transaction coordinator
  verifies that the group's ``__consumer_offsets`` partition is in the producer's ongoing transaction
  (AddOffsetsToTxn came first), checked in the same synchronous step as the append: a late or zombie
  TxnOffsetCommit can never leave offsets pending that no marker will settle. A partition not in the
  transaction is INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v4), a fenced producer
  INVALID_PRODUCER_EPOCH, a coordinator that cannot tell yet COORDINATOR_NOT_AVAILABLE (retried).
- Authorization (Kafka's): TxnOffsetCommit needs WRITE on the transactional id and READ on the group (else
  every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED) and READ on
  each topic (else TOPIC_AUTHORIZATION_FAILED, before existence); the other APIs in txn_authz.py.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from tidelog.protocol.schema import Request
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.group_runtime import OFFSETS_TOPIC, GroupRuntime
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.security.acl import AclOperation
from tidelog.server.txn_runtime import TransactionRuntime

from .answers import then
from .authz import Authz, group_allowed, txn_allowed
from .offset_refusals import unreadable_or_unknown
from .txn_authz import authorize_txn_request

__all__ = ["TransactionsHandler", "txn_offset_commit_verdict"]

_FIRST_ABORTABLE_TXN_OFFSET_COMMIT_VERSION = 4
_RETRIABLE_VERDICTS = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def txn_offset_commit_verdict(verdict: ErrorCode, api_version: int) -> ErrorCode:
    """What a TxnOffsetCommit of ``api_version`` answers when verification gave ``verdict``."""
    if verdict == ErrorCode.INVALID_TXN_STATE:
        if api_version >= _FIRST_ABORTABLE_TXN_OFFSET_COMMIT_VERSION:
            return ErrorCode.TRANSACTION_ABORTABLE
        return ErrorCode.INVALID_TXN_STATE
    if verdict in _RETRIABLE_VERDICTS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if verdict == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return verdict


def _response(request: TxnOffsetCommitRequest, errors: dict[tuple[str, int], int]) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=errors.get((topic.name, p.partition_index), ErrorCode.NONE),
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


class TransactionsHandler:
    """The transaction APIs: the coordinator requests go to the transaction runtime, TxnOffsetCommit (once
    verified) to the group runtime."""

    def __init__(
        self,
        transactions: TransactionRuntime,
        groups: GroupRuntime,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        authz: Authz = None,
    ) -> None:
        self._transactions = transactions
        self._groups = groups
        self._replicas = replicas
        self._metadata = metadata
        self._authz = authz

    def handle(self, ctx: RequestContext, request: Request) -> Answer:
        """AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions (authorized
        first: txn_authz.py)."""
        return authorize_txn_request(
            self._authz, ctx, request, self._metadata, lambda r: self._transactions.handle(ctx, r)
        )

    def _txn_offset_commit_refusal(self, ctx: RequestContext, request: TxnOffsetCommitRequest) -> int | None:
        if not txn_allowed(self._authz, ctx, AclOperation.WRITE, request.transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if not group_allowed(self._authz, ctx, AclOperation.READ, request.group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        return None

    def txn_offset_commit(self, ctx: RequestContext, request: TxnOffsetCommitRequest) -> Answer:
        refusal = self._txn_offset_commit_refusal(ctx, request) if self._authz is not None else None
        if refusal is not None:
            return _response(
                request,
                {(t.name, p.partition_index): refusal for t in request.topics for p in t.partitions},
            )
        unknown = unreadable_or_unknown(self._authz, ctx, self._metadata, request.topics)
        known_topics = [
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=topic.name,
                partitions=[p for p in topic.partitions if (topic.name, p.partition_index) not in unknown],
            )
            for topic in request.topics
            if any((topic.name, p.partition_index) not in unknown for p in topic.partitions)
        ]
        errors = dict(unknown)
        if not known_topics:
            return _response(request, errors)
        if request.group_id:
            verdict = self._replicas.verify_transaction(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                OFFSETS_TOPIC,
                self._groups.partition_for(request.group_id),
            )
            if verdict != ErrorCode.NONE:
                error = txn_offset_commit_verdict(ErrorCode(verdict), ctx.api_version)
                for topic in known_topics:
                    errors.update(((topic.name, p.partition_index), error) for p in topic.partitions)
                return _response(request, errors)
        filtered = TxnOffsetCommitRequest(
            transactional_id=request.transactional_id,
            group_id=request.group_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            topics=known_topics,
        )
        answer = self._groups.handle(ctx, filtered)

        def merge(response: TxnOffsetCommitResponse) -> TxnOffsetCommitResponse:
            merged = dict(errors)
            for t in response.topics:
                for p in t.partitions:
                    merged[(t.name, p.partition_index)] = p.error_code
            result = _response(request, merged)
            result.throttle_time_ms = response.throttle_time_ms
            return result

        return then(answer, TxnOffsetCommitResponse, merge)
