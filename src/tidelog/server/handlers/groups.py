"""The classic group APIs: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13), OffsetCommit (8),
OffsetFetch (9), OffsetDelete (47), ListGroups (16), DescribeGroups (15) and DeleteGroups (42).

Every request goes to the group coordinator through the broker's
:class:`~tidelog.server.group_runtime.GroupRuntime`, which answers at once or parks the request (JoinGroup
and SyncGroup wait for the rebalance; the connection awaits the answer, keeping its responses in order).

Invariants (what Kafka's ``KafkaApis`` checks before the coordinator sees a request): OffsetCommit and
OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for each partition of a topic this broker does not have (or
beyond its partition count); only the other partitions reach the coordinator. An OffsetCommit with none
left is not passed on at all; an OffsetDelete always is (its group may not exist: GROUP_ID_NOT_FOUND).
Responses list the topics in request order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.group_runtime import GroupRuntime
from tidelog.server.metadata_cache import MetadataCache

__all__ = ["GroupsHandler", "then"]

R = TypeVar("R", bound=Response)


class GroupsHandler:
    """The group APIs, passed to the group coordinator's runtime after the broker's own checks."""

    def __init__(self, groups: GroupRuntime, metadata: MetadataCache) -> None:
        self._groups = groups
        self._metadata = metadata

    def handle(self, ctx: RequestContext, request: Request) -> Answer:
        """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
        ConsumerGroupHeartbeat and ConsumerGroupDescribe."""
        return self._groups.handle(ctx, request)

    def offset_commit(self, ctx: RequestContext, request: OffsetCommitRequest) -> Answer:
        unknown: dict[tuple[str, int], None] = {}
        known_topics = []
        for topic in request.topics:
            keep = [
                p for p in topic.partitions if self._metadata.has_partition(topic.name, p.partition_index)
            ]
            unknown.update(
                ((topic.name, p.partition_index), None)
                for p in topic.partitions
                if not self._metadata.has_partition(topic.name, p.partition_index)
            )
            if keep:
                known_topics.append(
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=topic.name, partitions=keep)
                )
        if not unknown:
            return self._groups.handle(ctx, request)

        def merge(answer: OffsetCommitResponse | None) -> OffsetCommitResponse:
            errors: dict[tuple[str, int], int] = dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if answer is not None:
                for t in answer.topics:
                    for p in t.partitions:
                        errors[(t.name, p.partition_index)] = p.error_code
            merged = OffsetCommitResponse(throttle_time_ms=answer.throttle_time_ms if answer else 0)
            for topic in request.topics:
                merged.topics.append(
                    OffsetCommitResponse.OffsetCommitResponseTopic(
                        name=topic.name,
                        partitions=[
                            OffsetCommitResponse.OffsetCommitResponsePartition(
                                partition_index=p.partition_index,
                                error_code=errors.get((topic.name, p.partition_index), ErrorCode.NONE),
                            )
                            for p in topic.partitions
                        ],
                    )
                )
            return merged

        if not known_topics:
            return merge(None)
        filtered = OffsetCommitRequest(
            group_id=request.group_id,
            generation_id_or_member_epoch=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            retention_time_ms=request.retention_time_ms,
            topics=known_topics,
        )
        return then(self._groups.handle(ctx, filtered), OffsetCommitResponse, merge)

    def offset_delete(self, ctx: RequestContext, request: OffsetDeleteRequest) -> Answer:
        unknown = {
            (topic.name, p.partition_index)
            for topic in request.topics
            for p in topic.partitions
            if not self._metadata.has_partition(topic.name, p.partition_index)
        }
        if not unknown:
            return self._groups.handle(ctx, request)
        known_topics = [
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=topic.name,
                partitions=[p for p in topic.partitions if (topic.name, p.partition_index) not in unknown],
            )
            for topic in request.topics
            if any((topic.name, p.partition_index) not in unknown for p in topic.partitions)
        ]

        def merge(answer: OffsetDeleteResponse | None) -> OffsetDeleteResponse:
            errors: dict[tuple[str, int], int] = dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            merged = OffsetDeleteResponse()
            if answer is not None:
                merged.error_code = answer.error_code
                merged.throttle_time_ms = answer.throttle_time_ms
                for t in answer.topics:
                    for p in t.partitions:
                        errors[(t.name, p.partition_index)] = p.error_code
            if merged.error_code != ErrorCode.NONE:
                return merged  # a group-level error (Kafka lists no partitions then)
            for topic in request.topics:
                merged.topics.append(
                    OffsetDeleteResponse.OffsetDeleteResponseTopic(
                        name=topic.name,
                        partitions=[
                            OffsetDeleteResponse.OffsetDeleteResponsePartition(
                                partition_index=p.partition_index,
                                error_code=errors.get((topic.name, p.partition_index), ErrorCode.NONE),
                            )
                            for p in topic.partitions
                        ],
                    )
                )
            return merged

        filtered = OffsetDeleteRequest(group_id=request.group_id, topics=known_topics)
        return then(self._groups.handle(ctx, filtered), OffsetDeleteResponse, merge)


def then(answer: Answer, kind: type[R], merge: Callable[[R], Response]) -> Answer:
    """Apply ``merge`` to an answer (a ``kind`` response) that may be a future (in a cluster, when the
    coordinator's records wait for their commit)."""

    def checked(response: Response) -> Response:
        if not isinstance(response, kind):
            raise TypeError(f"expected a {kind.__name__}, got a {type(response).__name__}")
        return merge(response)

    if isinstance(answer, Response):
        return checked(answer)

    async def merged() -> Response:
        return checked(await answer)

    return merged()
