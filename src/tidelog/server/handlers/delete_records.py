"""DeleteRecords (key 21): move a partition's log start offset forward (whole segments below it go).

An offset of -1 means the high watermark. An offset above the high watermark is OFFSET_OUT_OF_RANGE.
The answer's ``low_watermark`` is the new log start offset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext


def handle_delete_records(
    broker: Broker, ctx: RequestContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    response = DeleteRecordsResponse()
    for topic in request.topics:
        results = []
        for wanted in topic.partitions:
            result = DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=wanted.partition_index, low_watermark=-1
            )
            results.append(result)
            partition = broker.replicas.get(topic.name, wanted.partition_index)
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offset = partition.high_watermark if wanted.offset == -1 else wanted.offset
            if offset < 0 or offset > partition.high_watermark:
                result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            if offset > partition.log_start_offset:
                partition.log.delete_records_before(offset)
                broker.logs.checkpoint_log_start_offsets()
            result.low_watermark = partition.log_start_offset
        response.topics.append(
            DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=results)
        )
    return response
