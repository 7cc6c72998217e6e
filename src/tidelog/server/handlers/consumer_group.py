"""The KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) v0-1 and ConsumerGroupDescribe (69) v0.

Both go to the group coordinator through the broker's :class:`~tidelog.server.group_runtime.GroupRuntime`,
like the classic group APIs (neither is ever parked: a heartbeat is answered at once, its records
appended first). Server-side assignment needs the cluster's topics: before each request the coordinator
is handed a :class:`~tidelog.coordinator.group.TopicsImage` of this broker's topics, rebuilt only when a topic
was created, deleted or grew partitions since the last one.

Invariants: the image the coordinator holds names every topic of the broker's metadata with its id and
partition count as of the latest request; clients need Metadata v12+ to map the topic ids of their
assignment to names (librdkafka checks this before it sends ConsumerGroupHeartbeat at all).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from tidelog.coordinator.group import TopicImage, TopicsImage
from tidelog.protocol.schema import Request

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext

__all__ = ["handle_consumer_group_request", "topics_image"]

_Fingerprint = tuple[tuple[str, object, int], ...]
_images: weakref.WeakKeyDictionary[Any, tuple[_Fingerprint, TopicsImage]] = weakref.WeakKeyDictionary()


def topics_image(broker: Broker) -> TopicsImage:
    """The broker's topics as a TopicsImage (the same object as long as no topic changed)."""
    fingerprint = tuple((t.name, t.topic_id, t.num_partitions) for t in broker.metadata)
    cached = _images.get(broker)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    image = TopicsImage(TopicImage(t.name, t.topic_id, t.num_partitions) for t in broker.metadata)
    _images[broker] = (fingerprint, image)
    return image


def handle_consumer_group_request(broker: Broker, ctx: RequestContext, request: Request) -> Any:
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe."""
    image = topics_image(broker)
    coordinator = broker.groups.coordinator
    if coordinator.topics_image is not image:
        coordinator.set_topics_image(image)
    return broker.groups.handle(ctx, request)
