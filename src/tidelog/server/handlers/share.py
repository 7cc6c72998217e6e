"""Share groups (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78) and
ShareAcknowledge (79), passed to the broker's :class:`~tidelog.server.share_runtime.ShareRuntime`.

Versions: librdkafka 2.16's ``ShareConsumer`` sends exactly v1 of 76/78/79 (ShareFetch v1 carries
MaxRecords and BatchSize); ShareGroupDescribe is v0.

In a cluster (given a :class:`~tidelog.server.share_routing.ShareRouting`) each request is first routed:
heartbeats and describes to the group coordinator, fetches and acknowledgements to partition leaders.

Authorization (Kafka's): ShareGroupHeartbeat, ShareFetch and ShareAcknowledge need READ on the group
(else GROUP_AUTHORIZATION_FAILED for the whole request); ShareGroupDescribe DESCRIBE on each group.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.security.acl import AclOperation
from tidelog.server.share_routing import ShareRouting
from tidelog.server.share_runtime import ShareRuntime

from .authz import Authz, group_allowed

__all__ = ["ShareHandler"]

_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ShareHandler:
    def __init__(
        self, runtime: ShareRuntime, authz: Authz = None, routing: ShareRouting | None = None
    ) -> None:
        self._runtime = runtime
        self._authz = authz
        self._routing = routing

    def heartbeat(self, ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> Answer:
        if not group_allowed(self._authz, ctx, AclOperation.READ, request.group_id):
            return ShareGroupHeartbeatResponse(error_code=_DENIED)
        if self._routing is not None:
            return self._routing.heartbeat(ctx, request, self._runtime.heartbeat)
        return self._runtime.heartbeat(ctx, request)

    def fetch(self, ctx: RequestContext, request: ShareFetchRequest) -> Answer:
        if not group_allowed(self._authz, ctx, AclOperation.READ, request.group_id or ""):
            return ShareFetchResponse(error_code=_DENIED)
        if self._routing is not None:
            return self._routing.fetch(ctx, request, self._runtime.fetch)
        return self._runtime.fetch(request)

    def acknowledge(self, ctx: RequestContext, request: ShareAcknowledgeRequest) -> Answer:
        if not group_allowed(self._authz, ctx, AclOperation.READ, request.group_id or ""):
            return ShareAcknowledgeResponse(error_code=_DENIED)
        if self._routing is not None:
            return self._routing.acknowledge(ctx, request, self._runtime.acknowledge)
        return self._runtime.acknowledge(request)

    def describe(self, ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
        allowed = [g for g in request.group_ids if group_allowed(self._authz, ctx, AclOperation.DESCRIBE, g)]
        allowed_request = ShareGroupDescribeRequest(group_ids=allowed)
        response = (
            self._runtime.describe(allowed_request)
            if self._routing is None
            else self._routing.describe(allowed_request, self._runtime.describe)
        )
        by_id = {g.group_id: g for g in response.groups}
        response.groups = [
            by_id.get(g) or ShareGroupDescribeResponse.DescribedGroup(group_id=g, error_code=_DENIED)
            for g in request.group_ids
        ]
        return response
