"""DescribeLogDirs (key 35) and AlterReplicaLogDirs (key 34): this broker's log dirs and moving a replica
between them (:mod:`tidelog.server.log_dir_moves`).

Authorization as Kafka's ``KafkaApis``: DescribeLogDirs needs DESCRIBE on the cluster (else an empty
answer with CLUSTER_AUTHORIZATION_FAILED, v3+ carrying it), AlterReplicaLogDirs ALTER on the cluster (else
every partition CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.authz import Authz, cluster_allowed
from tidelog.server.log_dir_moves import LogDirMoves
from tidelog.server.security.acl import AclOperation

__all__ = ["LogDirsHandler"]


class LogDirsHandler:
    """The two log dir APIs over :class:`LogDirMoves`."""

    def __init__(self, moves: LogDirMoves, authz: Authz = None) -> None:
        self._moves = moves
        self._authz = authz

    def describe(self, ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
        if not cluster_allowed(self._authz, ctx, AclOperation.DESCRIBE):
            return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for asked in request.topics:
                wanted.setdefault(asked.topic, set()).update(asked.partitions)
        response = DescribeLogDirsResponse()
        for described in self._moves.describe(wanted):
            topics: dict[str, DescribeLogDirsResponse.DescribeLogDirsTopic] = {}
            for replica in described.replicas:
                topic = topics.setdefault(
                    replica.topic, DescribeLogDirsResponse.DescribeLogDirsTopic(name=replica.topic)
                )
                topic.partitions.append(
                    DescribeLogDirsResponse.DescribeLogDirsPartition(
                        partition_index=replica.partition,
                        partition_size=replica.size,
                        offset_lag=replica.offset_lag,
                        is_future_key=replica.is_future,
                    )
                )
            response.results.append(
                DescribeLogDirsResponse.DescribeLogDirsResult(
                    error_code=described.error,
                    log_dir=described.path,
                    topics=list(topics.values()),
                    total_bytes=described.total_bytes,
                    usable_bytes=described.usable_bytes,
                )
            )
        return response

    def alter(self, ctx: RequestContext, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
        allowed = cluster_allowed(self._authz, ctx, AclOperation.ALTER)
        results: dict[str, AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult] = {}
        for wanted_dir in request.dirs:
            for topic in wanted_dir.topics:
                result = results.setdefault(
                    topic.name,
                    AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(topic_name=topic.name),
                )
                for index in topic.partitions:
                    error = (
                        self._moves.alter(topic.name, index, wanted_dir.path)
                        if allowed
                        else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                    )
                    result.partitions.append(
                        AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(
                            partition_index=index, error_code=error
                        )
                    )
        return AlterReplicaLogDirsResponse(results=list(results.values()))
