"""Share groups in a cluster (KIP-932's split of roles): which broker serves which share-group request.

Invariants:
- ShareGroupHeartbeat and ShareGroupDescribe are served by the group coordinator only: the broker leading
  the group's ``__consumer_offsets`` partition (``partition_for(group_id)``, what FindCoordinator with key
  type GROUP answers, as for consumer groups); every other broker answers NOT_COORDINATOR (per group for
  ShareGroupDescribe), so the client looks the coordinator up again.
- ShareFetch and ShareAcknowledge are served by each partition's leader (the share-partition leader); a
  partition this broker does not lead is answered NOT_LEADER_OR_FOLLOWER by the share runtime, and here
  gets the current leader (id and leader epoch) and its endpoint on the request's listener, so the client
  re-routes without a metadata round trip.
- Before a ShareFetch or ShareAcknowledge is served, the state of every share-partition it names (a
  ShareFetch in an open share session: its session's too) that this broker leads and has not loaded is read from the share coordinator
  (:class:`~tidelog.server.share_persister.SharePersister`), so the runtime starts from what is persisted.
- A share group whose ``__consumer_offsets`` partition changes leadership on this broker is dropped, so a
  broker that coordinated it once never expires live members from a stale copy; the next coordinator
  adopts it from the partition once loaded (:mod:`tidelog.server.share_membership`).
- A share-partition whose leadership changes on this broker (lost, or gained at a new leader epoch; not
  the same leader going on at the next epoch, the controller's ISR removal, which the replica manager does
  not report) is dropped from the runtime at once (acquisitions are not persisted: they lapse with the leader; the next
  leader loads the persisted state), together with any state loaded for it.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable

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
from tidelog.protocol.schema import Response
from tidelog.replication.partition import Partition
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.group_runtime import GroupRuntime
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.share_persister import SharePersister, StateKey
from tidelog.server.share_runtime import ShareRuntime

__all__ = ["ShareRouting"]

_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


class ShareRouting:
    """The cluster's routing rules in front of one broker's :class:`ShareRuntime`."""

    def __init__(
        self,
        *,
        runtime: ShareRuntime,
        groups: GroupRuntime,
        persister: SharePersister,
        metadata: MetadataCache,
        replicas: ReplicaManager,
    ) -> None:
        self._runtime = runtime
        self._groups = groups
        self._persister = persister
        self._metadata = metadata
        self._replicas = replicas
        replicas.add_leadership_listener(self._on_leadership)

    @property
    def persister(self) -> SharePersister:
        return self._persister

    # -- the group coordinator -------------------------------------------------------------------------

    def is_coordinator(self, group_id: str) -> bool:
        led = self._replicas.leader_partition(self._groups.topic, self._groups.partition_for(group_id))
        return not isinstance(led, ErrorCode)

    def heartbeat(
        self,
        ctx: RequestContext,
        request: ShareGroupHeartbeatRequest,
        serve: Callable[[RequestContext, ShareGroupHeartbeatRequest], Answer],
    ) -> Answer:
        if request.group_id and not self.is_coordinator(request.group_id):
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR)
        return serve(ctx, request)

    def describe(
        self,
        request: ShareGroupDescribeRequest,
        serve: Callable[[ShareGroupDescribeRequest], ShareGroupDescribeResponse],
    ) -> ShareGroupDescribeResponse:
        mine = [g for g in request.group_ids if self.is_coordinator(g)]
        response = serve(ShareGroupDescribeRequest(group_ids=mine))
        by_id = {g.group_id: g for g in response.groups}
        response.groups = [
            by_id.get(g)
            or ShareGroupDescribeResponse.DescribedGroup(group_id=g, error_code=ErrorCode.NOT_COORDINATOR)
            for g in request.group_ids
        ]
        return response

    # -- share-partition leaders -----------------------------------------------------------------------

    def fetch(
        self, ctx: RequestContext, request: ShareFetchRequest, serve: Callable[[ShareFetchRequest], Answer]
    ) -> Answer:
        named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
        if request.share_session_epoch > 0:  # an incremental request: the session's partitions too
            named += self._runtime.session_partitions(request.group_id or "", request.member_id or "")
        return self._serve(ctx, request.group_id or "", named, lambda: serve(request))

    def acknowledge(
        self,
        ctx: RequestContext,
        request: ShareAcknowledgeRequest,
        serve: Callable[[ShareAcknowledgeRequest], Answer],
    ) -> Answer:
        named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
        return self._serve(ctx, request.group_id or "", named, lambda: serve(request))

    def _serve(
        self,
        ctx: RequestContext,
        group_id: str,
        named: list[tuple[uuid.UUID, int]],
        serve: Callable[[], Answer],
    ) -> Answer:
        missing: list[StateKey] = []
        for topic_id, index in named:
            name = self._metadata.topic_name(topic_id)
            if name is None or (group_id, name, index) in self._runtime.partitions:
                continue
            if isinstance(self._replicas.leader_partition(name, index), ErrorCode):
                continue
            key = (group_id, topic_id, index)
            if not self._persister.is_loaded(key):
                missing.append(key)
        if not missing:
            return self._with_leaders(ctx, serve())

        async def loaded_first() -> Response:
            await self._persister.load(missing)
            answer = serve()
            response = answer if isinstance(answer, Response) else await answer
            return self._leaders(ctx, response)

        return loaded_first()

    def _with_leaders(self, ctx: RequestContext, answer: Answer) -> Answer:
        if isinstance(answer, Response):
            return self._leaders(ctx, answer)
        if not inspect.isawaitable(answer):
            return answer

        async def then() -> Response:
            return self._leaders(ctx, await answer)

        return then()

    def _leaders(self, ctx: RequestContext, response: Response) -> Response:
        """Each partition answered NOT_LEADER_OR_FOLLOWER gets its current leader, and the response the
        leader's endpoint on the request's listener."""
        if not isinstance(response, ShareFetchResponse | ShareAcknowledgeResponse):
            return response
        endpoints: dict[int, tuple[str, int, str | None]] = {}
        for topic in response.responses:
            name = self._metadata.topic_name(topic.topic_id)
            for p in topic.partitions:
                if p.error_code not in _MOVED or name is None:
                    continue
                info = self._metadata.partition(name, p.partition_index)
                if info is None or not info.has_leader:
                    continue
                p.current_leader.leader_id = info.leader
                p.current_leader.leader_epoch = info.leader_epoch
                broker = self._metadata.broker(info.leader)
                endpoint = broker.endpoint(ctx.listener_name) if broker is not None else None
                if endpoint is not None and broker is not None:
                    endpoints[info.leader] = (endpoint.host, endpoint.port, broker.rack)
        known = {e.node_id for e in response.node_endpoints}
        for node_id, (host, port, rack) in sorted(endpoints.items()):
            if node_id in known:
                continue
            if isinstance(response, ShareFetchResponse):
                response.node_endpoints.append(
                    ShareFetchResponse.NodeEndpoint(node_id=node_id, host=host, port=port, rack=rack)
                )
            else:
                response.node_endpoints.append(
                    ShareAcknowledgeResponse.NodeEndpoint(node_id=node_id, host=host, port=port, rack=rack)
                )
        return response

    # -- leadership changes ----------------------------------------------------------------------------

    def _on_leadership(self, partition: Partition, is_leader: bool) -> None:
        del is_leader  # gained (at a new epoch) or lost: what this broker holds may be stale either way
        if partition.topic == self._groups.topic:
            for group_id in [
                g for g in self._runtime.groups if self._groups.partition_for(g) == partition.index
            ]:
                del self._runtime.groups[group_id]
            return
        info = self._metadata.topic(partition.topic)
        if info is None or info.is_internal:
            return
        self._runtime.drop_partition(partition.topic, partition.index)
        self._persister.forget(info.topic_id, partition.index)
