"""Metadata (key 3) and DescribeCluster (key 60): brokers, controller, topics, partitions, leaders.

Invariants: the controller id is always a listed broker (librdkafka's admin client stalls otherwise);
a topic asked for by name that does not exist is created when the request allows it and
``auto.create.topics.enable`` is on, and is otherwise answered with UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)

from .topics import auto_create_topic, topic_name_error

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext
    from tidelog.server.metadata_store import TopicMetadata

_ZERO_UUID = uuid.UUID(int=0)
_AUTHORIZED_OPERATIONS_ALL = 0b1111111111110  # bits 1..12: every operation, as an authorizer-less Kafka says


def handle_metadata(broker: Broker, ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    host, port = broker.advertised_host_port(ctx.listener_name)
    response = MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=broker.node_id, host=host, port=port, rack=None)
        ],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
    )
    include_ops = ctx.api_version >= 8 and request.include_topic_authorized_operations
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        topics = [_topic(broker, t, include_ops) for t in broker.metadata]
        response.topics = topics
        return response
    for wanted in request.topics:
        if wanted.name is None:
            topic = broker.metadata.get_by_id(wanted.topic_id)
            if topic is None:
                response.topics.append(
                    MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id
                    )
                )
                continue
        else:
            topic = broker.metadata.get(wanted.name)
            if topic is None:
                allow = ctx.api_version < 4 or request.allow_auto_topic_creation
                error = topic_name_error(wanted.name)
                if error is None and allow and broker.config.auto_create_topics_enable:
                    topic = auto_create_topic(broker, wanted.name)
                if topic is None:
                    code = (
                        ErrorCode.INVALID_TOPIC_EXCEPTION if error else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    response.topics.append(
                        MetadataResponse.MetadataResponseTopic(
                            error_code=code, name=wanted.name, topic_id=_ZERO_UUID
                        )
                    )
                    continue
        response.topics.append(_topic(broker, topic, include_ops))
    return response


def _topic(broker: Broker, topic: TopicMetadata, include_ops: bool) -> MetadataResponse.MetadataResponseTopic:
    partitions = []
    for index in range(topic.num_partitions):
        partition = broker.replicas.get(topic.name, index)
        partitions.append(
            MetadataResponse.MetadataResponsePartition(
                error_code=ErrorCode.NONE if partition is not None else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=broker.node_id if partition is not None else -1,
                leader_epoch=partition.leader_epoch if partition is not None else -1,
                replica_nodes=[broker.node_id],
                isr_nodes=[broker.node_id],
                offline_replicas=[],
            )
        )
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=_AUTHORIZED_OPERATIONS_ALL if include_ops else -2147483648,
    )


def handle_describe_cluster(
    broker: Broker, ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    host, port = broker.advertised_host_port(ctx.listener_name)
    if ctx.api_version >= 1 and request.endpoint_type not in (1,):
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints (type 1) are served",
            endpoint_type=request.endpoint_type,
            cluster_id=broker.cluster_id,
            controller_id=-1,
        )
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port)
        ],
        cluster_authorized_operations=(
            _AUTHORIZED_OPERATIONS_ALL if request.include_cluster_authorized_operations else -2147483648
        ),
    )
