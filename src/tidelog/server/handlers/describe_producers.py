"""DescribeProducers (key 61, KIP-664): the producers a partition's log knows, for finding hanging
transactions (``tidelog transactions describe-producers`` / ``find-hanging``, ``kafka-transactions.sh``).

Invariants (Kafka's ``KafkaApis.handleDescribeProducersRequest`` and ``UnifiedLog.activeProducers``):

- Every requested partition gets one answer, in request order: UNKNOWN_TOPIC_OR_PARTITION when this broker
  has no such partition (one node leads every partition it has, so NOT_LEADER_OR_FOLLOWER never applies),
  else every producer of the partition's producer state, by producer id. Internal topics are described too.
- Each producer is its state as the log holds it: epoch, last sequence (-1 without batches), timestamp of
  its last batch or marker, coordinator epoch of its last marker (-1 if none yet) and the first offset of
  its open transaction (-1 if none). Nothing is changed.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DescribeProducersRequest, DescribeProducersResponse
from tidelog.replication.partition import Partition
from tidelog.server.dispatch import RequestContext
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.security.acl import AclOperation

from .authz import Authz, topic_allowed

__all__ = ["DescribeProducersHandler", "active_producers"]

_PartitionResponse = DescribeProducersResponse.PartitionResponse
_ProducerState = DescribeProducersResponse.ProducerState
_NOT_HOSTED = "This server does not host this topic-partition."
"""Kafka's message for UNKNOWN_TOPIC_OR_PARTITION."""


def active_producers(partition: Partition) -> list[DescribeProducersResponse.ProducerState]:
    """The partition's producer state, one entry per producer id, by producer id."""
    return [
        _ProducerState(
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            last_sequence=entry.last_sequence,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset,
        )
        for entry in partition.producer_states()
    ]


class DescribeProducersHandler:
    """DescribeProducers of the partitions this broker leads."""

    def __init__(self, replicas: ReplicaManager, authz: Authz = None) -> None:
        self._replicas = replicas
        self._authz = authz

    def handle(self, ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
        response = DescribeProducersResponse()
        for topic in request.topics:
            answers = []
            readable = topic_allowed(self._authz, ctx, AclOperation.READ, topic.name)
            for index in topic.partition_indexes:
                partition = (
                    self._replicas.leader_partition(topic.name, index)
                    if readable
                    else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                )
                if isinstance(partition, ErrorCode):
                    answers.append(
                        _PartitionResponse(
                            partition_index=index,
                            error_code=partition,
                            error_message=_NOT_HOSTED
                            if partition is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            else None,
                        )
                    )
                else:
                    answers.append(
                        _PartitionResponse(
                            partition_index=index, active_producers=active_producers(partition)
                        )
                    )
            response.topics.append(
                DescribeProducersResponse.TopicResponse(name=topic.name, partitions=answers)
            )
        return response
