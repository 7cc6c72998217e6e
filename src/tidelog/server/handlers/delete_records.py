"""DeleteRecords (key 21): move a partition's log start offset forward (whole segments below it go).

An offset of -1 means the high watermark. An offset above the high watermark is OFFSET_OUT_OF_RANGE.
The answer's ``low_watermark`` is the new log start offset, checkpointed before the answer.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.authz import Authz, topic_allowed
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.security.acl import AclOperation

__all__ = ["DeleteRecordsHandler"]


class DeleteRecordsHandler:
    """DeleteRecords through the replica manager."""

    def __init__(self, replicas: ReplicaManager, authz: Authz = None) -> None:
        self._replicas = replicas
        self._authz = authz

    def handle(self, ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        response = DeleteRecordsResponse()
        for topic in request.topics:
            results = []
            deletable = topic_allowed(self._authz, ctx, AclOperation.DELETE, topic.name)
            for wanted in topic.partitions:
                if deletable:
                    error, low_watermark = self._replicas.delete_records(
                        topic.name, wanted.partition_index, wanted.offset
                    )
                else:
                    error, low_watermark = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1
                results.append(
                    DeleteRecordsResponse.DeleteRecordsPartitionResult(
                        partition_index=wanted.partition_index, low_watermark=low_watermark, error_code=error
                    )
                )
            response.topics.append(
                DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=results)
            )
        return response
