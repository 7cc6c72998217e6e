"""Share-group administration: DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and
DeleteShareGroupOffsets (92) passed to :class:`~tidelog.server.share_admin.ShareAdmin`; share groups added
to ListGroups and DeleteGroups; group ids kept apart between share groups and classic / consumer groups
(ShareGroupHeartbeat is checked here before :class:`~.share.ShareHandler` sees it); ShareGroupDescribe
answers a group known only from its persisted state as Empty.

Versions: v0 of 90-92, the schemas in tools/kip932_admin_specs.py (Kafka 4.1's).

Authorization (Kafka's ``KafkaApis``): DescribeShareGroupOffsets needs DESCRIBE on the group (else the group
is GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each topic asked for (else TOPIC_AUTHORIZATION_FAILED per
partition; when all topics are asked for, topics it may not describe are left out); AlterShareGroupOffsets
READ on the group and on each topic; DeleteShareGroupOffsets DELETE on the group and READ on each topic.
ListGroups and DeleteGroups keep their checks (``group_authz.py``), which run before the share groups are
added here, so a share group is listed and deleted under the same ACLs as any other group.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.protocol.share_pending import PENDING_TAG
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.security.acl import AclOperation
from tidelog.server.share_admin import ShareAdmin, Summary

from .answers import then
from .authz import Authz, group_allowed, topic_allowed
from .share import ShareHandler

__all__ = ["GroupForward", "ShareAdminHandler", "ShareAwareGroups"]

_GAF = ErrorCode.GROUP_AUTHORIZATION_FAILED
_TAF = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_Described = DescribeShareGroupOffsetsResponse


class GroupForward(Protocol):
    """Where the group APIs go once authorized (the group runtime, or :class:`ShareAwareGroups`)."""

    def handle(self, ctx: RequestContext, request: Request) -> Answer: ...


class ShareAwareGroups:
    """The group runtime's ``handle`` with share groups in ListGroups and DeleteGroups, and the group-id
    rules between group types."""

    def __init__(self, groups: GroupForward, admin: ShareAdmin) -> None:
        self._groups = groups
        self._admin = admin

    def handle(self, ctx: RequestContext, request: Request) -> Answer:
        if isinstance(request, ListGroupsRequest):
            shares = self._admin.listed(request.states_filter, request.types_filter)

            def add(answer: ListGroupsResponse) -> Response:
                answer.groups.extend(shares)
                return answer

            return then(self._groups.handle(ctx, request), ListGroupsResponse, add)
        if isinstance(request, DeleteGroupsRequest):
            unknown = self._admin.unknown(request.groups_names)
            if not unknown:
                return self._delete_groups(ctx, request)

            async def learned() -> Response:  # in a cluster: does the share coordinator hold their state?
                await self._admin.summaries(unknown)
                answer = self._delete_groups(ctx, request)
                return answer if isinstance(answer, Response) else await answer

            return learned()
        if isinstance(request, JoinGroupRequest) and self._admin.is_share_group(request.group_id):
            return JoinGroupResponse(
                error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                generation_id=-1,
                protocol_name=None if ctx.api_version >= 7 else "",
                leader="",
                member_id="",
            )
        if isinstance(request, ConsumerGroupHeartbeatRequest) and self._admin.is_share_group(
            request.group_id
        ):
            return ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"Group {request.group_id} is not a consumer group.",
            )
        if isinstance(request, OffsetCommitRequest) and self._admin.is_share_group(request.group_id):
            return (
                OffsetCommitResponse(  # else a commit would create a classic group under a share group's id
                    topics=[
                        OffsetCommitResponse.OffsetCommitResponseTopic(
                            name=t.name,
                            partitions=[
                                OffsetCommitResponse.OffsetCommitResponsePartition(
                                    partition_index=p.partition_index, error_code=ErrorCode.GROUP_ID_NOT_FOUND
                                )
                                for p in t.partitions
                            ],
                        )
                        for t in request.topics
                    ]
                )
            )
        return self._groups.handle(ctx, request)

    def _delete_groups(self, ctx: RequestContext, request: DeleteGroupsRequest) -> Answer:
        writes: list[Awaitable[Response]] = []
        shared: dict[str, int] = {}
        for group_id in request.groups_names:
            if self._admin.is_share_group(group_id) and not self._admin.is_other_group(group_id):
                shared[group_id] = self._admin.delete_group(group_id, writes)
        rest = [g for g in request.groups_names if g not in shared]

        def merge(answer: DeleteGroupsResponse | None) -> Response:
            results = {r.group_id: r.error_code for r in answer.results} if answer is not None else {}
            results.update(shared)
            return DeleteGroupsResponse(
                throttle_time_ms=answer.throttle_time_ms if answer is not None else 0,
                results=[
                    DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g])
                    for g in request.groups_names
                ],
            )

        if rest:
            forwarded = self._groups.handle(ctx, DeleteGroupsRequest(groups_names=rest))
            answer = then(forwarded, DeleteGroupsResponse, merge)
        else:
            answer = merge(None)
        if not writes:
            return answer

        async def after() -> Response:
            for write in writes:
                await write
            return answer if isinstance(answer, Response) else await answer

        return after()


class ShareAdminHandler:
    def __init__(self, admin: ShareAdmin, share: ShareHandler, authz: Authz = None) -> None:
        self._admin = admin
        self._share = share
        self._authz = authz

    def heartbeat(self, ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> Answer:
        """ShareGroupHeartbeat, refused for a group id that a classic or consumer group holds."""
        if (
            request.group_id
            and group_allowed(self._authz, ctx, AclOperation.READ, request.group_id)
            and self._admin.is_other_group(request.group_id)
        ):
            return ShareGroupHeartbeatResponse(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"Group {request.group_id} is not a share group.",
            )
        return self._share.heartbeat(ctx, request)

    def describe(self, ctx: RequestContext, request: ShareGroupDescribeRequest) -> Answer:
        """ShareGroupDescribe; a group the runtime has not met since the broker started but whose state is
        persisted is an Empty group (as ListGroups shows it), not GROUP_ID_NOT_FOUND."""
        unknown = self._admin.unknown(request.group_ids)
        if not unknown:
            return self._describe(ctx, request)

        async def learned() -> Response:  # in a cluster: does the share coordinator hold their state?
            await self._admin.summaries(unknown)
            return self._describe(ctx, request)

        return learned()

    def _describe(
        self, ctx: RequestContext, request: ShareGroupDescribeRequest
    ) -> ShareGroupDescribeResponse:
        response = self._share.describe(ctx, request)
        for i, group in enumerate(response.groups):
            if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND and self._admin.is_share_group(
                group.group_id
            ):
                response.groups[i] = ShareGroupDescribeResponse.DescribedGroup(
                    group_id=group.group_id, group_state="Empty", assignor_name="simple"
                )
        return response

    def describe_offsets(self, ctx: RequestContext, request: DescribeShareGroupOffsetsRequest) -> Answer:
        allowed = []
        denied: dict[str, set[str]] = {}
        for group in request.groups:
            if not group_allowed(self._authz, ctx, AclOperation.DESCRIBE, group.group_id):
                continue
            if group.topics is not None:
                denied[group.group_id] = {
                    t.topic_name
                    for t in group.topics
                    if not topic_allowed(self._authz, ctx, AclOperation.DESCRIBE, t.topic_name)
                }
            allowed.append(group)
        wanted = [
            g.group_id
            for g in allowed
            if not (g.unknown_tagged_fields and PENDING_TAG in g.unknown_tagged_fields)
        ]
        if not self._admin.in_cluster or not wanted:
            return self._described(ctx, request, allowed, denied, None)

        async def summarized() -> Response:  # the start offsets, from the share coordinator
            summaries = await self._admin.summaries(wanted)
            return self._described(ctx, request, allowed, denied, summaries)

        return summarized()

    def _described(
        self,
        ctx: RequestContext,
        request: DescribeShareGroupOffsetsRequest,
        allowed: list[DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup],
        denied: dict[str, set[str]],
        summaries: dict[str, Summary] | None,
    ) -> Response:
        answered = {
            g.group_id: g
            for g in self._admin.describe_offsets(
                DescribeShareGroupOffsetsRequest(groups=allowed), summaries
            ).groups
        }
        response = _Described()
        for group in request.groups:
            found = answered.get(group.group_id)
            if found is None:
                response.groups.append(
                    _Described.DescribeShareGroupOffsetsResponseGroup(
                        group_id=group.group_id, error_code=_GAF
                    )
                )
                continue
            refused = denied.get(group.group_id)
            if refused is None:  # all topics: those it may not describe are left out
                found.topics = [
                    t
                    for t in found.topics
                    if topic_allowed(self._authz, ctx, AclOperation.DESCRIBE, t.topic_name)
                ]
            else:
                for topic in found.topics:
                    if topic.topic_name in refused:
                        for p in topic.partitions:
                            p.error_code, p.start_offset, p.leader_epoch = _TAF, -1, -1
                            p.unknown_tagged_fields = None
            response.groups.append(found)
        return response

    def alter_offsets(self, ctx: RequestContext, request: AlterShareGroupOffsetsRequest) -> Answer:
        if not group_allowed(self._authz, ctx, AclOperation.READ, request.group_id):
            return _alter_errors(request, _GAF)
        denied = [
            t for t in request.topics if not topic_allowed(self._authz, ctx, AclOperation.READ, t.topic_name)
        ]
        if not denied:
            return self._admin.alter_offsets(request)
        kept = AlterShareGroupOffsetsRequest(
            group_id=request.group_id, topics=[t for t in request.topics if t not in denied]
        )

        def merge(answer: AlterShareGroupOffsetsResponse) -> Response:
            refused = _alter_errors(
                AlterShareGroupOffsetsRequest(group_id=request.group_id, topics=denied), _TAF
            )
            by_name = {t.topic_name: t for t in [*answer.responses, *refused.responses]}
            answer.responses = [by_name[t.topic_name] for t in request.topics]
            return answer

        return then(self._admin.alter_offsets(kept), AlterShareGroupOffsetsResponse, merge)

    def delete_offsets(self, ctx: RequestContext, request: DeleteShareGroupOffsetsRequest) -> Answer:
        if not group_allowed(self._authz, ctx, AclOperation.DELETE, request.group_id):
            return DeleteShareGroupOffsetsResponse(error_code=_GAF)
        denied = {
            t.topic_name
            for t in request.topics
            if not topic_allowed(self._authz, ctx, AclOperation.READ, t.topic_name)
        }
        if not denied:
            return self._admin.delete_offsets(request)
        kept = DeleteShareGroupOffsetsRequest(
            group_id=request.group_id, topics=[t for t in request.topics if t.topic_name not in denied]
        )

        def merge(answer: DeleteShareGroupOffsetsResponse) -> Response:
            if answer.error_code != ErrorCode.NONE:
                return answer
            by_name = {t.topic_name: t for t in answer.responses}
            answer.responses = [
                by_name.get(t.topic_name)
                or DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, error_code=_TAF
                )
                for t in request.topics
            ]
            return answer

        return then(self._admin.delete_offsets(kept), DeleteShareGroupOffsetsResponse, merge)


def _alter_errors(request: AlterShareGroupOffsetsRequest, error: ErrorCode) -> AlterShareGroupOffsetsResponse:
    return AlterShareGroupOffsetsResponse(
        error_code=error if error == _GAF else ErrorCode.NONE,
        responses=[
            AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                partitions=[
                    AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
