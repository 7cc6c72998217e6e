"""ListOffsets (key 2): earliest, latest, by timestamp (through the time index) and max timestamp.

Special timestamps as Kafka defines them: -1 latest (the high watermark, or the last stable offset under
read_committed; the log end offset when ``replica_id`` is not -1, as Kafka answers its followers), -2
earliest (log start offset), -3 the record with the largest timestamp, -4 earliest local (same as
earliest: no tiered storage). v0 answers in the old ``old_style_offsets`` list form.
A lookup by timestamp finds nothing at or above the latest offset the caller may read (Kafka's
``lastFetchableOffset``: the last stable offset under read_committed, else the high watermark).
A lookup the log cannot answer (a damaged batch where the records must be read) is that partition's error
code (a warning is logged); the other partitions and the connection carry on.
"""

from __future__ import annotations

import logging

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from tidelog.replication.partition import FetchIsolation
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.authz import Authz, topic_allowed
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.security.acl import AclOperation

__all__ = ["EARLIEST", "EARLIEST_LOCAL", "LATEST", "MAX_TIMESTAMP", "ListOffsetsHandler"]

log = logging.getLogger("tidelog.list_offsets")

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
_READ_COMMITTED = 1
_CONSUMER_REPLICA_ID = -1  # any other id (a replica, -2 debugging) reads to the log end, as in Kafka


class ListOffsetsHandler:
    """ListOffsets: offsets of the partitions this broker leads."""

    def __init__(self, replicas: ReplicaManager, authz: Authz = None) -> None:
        self._replicas = replicas
        self._authz = authz

    def handle(self, ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
        response = ListOffsetsResponse()
        for topic in request.topics:
            results = []
            describable = topic_allowed(self._authz, ctx, AclOperation.DESCRIBE, topic.name)
            for wanted in topic.partitions:
                result = ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=wanted.partition_index, timestamp=-1, offset=-1, leader_epoch=-1
                )
                results.append(result)
                if not describable:
                    result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                partition = self._replicas.leader_partition(topic.name, wanted.partition_index)
                if isinstance(partition, ErrorCode):
                    result.error_code = partition
                    continue
                fenced = partition.check_leader_epoch(wanted.current_leader_epoch)
                if fenced is not ErrorCode.NONE:
                    result.error_code = fenced
                    continue
                timestamp = wanted.timestamp
                offset: int | None
                found_ts = -1
                committed = ctx.api_version >= 2 and request.isolation_level == _READ_COMMITTED
                fetchable = partition.fetchable_offset(
                    FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
                )
                if timestamp == LATEST:
                    # a replica (a follower handling OFFSET_OUT_OF_RANGE) is answered with the log end
                    offset = (
                        partition.log_end_offset if request.replica_id != _CONSUMER_REPLICA_ID else fetchable
                    )
                elif timestamp in (EARLIEST, EARLIEST_LOCAL):
                    offset = partition.log_start_offset
                elif timestamp < 0 and timestamp != MAX_TIMESTAMP:
                    result.error_code = ErrorCode.INVALID_REQUEST
                    continue
                else:
                    try:
                        if timestamp == MAX_TIMESTAMP:
                            found = partition.max_timestamp_offset()
                        else:
                            found = partition.offset_for_timestamp(timestamp)
                    except KafkaProtocolError as exc:
                        log.warning("ListOffsets of %s-%d: %s", topic.name, wanted.partition_index, exc)
                        result.error_code = exc.error_code
                        continue
                    offset, found_ts = (found[0], found[1]) if found else (-1, -1)
                    if timestamp != MAX_TIMESTAMP and offset >= fetchable:
                        offset, found_ts = -1, -1
                result.offset = offset
                result.timestamp = found_ts
                result.leader_epoch = partition.leader_epoch if offset >= 0 else -1
                if ctx.api_version == 0:
                    result.old_style_offsets = [offset] if offset >= 0 else []
            response.topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=results)
            )
        return response
