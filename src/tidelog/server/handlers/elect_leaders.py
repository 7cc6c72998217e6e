"""ElectLeaders (key 43, KIP-460): an operator asks the controller to move leadership back to each
partition's preferred replica (PREFERRED), or to elect a live replica outside the ISR where no ISR member
is alive (UNCLEAN, only on this explicit request). Kafka's ``KafkaApis.handleElectLeaders`` in ZooKeeper
mode; admin clients send it to the controller.

Invariants:

- Only the active controller decides; any other cluster broker answers NOT_CONTROLLER for every
  partition (v0) or as the top-level error (v1+), and the client looks the controller up again.
- A standalone broker (no ZooKeeper, so no controller) has one replica per partition, which leads it:
  every partition it has is ELECTION_NOT_NEEDED, any other UNKNOWN_TOPIC_OR_PARTITION.
- Without ALTER on the cluster: CLUSTER_AUTHORIZATION_FAILED for every partition, nothing elected.
- ``topic_partitions`` null means every partition the controller knows; then, as in Kafka, partitions
  whose leader is already the one the election would choose (ELECTION_NOT_NEEDED) are left out of the
  answer.
- The answer comes once the controller has written each new leader to the partition's state znode (the
  decision is durable there); brokers apply it from their watches, so a client may briefly still see the
  old leader and retries on NOT_LEADER_OR_FOLLOWER as after any election.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import ElectLeadersRequest, ElectLeadersResponse
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.server.cluster.controller import Controller, ElectionType
from tidelog.server.dispatch import RequestContext
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.security.acl import AclOperation

from .authz import Authz, cluster_allowed

__all__ = ["ElectLeadersHandler"]

_Result = tuple[int, str | None]
"""A partition's error code and message."""


class ElectLeadersHandler:
    """ElectLeaders, served by this broker's controller when it is the active one."""

    def __init__(
        self, controller: Callable[[], Controller | None], metadata: MetadataCache, authz: Authz = None
    ) -> None:
        self._controller = controller
        self._metadata = metadata
        self._authz = authz

    async def handle(self, ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
        asked = _requested(request)
        try:
            election_type = ElectionType(request.election_type if ctx.api_version >= 1 else 0)
        except ValueError:
            return _everywhere(ctx, asked, ErrorCode.INVALID_REQUEST, "Unknown election type")
        if not cluster_allowed(self._authz, ctx, AclOperation.ALTER):
            return _everywhere(ctx, asked, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        controller = self._controller()
        if controller is None:
            return self._standalone(asked)
        if not controller.is_active:
            return _everywhere(ctx, asked, ErrorCode.NOT_CONTROLLER, "This broker is not the controller")
        partitions = asked if asked is not None else controller.context.partitions()
        try:
            decided = await controller.elect_leaders(partitions, election_type)
        except KafkaProtocolError as exc:
            return _everywhere(ctx, partitions, exc.error_code, str(exc))
        results = {tp: _result(outcome) for tp, outcome in decided.items()}
        if asked is None:
            results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
        return _response(results)

    def _standalone(self, asked: list[TopicPartition] | None) -> ElectLeadersResponse:
        if asked is None:
            return _response({})  # every partition is led by its only replica: nothing to report
        results: dict[TopicPartition, _Result] = {}
        for tp in asked:
            if self._metadata.has_partition(tp.topic, tp.partition):
                results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "The only replica already leads the partition.")
            else:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The partition {tp} does not exist.")
        return _response(results)


def _requested(request: ElectLeadersRequest) -> list[TopicPartition] | None:
    if request.topic_partitions is None:
        return None
    return [
        TopicPartition(entry.topic, partition)
        for entry in request.topic_partitions
        for partition in entry.partitions
    ]


def _result(outcome: LeaderAndIsr | KafkaProtocolError) -> _Result:
    if isinstance(outcome, KafkaProtocolError):
        return outcome.error_code, str(outcome)
    return ErrorCode.NONE, None


def _everywhere(
    ctx: RequestContext, partitions: Iterable[TopicPartition] | None, error: int, message: str | None
) -> ElectLeadersResponse:
    """One error for the whole request: top-level from v1 (and per partition, as Kafka fills both)."""
    response = _response(dict.fromkeys(partitions or (), (error, message)))
    if ctx.api_version >= 1:
        response.error_code = error
    return response


def _response(results: dict[TopicPartition, _Result]) -> ElectLeadersResponse:
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for tp in sorted(results):
        error, message = results[tp]
        by_topic.setdefault(tp.topic, []).append(
            ElectLeadersResponse.PartitionResult(
                partition_id=tp.partition, error_code=error, error_message=message
            )
        )
    return ElectLeadersResponse(
        error_code=ErrorCode.NONE,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=topic, partition_result=parts)
            for topic, parts in by_topic.items()
        ],
    )
