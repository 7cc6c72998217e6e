"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), KIP-455: an operator moves
partitions' replicas between brokers, or cancels a move, and lists the moves in progress. Kafka's
``KafkaApis`` in ZooKeeper mode: admin clients send both to the controller, which does the work
(:mod:`tidelog.server.cluster.reassignments`).

Invariants:

- Only the active controller answers; any other cluster broker answers NOT_CONTROLLER as the top-level
  error (every partition too, for Alter), and the client looks the controller up again.
- Without ALTER (Alter) / DESCRIBE (List) on the cluster: CLUSTER_AUTHORIZATION_FAILED, nothing done.
- Alter answers per partition once the controller has written the move (or the cancellation) to the topic
  znode: the move itself goes on in the background (ListPartitionReassignments shows it until done).
- List with null ``topics`` lists every move in progress; named partitions that are not moving are left
  out (Kafka's answer).
- A standalone broker (no ZooKeeper, no controller) has one replica per partition and nowhere to move
  it: a target of that broker alone is accepted (nothing to do), any other is INVALID_REPLICA_ASSIGNMENT,
  a cancellation NO_REASSIGNMENT_IN_PROGRESS; List is always empty.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from tidelog.server.cluster.controller import Controller
from tidelog.server.dispatch import RequestContext
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.security.acl import AclOperation

from .authz import Authz, cluster_allowed

__all__ = ["ReassignmentsHandler"]

_Result = tuple[int, str | None]
"""A partition's error code and message."""
_NOT_CONTROLLER = "This broker is not the controller"


class ReassignmentsHandler:
    """Both reassignment APIs, served by this broker's controller when it is the active one."""

    def __init__(
        self, controller: Callable[[], Controller | None], metadata: MetadataCache, authz: Authz = None
    ) -> None:
        self._controller = controller
        self._metadata = metadata
        self._authz = authz

    async def alter(
        self, ctx: RequestContext, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        wanted = {
            TopicPartition(topic.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
            for topic in request.topics
            for p in topic.partitions
        }
        if not cluster_allowed(self._authz, ctx, AclOperation.ALTER):
            return _altered(dict.fromkeys(wanted, (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)))
        controller = self._controller()
        if controller is None:
            return _altered({tp: self._standalone(tp, target) for tp, target in wanted.items()})
        if not controller.is_active:
            refused = (int(ErrorCode.NOT_CONTROLLER), _NOT_CONTROLLER)
            return _altered(dict.fromkeys(wanted, refused), top=refused)
        try:
            outcome = await controller.alter_partition_reassignments(wanted)
        except KafkaProtocolError as exc:
            failed = (int(exc.error_code), str(exc))
            return _altered(dict.fromkeys(wanted, failed), top=failed)
        return _altered(
            {
                tp: (ErrorCode.NONE, None) if error is None else (error.error_code, str(error))
                for tp, error in outcome.items()
            }
        )

    def _standalone(self, tp: TopicPartition, target: tuple[int, ...] | None) -> _Result:
        if not self._metadata.has_partition(tp.topic, tp.partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
        if target is None:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No reassignment in progress for partition {tp}."
        live = sorted(b.node_id for b in self._metadata.brokers())
        if list(target) == live:
            return ErrorCode.NONE, None
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            (
                f"Replica assignment has brokers that are not alive. Replica list: {list(target)}, "
                f"live broker list: {live}"
            ),
        )

    async def list(
        self, ctx: RequestContext, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        if not cluster_allowed(self._authz, ctx, AclOperation.DESCRIBE):
            return ListPartitionReassignmentsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        controller = self._controller()
        if controller is None:
            return ListPartitionReassignmentsResponse()
        if not controller.is_active:
            return ListPartitionReassignmentsResponse(
                error_code=ErrorCode.NOT_CONTROLLER, error_message=_NOT_CONTROLLER
            )
        asked = (
            None
            if request.topics is None
            else [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
        )
        try:
            moving = await controller.list_partition_reassignments(asked)
        except KafkaProtocolError as exc:
            return ListPartitionReassignmentsResponse(error_code=exc.error_code, error_message=str(exc))
        by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
        for tp, reassignment in sorted(moving.items()):
            by_topic.setdefault(tp.topic, []).append(
                ListPartitionReassignmentsResponse.OngoingPartitionReassignment(
                    partition_index=tp.partition,
                    replicas=list(reassignment.replicas),
                    adding_replicas=list(reassignment.adding),
                    removing_replicas=list(reassignment.removing),
                )
            )
        return ListPartitionReassignmentsResponse(
            error_message=None,
            topics=[
                ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=name, partitions=partitions)
                for name, partitions in by_topic.items()
            ],
        )


def _altered(
    results: dict[TopicPartition, _Result], *, top: _Result | None = None
) -> AlterPartitionReassignmentsResponse:
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for tp in sorted(results):
        error, message = results[tp]
        by_topic.setdefault(tp.topic, []).append(
            AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                partition_index=tp.partition, error_code=error, error_message=message
            )
        )
    response = AlterPartitionReassignmentsResponse(
        error_message=None,
        responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=name, partitions=partitions)
            for name, partitions in by_topic.items()
        ],
    )
    if top is not None:
        response.error_code, response.error_message = top
    return response
