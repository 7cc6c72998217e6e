"""WriteTxnMarkers (key 27): COMMIT/ABORT markers written to partitions this broker leads.

Two senders: a transaction coordinator on another broker, for the partitions this broker leads (Kafka's
``TransactionMarkerChannelManager``; a coordinator writes the markers of partitions it leads itself, on
the same path), and an admin: ``kafka-transactions.sh abort`` / ``tidelog transactions abort`` (KIP-664)
ends a *hanging* transaction, one left open on a partition that no coordinator will ever finish, by writing
an ABORT marker for its producer id, epoch and coordinator epoch.

Invariants (Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``):

- Every marker goes through :meth:`~tidelog.server.txn_runtime.TransactionRuntime.write_markers_locally`,
  the coordinator's own marker path: the control batch is appended as leader with origin COORDINATOR
  (epochs checked, no sequences), closes the producer's open transaction on that partition if it has one
  (an ABORT gets its ``.txnindex`` entry; the last stable offset moves and parked read_committed fetches
  are checked), and a marker on ``__consumer_offsets`` settles the producer's pending transactional
  offsets in this broker's group coordinator.
- In a cluster the markers are appended with acks=-1 (Kafka's ``requiredAcks = -1``): NOT_ENOUGH_REPLICAS
  before the append when the ISR is below ``min.insync.replicas``, and the answer leaves only once every
  written marker is committed (the high watermark passed it) or failed: NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND, or REQUEST_TIMED_OUT after ``request.timeout.ms``. A coordinator
  counts a marker as written only then, so a leader failover can never lose a marker whose transaction
  the coordinator has completed. On a single node the answer is immediate (the high watermark moves at
  the append).
- Each partition succeeds or fails on its own, with Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION for a
  partition the cluster does not have, NOT_LEADER_OR_FOLLOWER for one this broker does not lead,
  INVALID_PRODUCER_EPOCH for a producer epoch below the one the partition has seen for that producer (a
  fenced zombie's marker), TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the last marker's,
  KAFKA_STORAGE_ERROR when the log cannot be written. A refused marker writes nothing. A marker for a
  producer with no open transaction there is written and completes nothing (as in Kafka).
- The answer has one result per marker, in request order, with each partition in request order.
"""

from __future__ import annotations

import asyncio
import logging

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from tidelog.protocol.records import ControlRecordType
from tidelog.server.clock import Clock
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.security.acl import AclOperation
from tidelog.server.txn_runtime import MarkerOutcomes, TransactionRuntime

from .authz import Authz, cluster_allowed

__all__ = ["WriteTxnMarkersHandler"]

log = logging.getLogger("tidelog.transactions")

_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
_PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


class WriteTxnMarkersHandler:
    """WriteTxnMarkers through the transaction runtime's marker path."""

    def __init__(self, transactions: TransactionRuntime, clock: Clock, authz: Authz = None) -> None:
        self._transactions = transactions
        self._clock = clock
        self._authz = authz

    def handle(self, ctx: RequestContext, request: WriteTxnMarkersRequest) -> Answer:
        if not cluster_allowed(self._authz, ctx, AclOperation.CLUSTER_ACTION):  # brokers only (Kafka's rule)
            return WriteTxnMarkersResponse(
                markers=[
                    WriteTxnMarkersResponse.WritableTxnMarkerResult(
                        producer_id=marker.producer_id,
                        topics=[
                            WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(
                                name=t.name,
                                partitions=[
                                    _PartitionResult(
                                        partition_index=index,
                                        error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    )
                                    for index in t.partition_indexes
                                ],
                            )
                            for t in marker.topics
                        ],
                    )
                    for marker in request.markers
                ]
            )
        now = self._clock.now_ms()
        written: list[MarkerOutcomes | asyncio.Future[MarkerOutcomes]] = []
        for marker in request.markers:
            kind = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
            written.append(
                self._transactions.write_markers_locally(
                    [TopicPartition(t.name, index) for t in marker.topics for index in t.partition_indexes],
                    kind,
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    coordinator_epoch=marker.coordinator_epoch,
                    now_ms=now,
                )
            )
        outcomes = [w for w in written if not isinstance(w, asyncio.Future)]
        if len(outcomes) == len(written):
            return self._response(ctx, request, outcomes)

        async def committed() -> WriteTxnMarkersResponse:
            return self._response(
                ctx, request, [await w if isinstance(w, asyncio.Future) else w for w in written]
            )

        return committed()

    @staticmethod
    def _response(
        ctx: RequestContext, request: WriteTxnMarkersRequest, outcomes: list[MarkerOutcomes]
    ) -> WriteTxnMarkersResponse:
        response = WriteTxnMarkersResponse()
        for marker, outcome in zip(request.markers, outcomes, strict=True):
            kind = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
            topics = []
            for topic in marker.topics:
                results = []
                for index in topic.partition_indexes:
                    tp = TopicPartition(topic.name, index)
                    written = outcome[tp]
                    error = ErrorCode(written.error_code)
                    log.info(
                        "WriteTxnMarkers from %s: %s marker of producer %d (epoch %d, coordinator epoch %d) on %s: %s%s",
                        ctx.client_id,
                        kind.name,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        tp,
                        "written" if error == ErrorCode.NONE else error.name,
                        f" ({written.message})" if written.message else "",
                    )
                    results.append(_PartitionResult(partition_index=index, error_code=error))
                topics.append(_TopicResult(name=topic.name, partitions=results))
            response.markers.append(_Result(producer_id=marker.producer_id, topics=topics))
        return response
