"""The share coordinator's inter-broker APIs (KIP-932): ReadShareGroupState (84), WriteShareGroupState
(85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87), v0, sent by share-partition leaders on other brokers
(:class:`~tidelog.server.share_persister.SharePersister`) and served by this broker's
:class:`~tidelog.server.share_state_runtime.ShareStateRuntime` (NOT_COORDINATOR for a group whose
``__share_group_state`` partition this broker does not lead; a write is answered once committed).

Authorization (Kafka's): CLUSTER_ACTION on the cluster, brokers only; else every partition of the request
gets CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.security.acl import AclOperation
from tidelog.server.share_state_runtime import ShareStateRuntime

from .authz import Authz, cluster_allowed

__all__ = ["ShareStateHandler"]


class ShareStateHandler:
    def __init__(self, states: ShareStateRuntime, authz: Authz = None) -> None:
        self._states = states
        self._authz = authz

    def handle(
        self,
        ctx: RequestContext,
        request: ReadShareGroupStateRequest
        | WriteShareGroupStateRequest
        | DeleteShareGroupStateRequest
        | ReadShareGroupStateSummaryRequest,
    ) -> Answer:
        if not cluster_allowed(self._authz, ctx, AclOperation.CLUSTER_ACTION):
            return self._states.coordinator.error_response(
                request, ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
        return self._states.handle_request(request, ctx.api_version, client_id=ctx.client_id or "")
