"""FindCoordinator (key 10), v0-6: which broker coordinates a group (or a transactional id).

Invariants:
- The coordinator of a key is the leader of its partition of the coordinator's internal topic (Kafka's
  rule): ``__consumer_offsets`` for a GROUP key (type 0; the only type of v0), ``__transaction_state`` for a
  TRANSACTION key (type 1). The internal topic is created on the first lookup (as Kafka creates it). The
  leader is read from the metadata cache and described by its endpoint on the listener the request came
  in on; a partition without a live leader (or a leader without that listener) is
  COORDINATOR_NOT_AVAILABLE, which clients retry.
- A SHARE key (type 2; share groups are not served) and unknown key types get INVALID_REQUEST.
- v0-3 carry one key and answer at the top level; v4+ carry ``coordinator_keys`` and answer one
  ``Coordinator`` per key, in request order. A failed lookup names node -1, host "" and port -1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from tidelog.server.dispatch import RequestContext
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.security.acl import AclOperation

from .authz import Authz, group_allowed, txn_allowed

__all__ = ["CoordinatorLookup", "FindCoordinatorHandler"]

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2

_Answer = tuple[ErrorCode, str | None, int, str, int]
"""(error, error message, node id, host, port) for one key."""


@dataclass(frozen=True, slots=True)
class CoordinatorLookup:
    """How keys of one type map to a partition of its coordinator's internal topic."""

    ensure_topic: Callable[[], TopicInfo | None]
    partition_for: Callable[[str], int]


class FindCoordinatorHandler:
    """FindCoordinator from the metadata cache; ``lookups`` by key type."""

    def __init__(
        self, metadata: MetadataCache, lookups: dict[int, CoordinatorLookup], authz: Authz = None
    ) -> None:
        self._metadata = metadata
        self._lookups = lookups
        self._authz = authz

    def _lookup(self, ctx: RequestContext, key_type: int, key: str) -> _Answer:
        """Kafka's checks first: DESCRIBE on the group / transactional id the key names."""
        if key_type == GROUP_KEY_TYPE and not group_allowed(self._authz, ctx, AclOperation.DESCRIBE, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
        if key_type == TRANSACTION_KEY_TYPE and not txn_allowed(self._authz, ctx, AclOperation.DESCRIBE, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
        lookup = self._lookups.get(key_type)
        if lookup is None:
            if key_type == SHARE_KEY_TYPE:
                return ErrorCode.INVALID_REQUEST, "Share groups are not enabled on this broker.", -1, "", -1
            return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type received: {key_type}", -1, "", -1
        topic = lookup.ensure_topic()
        partition = topic.partition(lookup.partition_for(key)) if topic is not None else None
        broker = self._metadata.broker(partition.leader) if partition is not None else None
        endpoint = broker.endpoint(ctx.listener_name) if broker is not None else None
        if partition is None or endpoint is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
        return ErrorCode.NONE, None, partition.leader, endpoint.host, endpoint.port

    def handle(self, ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        key_type = request.key_type if ctx.api_version >= 1 else GROUP_KEY_TYPE
        if ctx.api_version < 4:
            error, message, node_id, host, port = self._lookup(ctx, key_type, request.key)
            return FindCoordinatorResponse(
                error_code=error, error_message=message, node_id=node_id, host=host, port=port
            )
        response = FindCoordinatorResponse()
        for key in request.coordinator_keys:
            error, message, node_id, host, port = self._lookup(ctx, key_type, key)
            response.coordinators.append(
                FindCoordinatorResponse.Coordinator(
                    key=key, node_id=node_id, host=host, port=port, error_code=error, error_message=message
                )
            )
        return response
