"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, for clients validating their position.

Every batch this broker writes carries its partition's leader epoch; the answer comes from the partition
(:meth:`~tidelog.replication.partition.Partition.end_offset_for_leader_epoch`): for the current epoch the
log end offset, for an unknown future epoch (-1, -1) as Kafka answers. A request carrying a current leader
epoch is fenced as every other partition request is.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.authz import Authz, cluster_allowed, topic_allowed
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.security.acl import AclOperation

__all__ = ["OffsetForLeaderEpochHandler"]


class OffsetForLeaderEpochHandler:
    """OffsetForLeaderEpoch of the partitions this broker leads."""

    def __init__(self, replicas: ReplicaManager, authz: Authz = None) -> None:
        self._replicas = replicas
        self._authz = authz

    def handle(
        self, ctx: RequestContext, request: OffsetForLeaderEpochRequest
    ) -> OffsetForLeaderEpochResponse:
        response = OffsetForLeaderEpochResponse()
        follower = ctx.api_version >= 3 and request.replica_id >= 0
        follower_denied = follower and not cluster_allowed(self._authz, ctx, AclOperation.CLUSTER_ACTION)
        for topic in request.topics:
            results = []
            if follower_denied:
                refusal = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            elif not topic_allowed(self._authz, ctx, AclOperation.DESCRIBE, topic.topic):
                refusal = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                refusal = ErrorCode.NONE
            for wanted in topic.partitions:
                result = OffsetForLeaderEpochResponse.EpochEndOffset(
                    partition=wanted.partition, leader_epoch=-1, end_offset=-1
                )
                results.append(result)
                if refusal != ErrorCode.NONE:
                    result.error_code = refusal
                    continue
                partition = self._replicas.leader_partition(topic.topic, wanted.partition)
                if isinstance(partition, ErrorCode):
                    result.error_code = partition
                    continue
                fenced = partition.check_leader_epoch(wanted.current_leader_epoch)
                if fenced is not ErrorCode.NONE:
                    result.error_code = fenced
                    continue
                result.leader_epoch, result.end_offset = partition.end_offset_for_leader_epoch(
                    wanted.leader_epoch
                )
            response.topics.append(
                OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=results)
            )
        return response
