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

Authorization (Kafka's): OffsetCommit needs READ on the group (else every partition is
GROUP_AUTHORIZATION_FAILED) and READ on each topic (else TOPIC_AUTHORIZATION_FAILED, before existence);
OffsetDelete DELETE on the group and READ on each topic; the other APIs are checked in group_authz.py.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from tidelog.protocol.schema import Request
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.security.acl import AclOperation

from .answers import then
from .authz import Authz, group_allowed, topic_allowed
from .group_authz import authorize_group_request
from .offset_refusals import unreadable_or_unknown
from .share_admin import GroupForward

__all__ = ["GroupsHandler", "then"]


class GroupsHandler:
    """The group APIs, passed to the group coordinator's runtime after the broker's own checks."""

    def __init__(self, groups: GroupForward, metadata: MetadataCache, authz: Authz = None) -> None:
        self._groups = groups
        self._metadata = metadata
        self._authz = authz

    def handle(self, ctx: RequestContext, request: Request) -> Answer:
        """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
        ConsumerGroupHeartbeat and ConsumerGroupDescribe (authorized first: group_authz.py)."""
        return authorize_group_request(self._authz, ctx, request, lambda r: self._groups.handle(ctx, r))

    def offset_commit(self, ctx: RequestContext, request: OffsetCommitRequest) -> Answer:
        unknown: dict[tuple[str, int], int] = {}
        known_topics = []
        if not group_allowed(self._authz, ctx, AclOperation.READ, request.group_id):
            return _offset_commit_errors(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        for topic in request.topics:
            if not topic_allowed(self._authz, ctx, AclOperation.READ, topic.name):
                unknown.update(
                    ((topic.name, p.partition_index), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    for p in topic.partitions
                )
                continue
            keep = [
                p for p in topic.partitions if self._metadata.has_partition(topic.name, p.partition_index)
            ]
            unknown.update(
                ((topic.name, p.partition_index), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
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
            errors: dict[tuple[str, int], int] = dict(unknown)
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
        if not group_allowed(self._authz, ctx, AclOperation.DELETE, request.group_id):
            return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        unknown = unreadable_or_unknown(self._authz, ctx, self._metadata, request.topics)
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
            errors = dict(unknown)
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


def _offset_commit_errors(request: OffsetCommitRequest, error: int) -> OffsetCommitResponse:
    """Every partition of ``request`` answered with ``error``."""
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )
