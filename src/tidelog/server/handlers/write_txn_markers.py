"""WriteTxnMarkers (key 27): COMMIT/ABORT markers written to partitions this broker leads.

In Kafka the transaction coordinator sends it to the partition leaders; tidelog's coordinator writes its
own markers in-process, so on the wire this is the admin's path: ``kafka-transactions.sh abort`` /
``tidelog transactions abort`` (KIP-664) ends a *hanging* transaction, one left open on a partition that
no coordinator will ever finish, by writing an ABORT marker for its producer id, epoch and coordinator epoch.

Invariants (Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``):

- Every marker goes through :meth:`~tidelog.server.txn_runtime.TransactionRuntime.write_marker`, the
  coordinator's own marker path: the control batch is appended as leader with origin COORDINATOR (epochs
  checked, no sequences), closes the producer's open transaction on that partition if it has one (an
  ABORT gets its ``.txnindex`` entry; the last stable offset moves and parked read_committed fetches are
  checked), and a marker on ``__consumer_offsets`` settles the producer's pending transactional offsets.
- Each partition succeeds or fails on its own, with Kafka's codes: UNKNOWN_TOPIC_OR_PARTITION for a
  partition this broker does not have, INVALID_PRODUCER_EPOCH for a producer epoch below the one the
  partition has seen for that producer (a fenced zombie's marker), TRANSACTION_COORDINATOR_FENCED for a
  coordinator epoch below the last marker's, KAFKA_STORAGE_ERROR when the log cannot be written. A
  refused marker writes nothing. A marker for a producer with no open transaction there is written and
  completes nothing (as in Kafka).
- The answer has one result per marker, in request order, with each partition in request order.
"""

from __future__ import annotations

import logging

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from tidelog.protocol.records import ControlRecordType
from tidelog.server.clock import Clock
from tidelog.server.dispatch import RequestContext
from tidelog.server.txn_runtime import TransactionRuntime

__all__ = ["WriteTxnMarkersHandler"]

log = logging.getLogger("tidelog.transactions")

_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
_PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult


class WriteTxnMarkersHandler:
    """WriteTxnMarkers through the transaction runtime's marker path."""

    def __init__(self, transactions: TransactionRuntime, clock: Clock) -> None:
        self._transactions = transactions
        self._clock = clock

    def handle(self, ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        response = WriteTxnMarkersResponse()
        now = self._clock.now_ms()
        for marker in request.markers:
            kind = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
            topics = []
            for topic in marker.topics:
                results = []
                for index in topic.partition_indexes:
                    tp = TopicPartition(topic.name, index)
                    error, message = self._transactions.write_marker(
                        tp,
                        kind,
                        producer_id=marker.producer_id,
                        producer_epoch=marker.producer_epoch,
                        coordinator_epoch=marker.coordinator_epoch,
                        now_ms=now,
                    )
                    log.info(
                        "WriteTxnMarkers from %s: %s marker of producer %d (epoch %d, coordinator epoch %d) on %s: %s%s",
                        ctx.client_id,
                        kind.name,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        tp,
                        "written" if error == ErrorCode.NONE else error.name,
                        f" ({message})" if message else "",
                    )
                    results.append(_PartitionResult(partition_index=index, error_code=error))
                topics.append(_TopicResult(name=topic.name, partitions=results))
            response.markers.append(_Result(producer_id=marker.producer_id, topics=topics))
        return response
