"""FindCoordinator (key 10), v0-6: which broker coordinates a group (or a transactional id).

Invariants:
- This broker leads every partition, so it is the coordinator of every group: a GROUP key (type 0; the
  only type of v0) is answered with this broker's node id and its advertised address on the listener the
  request came in on, after creating ``__consumer_offsets`` if it does not exist yet (as Kafka creates it
  on the first lookup).
- A TRANSACTION key (type 1) is answered the same way, after creating ``__transaction_state`` if it does
  not exist yet (on a single node this broker leads every partition ``partition_for(key)`` names).
- A SHARE key (type 2; share groups are not served) and unknown key types get INVALID_REQUEST.
- v0-3 carry one key and answer at the top level; v4+ carry ``coordinator_keys`` and answer one
  ``Coordinator`` per key, in request order. A failed lookup names node -1, host "" and port -1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext

__all__ = ["handle_find_coordinator"]

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2


def _lookup(
    broker: Broker, ctx: RequestContext, key_type: int
) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, error message, node id, host, port) for one key of ``key_type``."""
    if key_type == GROUP_KEY_TYPE:
        broker.groups.ensure_offsets_topic()
        host, port = broker.advertised_host_port(ctx.listener_name)
        return ErrorCode.NONE, None, broker.node_id, host, port
    if key_type == TRANSACTION_KEY_TYPE:
        broker.transactions.ensure_state_topic()
        host, port = broker.advertised_host_port(ctx.listener_name)
        return ErrorCode.NONE, None, broker.node_id, host, port
    if key_type == SHARE_KEY_TYPE:
        return ErrorCode.INVALID_REQUEST, "Share groups are not enabled on this broker.", -1, "", -1
    return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type received: {key_type}", -1, "", -1


def handle_find_coordinator(
    broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    key_type = request.key_type if ctx.api_version >= 1 else GROUP_KEY_TYPE
    if ctx.api_version < 4:
        error, message, node_id, host, port = _lookup(broker, ctx, key_type)
        return FindCoordinatorResponse(
            error_code=error, error_message=message, node_id=node_id, host=host, port=port
        )
    response = FindCoordinatorResponse()
    for key in request.coordinator_keys:
        error, message, node_id, host, port = _lookup(broker, ctx, key_type)
        response.coordinators.append(
            FindCoordinatorResponse.Coordinator(
                key=key, node_id=node_id, host=host, port=port, error_code=error, error_message=message
            )
        )
    return response
