"""Authorization of the group APIs (Kafka's ``KafkaApis`` checks), in front of the group coordinator.

Invariants:

- JoinGroup, SyncGroup, Heartbeat, LeaveGroup and ConsumerGroupHeartbeat need READ on the group, else the
  whole answer is GROUP_AUTHORIZATION_FAILED and the coordinator never sees the request.
- OffsetFetch needs READ on each group (else GROUP_AUTHORIZATION_FAILED for it) and answers only topics the
  principal may DESCRIBE: a topic asked for by name that it may not is TOPIC_AUTHORIZATION_FAILED per
  partition, and a fetch of all topics leaves such topics out.
- DescribeGroups / ConsumerGroupDescribe need DESCRIBE on each group, DeleteGroups DELETE; a refused group
  is answered GROUP_AUTHORIZATION_FAILED in its place, only the others reach the coordinator. ListGroups
  lists every group with DESCRIBE on the cluster, else only the groups the principal may DESCRIBE.
- The authorized-operations field of DescribeGroups / ConsumerGroupDescribe holds the principal's bits on
  the group when asked for (every supported operation without an authorizer), Kafka's "omitted" otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.security.acl import AclOperation, ResourceType

from .answers import then
from .authz import Authz, cluster_allowed, group_allowed, operations, topic_allowed

__all__ = ["authorize_group_request"]

_GAF = ErrorCode.GROUP_AUTHORIZATION_FAILED
_Forward = Callable[[Request], Answer]


def authorize_group_request(authz: Authz, ctx: RequestContext, request: Request, forward: _Forward) -> Answer:
    """The answer to ``request``: refused, filtered, or ``forward``-ed to the coordinator as it is."""
    if isinstance(request, DescribeGroupsRequest):
        return _describe_groups(authz, ctx, request, forward)
    if isinstance(request, ConsumerGroupDescribeRequest):
        return _consumer_group_describe(authz, ctx, request, forward)
    if authz is None:
        return forward(request)
    refusal = _whole_refusal(authz, ctx, request)
    if refusal is not None:
        return refusal
    if isinstance(request, OffsetFetchRequest):
        return _offset_fetch(authz, ctx, request, forward)
    if isinstance(request, DeleteGroupsRequest):
        return _delete_groups(authz, ctx, request, forward)
    if isinstance(request, ListGroupsRequest) and not cluster_allowed(authz, ctx, AclOperation.DESCRIBE):

        def visible(answer: ListGroupsResponse) -> Response:
            answer.groups = [
                g for g in answer.groups if group_allowed(authz, ctx, AclOperation.DESCRIBE, g.group_id)
            ]
            return answer

        return then(forward(request), ListGroupsResponse, visible)
    return forward(request)


def _whole_refusal(authz: Authz, ctx: RequestContext, request: Request) -> Response | None:
    if isinstance(request, JoinGroupRequest | SyncGroupRequest | HeartbeatRequest | LeaveGroupRequest):
        if group_allowed(authz, ctx, AclOperation.READ, request.group_id):
            return None
        if isinstance(request, JoinGroupRequest):
            return JoinGroupResponse(
                error_code=_GAF,
                generation_id=-1,
                protocol_name=None if ctx.api_version >= 7 else "",
                leader="",
                member_id="",
                members=[],
            )
        if isinstance(request, SyncGroupRequest):
            return SyncGroupResponse(error_code=_GAF, assignment=b"")
        if isinstance(request, HeartbeatRequest):
            return HeartbeatResponse(error_code=_GAF)
        return LeaveGroupResponse(error_code=_GAF)
    if isinstance(request, ConsumerGroupHeartbeatRequest) and not group_allowed(
        authz, ctx, AclOperation.READ, request.group_id
    ):
        return ConsumerGroupHeartbeatResponse(error_code=_GAF, member_epoch=-1)
    return None


def _offset_fetch(
    authz: Authz, ctx: RequestContext, request: OffsetFetchRequest, forward: _Forward
) -> Answer:
    def describable(name: str) -> bool:
        return topic_allowed(authz, ctx, AclOperation.DESCRIBE, name)

    if ctx.api_version < 8:
        if not group_allowed(authz, ctx, AclOperation.READ, request.group_id):
            if ctx.api_version >= 2:
                return OffsetFetchResponse(error_code=_GAF)
            return OffsetFetchResponse(
                topics=[
                    OffsetFetchResponse.OffsetFetchResponseTopic(
                        name=t.name,
                        partitions=[
                            OffsetFetchResponse.OffsetFetchResponsePartition(
                                partition_index=p, committed_offset=-1, metadata="", error_code=_GAF
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in request.topics or []
                ]
            )
        if request.topics is None:

            def visible(answer: OffsetFetchResponse) -> Response:
                answer.topics = [t for t in answer.topics if describable(t.name)]
                return answer

            return then(forward(request), OffsetFetchResponse, visible)
        refused = [t for t in request.topics if not describable(t.name)]
        if not refused:
            return forward(request)
        request.topics = [t for t in request.topics if describable(t.name)]

        def with_refused(answer: OffsetFetchResponse) -> Response:
            answer.topics.extend(
                OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartition(
                            partition_index=p,
                            committed_offset=-1,
                            metadata="",
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        )
                        for p in t.partition_indexes
                    ],
                )
                for t in refused
            )
            return answer

        return then(forward(request), OffsetFetchResponse, with_refused)
    # v8+: several groups, each with its own topics
    refused_groups = [
        g.group_id for g in request.groups if not group_allowed(authz, ctx, AclOperation.READ, g.group_id)
    ]
    refused_topics: dict[str, list[OffsetFetchRequest.OffsetFetchRequestTopics]] = {}
    allowed_groups = []
    for group in request.groups:
        if group.group_id in refused_groups:
            continue
        if group.topics is not None:
            refused_topics[group.group_id] = [t for t in group.topics if not describable(t.name)]
            group.topics = [t for t in group.topics if describable(t.name)]
        allowed_groups.append(group)
    order = [g.group_id for g in request.groups]

    def merge(answer: OffsetFetchResponse) -> Response:
        by_id = {g.group_id: g for g in answer.groups}
        merged = []
        for group_id in order:
            if group_id in refused_groups:
                merged.append(
                    OffsetFetchResponse.OffsetFetchResponseGroup(group_id=group_id, error_code=_GAF)
                )
                continue
            group = by_id[group_id]
            if group_id not in refused_topics:
                group.topics = [t for t in group.topics if describable(t.name)]
            else:
                group.topics.extend(
                    OffsetFetchResponse.OffsetFetchResponseTopics(
                        name=t.name,
                        partitions=[
                            OffsetFetchResponse.OffsetFetchResponsePartitions(
                                partition_index=p,
                                committed_offset=-1,
                                metadata="",
                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in refused_topics[group_id]
                )
            merged.append(group)
        answer.groups = merged
        return answer

    if not allowed_groups:
        return merge(OffsetFetchResponse())
    request.groups = allowed_groups
    return then(forward(request), OffsetFetchResponse, merge)


def _delete_groups(
    authz: Authz, ctx: RequestContext, request: DeleteGroupsRequest, forward: _Forward
) -> Answer:
    names = list(request.groups_names)
    refused = {g for g in names if not group_allowed(authz, ctx, AclOperation.DELETE, g)}
    if not refused:
        return forward(request)

    def merge(answer: DeleteGroupsResponse) -> Response:
        by_id = {r.group_id: r for r in answer.results}
        answer.results = [
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=_GAF)
            if g in refused
            else by_id[g]
            for g in names
        ]
        return answer

    allowed = [g for g in names if g not in refused]
    if not allowed:
        return merge(DeleteGroupsResponse())
    request.groups_names = allowed
    return then(forward(request), DeleteGroupsResponse, merge)


def _describe_groups(
    authz: Authz, ctx: RequestContext, request: DescribeGroupsRequest, forward: _Forward
) -> Answer:
    names = list(request.groups)
    refused = {g for g in names if not group_allowed(authz, ctx, AclOperation.DESCRIBE, g)}
    include = ctx.api_version >= 3 and request.include_authorized_operations

    def merge(answer: DescribeGroupsResponse) -> Response:
        by_id = {g.group_id: g for g in answer.groups}
        merged = []
        for name in names:
            if name in refused:
                merged.append(
                    DescribeGroupsResponse.DescribedGroup(error_code=_GAF, group_id=name, members=[])
                )
                continue
            group = by_id[name]
            group.authorized_operations = operations(authz, ctx, ResourceType.GROUP, name, include)
            merged.append(group)
        answer.groups = merged
        return answer

    allowed = [g for g in names if g not in refused]
    if not allowed:
        return merge(DescribeGroupsResponse())
    request.groups = allowed
    return then(forward(request), DescribeGroupsResponse, merge)


def _consumer_group_describe(
    authz: Authz, ctx: RequestContext, request: ConsumerGroupDescribeRequest, forward: _Forward
) -> Answer:
    names = list(request.group_ids)
    refused = {g for g in names if not group_allowed(authz, ctx, AclOperation.DESCRIBE, g)}
    include = request.include_authorized_operations

    def merge(answer: ConsumerGroupDescribeResponse) -> Response:
        by_id = {g.group_id: g for g in answer.groups}
        merged = []
        for name in names:
            if name in refused:
                merged.append(
                    ConsumerGroupDescribeResponse.DescribedGroup(error_code=_GAF, group_id=name, members=[])
                )
                continue
            group = by_id[name]
            group.authorized_operations = operations(authz, ctx, ResourceType.GROUP, name, include)
            merged.append(group)
        answer.groups = merged
        return answer

    allowed = [g for g in names if g not in refused]
    if not allowed:
        return merge(ConsumerGroupDescribeResponse())
    request.group_ids = allowed
    return then(forward(request), ConsumerGroupDescribeResponse, merge)
