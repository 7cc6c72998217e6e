"""ControlledShutdown (key 7): a broker about to stop asks the controller to move its leaderships away
(Kafka's ``KafkaApis.handleControlledShutdownRequest``), so a rolling restart loses no availability.

Invariants: only the active controller answers (any other broker: NOT_CONTROLLER, the sender looks the
controller up again); a request from an earlier life of the broker (a stale broker epoch, v2+) is
STALE_BROKER_EPOCH, from a broker that is not registered BROKER_NOT_AVAILABLE; the answer lists the
partitions the broker still leads (those with no other ISR member to take over).
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import ControlledShutdownRequest, ControlledShutdownResponse
from tidelog.server.cluster.controller import Controller
from tidelog.server.dispatch import RequestContext
from tidelog.server.security.acl import AclOperation

from .authz import Authz, cluster_allowed

__all__ = ["ControlledShutdownHandler"]


class ControlledShutdownHandler:
    """ControlledShutdown, served by this broker's controller when it is the active one."""

    def __init__(self, controller: Callable[[], Controller | None], authz: Authz = None) -> None:
        self._controller = controller
        self._authz = authz

    async def handle(
        self, ctx: RequestContext, request: ControlledShutdownRequest
    ) -> ControlledShutdownResponse:
        if not cluster_allowed(self._authz, ctx, AclOperation.CLUSTER_ACTION):
            return ControlledShutdownResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        controller = self._controller()
        if controller is None or not controller.is_active:
            return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
        broker_epoch = request.broker_epoch if ctx.api_version >= 2 else -1
        try:
            remaining = await controller.controlled_shutdown(request.broker_id, broker_epoch)
        except KafkaProtocolError as exc:
            return ControlledShutdownResponse(error_code=exc.error_code)
        return ControlledShutdownResponse(
            error_code=ErrorCode.NONE,
            remaining_partitions=[
                ControlledShutdownResponse.RemainingPartition(
                    topic_name=tp.topic, partition_index=tp.partition
                )
                for tp in sorted(remaining)
            ],
        )
