"""Metadata (key 3) and DescribeCluster (key 60): brokers, controller, topics, partitions, leaders.

Both answer from the :class:`~tidelog.server.metadata_cache.MetadataCache`. Brokers are described by their
endpoint on the listener the request came in on (Kafka's rule: a client only ever learns addresses it can
reach the way it reached this one); a broker without that listener is left out.

Invariants: the controller id is always a listed broker, or -1 when none is known (librdkafka's admin
client stalls on an unlisted one); a topic asked for by name that does not exist is created when the
request allows it and ``auto.create.topics.enable`` is on, and is otherwise answered with
UNKNOWN_TOPIC_OR_PARTITION; a partition without a live leader is LEADER_NOT_AVAILABLE with leader -1,
also when the state names a leader that is not a listed broker (Kafka's ``getPartitionMetadata``: the
state of a partition whose last leader died with no other ISR member alive keeps that leader until a
controller moves it, and a client must not be sent to a dead broker).

Authorization (Kafka's ``handleTopicMetadataRequest``): a listing of all topics holds only those the
principal may DESCRIBE; a topic asked for by name that it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
whether it exists or not (asked for by id: the name is left out); auto-creation needs CREATE on the cluster
or the topic, else TOPIC_AUTHORIZATION_FAILED. Authorized-operation fields carry the principal's bits when
asked for (every supported operation without an authorizer), -2147483648 otherwise.
"""

from __future__ import annotations

import uuid

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.authz import Authz, allowed, cluster_allowed, operations, topic_allowed
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.security.acl import CLUSTER_NAME, AclOperation, ResourceType

from .topics import auto_create_topic, topic_name_error

__all__ = ["DescribeClusterHandler", "MetadataHandler"]

_ZERO_UUID = uuid.UUID(int=0)
_BROKER_ENDPOINTS = 1


def cluster_operations(authz: Authz, ctx: RequestContext, requested: bool) -> int:
    """The cluster's authorized-operations field (Metadata v8-10, DescribeCluster): Kafka's rule, the bits
    only for a principal that may DESCRIBE the cluster, else none."""
    if requested and not cluster_allowed(authz, ctx, AclOperation.DESCRIBE):
        return 0
    return operations(authz, ctx, ResourceType.CLUSTER, CLUSTER_NAME, requested)


def _controller_id(metadata: MetadataCache, listed: set[int]) -> int:
    return metadata.controller_id if metadata.controller_id in listed else -1


class MetadataHandler:
    """Metadata from the cache; auto-creation through the admin manager."""

    def __init__(self, metadata: MetadataCache, admin: TopicAdmin, authz: Authz = None) -> None:
        self._metadata = metadata
        self._admin = admin
        self._authz = authz

    def _ops(self, ctx: RequestContext, topic: TopicInfo, include: bool) -> int:
        return operations(self._authz, ctx, ResourceType.TOPIC, topic.name, include)

    def handle(self, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
        brokers = []
        for broker in self._metadata.brokers():
            endpoint = broker.endpoint(ctx.listener_name)
            if endpoint is not None:
                brokers.append(
                    MetadataResponse.MetadataResponseBroker(
                        node_id=broker.node_id, host=endpoint.host, port=endpoint.port, rack=broker.rack
                    )
                )
        response = MetadataResponse(
            brokers=brokers,
            cluster_id=self._metadata.cluster_id,
            controller_id=_controller_id(self._metadata, {b.node_id for b in brokers}),
        )
        include_ops = ctx.api_version >= 8 and request.include_topic_authorized_operations
        if 8 <= ctx.api_version <= 10 and request.include_cluster_authorized_operations:
            response.cluster_authorized_operations = cluster_operations(self._authz, ctx, True)
        listed = {b.node_id for b in brokers}
        authz = self._authz
        if request.topics is None or (ctx.api_version == 0 and not request.topics):
            response.topics = [
                _topic(t, self._ops(ctx, t, include_ops), listed)
                for t in self._metadata.topics()
                if topic_allowed(authz, ctx, AclOperation.DESCRIBE, t.name)
            ]
            return response
        for wanted in request.topics:
            if wanted.name is None and ctx.api_version < 12:
                # Kafka's InvalidRequestException: v10-11 carry the id field but answer only by name.
                raise KafkaProtocolError(
                    f"Topic name can not be null for version {ctx.api_version}", ErrorCode.INVALID_REQUEST
                )
            if wanted.name is None:
                topic = self._metadata.topic_by_id(wanted.topic_id)
                if topic is None:
                    response.topics.append(
                        MetadataResponse.MetadataResponseTopic(
                            error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id
                        )
                    )
                    continue
                if not topic_allowed(authz, ctx, AclOperation.DESCRIBE, topic.name):
                    response.topics.append(  # the name stays unsaid (Kafka's rule)
                        MetadataResponse.MetadataResponseTopic(
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            name=None,
                            topic_id=wanted.topic_id,
                        )
                    )
                    continue
            else:
                if not topic_allowed(authz, ctx, AclOperation.DESCRIBE, wanted.name):
                    response.topics.append(  # whether it exists or not
                        MetadataResponse.MetadataResponseTopic(
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            name=wanted.name,
                            topic_id=_ZERO_UUID,
                        )
                    )
                    continue
                topic = self._metadata.topic(wanted.name)
                if topic is None:
                    allow = ctx.api_version < 4 or request.allow_auto_topic_creation
                    error = topic_name_error(wanted.name)
                    auto_create = error is None and allow and self._admin.config.auto_create_topics_enable
                    if (
                        auto_create
                        and authz is not None
                        and not cluster_allowed(authz, ctx, AclOperation.CREATE)
                        and not allowed(authz, ctx, AclOperation.CREATE, ResourceType.TOPIC, wanted.name)
                    ):
                        response.topics.append(
                            MetadataResponse.MetadataResponseTopic(
                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                name=wanted.name,
                                topic_id=_ZERO_UUID,
                            )
                        )
                        continue
                    if auto_create:
                        topic = auto_create_topic(self._admin, wanted.name)
                        if topic is None:  # a cluster creates it: clients retry until it has leaders
                            response.topics.append(
                                MetadataResponse.MetadataResponseTopic(
                                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                                    name=wanted.name,
                                    topic_id=_ZERO_UUID,
                                )
                            )
                            continue
                    if topic is None:
                        code = (
                            ErrorCode.INVALID_TOPIC_EXCEPTION
                            if error
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        )
                        response.topics.append(
                            MetadataResponse.MetadataResponseTopic(
                                error_code=code, name=wanted.name, topic_id=_ZERO_UUID
                            )
                        )
                        continue
            response.topics.append(_topic(topic, self._ops(ctx, topic, include_ops), listed))
        return response


def _topic(
    topic: TopicInfo, authorized_operations: int, listed: set[int]
) -> MetadataResponse.MetadataResponseTopic:
    """``listed``: the brokers this answer lists; a leader outside them is answered as none."""
    partitions = [
        MetadataResponse.MetadataResponsePartition(
            error_code=ErrorCode.NONE if p.leader in listed else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=p.index,
            leader_id=p.leader if p.leader in listed else -1,
            leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=list(p.offline_replicas),
        )
        for p in topic.partitions
    ]
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=authorized_operations,
    )


class DescribeClusterHandler:
    """DescribeCluster from the cache."""

    def __init__(self, metadata: MetadataCache, authz: Authz = None) -> None:
        self._metadata = metadata
        self._authz = authz

    def handle(self, ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
        if ctx.api_version >= 1 and request.endpoint_type != _BROKER_ENDPOINTS:
            return DescribeClusterResponse(
                error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                error_message="only broker endpoints (type 1) are served",
                endpoint_type=request.endpoint_type,
                cluster_id=self._metadata.cluster_id,
                controller_id=-1,
            )
        brokers = []
        for broker in self._metadata.brokers():
            endpoint = broker.endpoint(ctx.listener_name)
            if endpoint is not None:
                brokers.append(
                    DescribeClusterResponse.DescribeClusterBroker(
                        broker_id=broker.node_id, host=endpoint.host, port=endpoint.port, rack=broker.rack
                    )
                )
        return DescribeClusterResponse(
            error_code=ErrorCode.NONE,
            endpoint_type=_BROKER_ENDPOINTS,
            cluster_id=self._metadata.cluster_id,
            controller_id=_controller_id(self._metadata, {b.broker_id for b in brokers}),
            brokers=brokers,
            cluster_authorized_operations=cluster_operations(
                self._authz, ctx, request.include_cluster_authorized_operations
            ),
        )
