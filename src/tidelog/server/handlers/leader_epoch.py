"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, for clients validating their position.

Every batch this broker writes carries its partition's leader epoch; on a single node the epoch only
changes when the partition is created, so the answer for the current epoch is the log end offset and for
an epoch older than the first one in the log it is the log start offset (Kafka's rules, simplified by
there being one epoch per partition until replication arrives).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext


def handle_offset_for_leader_epoch(
    broker: Broker, ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    response = OffsetForLeaderEpochResponse()
    for topic in request.topics:
        results = []
        for wanted in topic.partitions:
            result = OffsetForLeaderEpochResponse.EpochEndOffset(
                partition=wanted.partition, leader_epoch=-1, end_offset=-1
            )
            results.append(result)
            partition = broker.replicas.get(topic.topic, wanted.partition)
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            current = wanted.current_leader_epoch
            if current >= 0 and current != partition.leader_epoch:
                result.error_code = (
                    ErrorCode.FENCED_LEADER_EPOCH
                    if current < partition.leader_epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH
                )
                continue
            if wanted.leader_epoch > partition.leader_epoch:
                continue  # unknown future epoch: (-1, -1) as Kafka answers
            result.leader_epoch = partition.leader_epoch
            result.end_offset = partition.log_end_offset
        response.topics.append(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=results)
        )
    return response
