"""The Metadata handler over a metadata cache: a partition's leader is only answered when it is a listed
(live) broker."""

from __future__ import annotations

import uuid
from typing import Any, cast

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, MetadataRequest
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.metadata import MetadataHandler
from tidelog.server.metadata_cache import BrokerInfo, Endpoint, MetadataCache, PartitionInfo, TopicInfo


def test_a_leader_that_is_not_alive_is_answered_as_no_leader() -> None:
    """The state of a partition whose last ISR member died keeps naming it until a controller changes
    it (the whole cluster went down, a broker outside the ISR came back first): Kafka answers such a
    partition LEADER_NOT_AVAILABLE with leader -1, so no client is sent to a dead broker."""
    cache = MetadataCache(2, "cluster")
    cache.put_broker(BrokerInfo(2, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), epoch=7))
    cache.put_topic(
        TopicInfo(
            "orders",
            uuid.uuid4(),
            (
                PartitionInfo(0, leader=3, leader_epoch=4, replicas=(1, 2, 3), isr=(3, 1)),
                PartitionInfo(1, leader=2, leader_epoch=1, replicas=(2, 3, 1), isr=(2,)),
                PartitionInfo(2, leader=-1, leader_epoch=5, replicas=(3, 1, 2), isr=(3,)),
            ),
        )
    )
    handler = MetadataHandler(cache, cast(Any, None))
    context = RequestContext(ApiKey.METADATA, 12, 1, "test", "127.0.0.1", 1, listener_name="PLAINTEXT")
    response = handler.handle(
        context, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")])
    )
    assert [b.node_id for b in response.brokers] == [2]
    assert [
        (p.error_code, p.leader_id, p.leader_epoch, p.isr_nodes) for p in response.topics[0].partitions
    ] == [
        (ErrorCode.LEADER_NOT_AVAILABLE, -1, 4, [3, 1]),
        (ErrorCode.NONE, 2, 1, [2]),
        (ErrorCode.LEADER_NOT_AVAILABLE, -1, 5, [3]),
    ]
