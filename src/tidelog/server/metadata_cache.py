"""What this broker knows of the cluster: brokers and their endpoints, the controller, topics, and for
each partition its leader, leader epoch, replicas, ISR and offline replicas (Kafka's ``MetadataCache``).

Metadata, DescribeCluster and FindCoordinator answer from it, and the handlers find a topic's id, partition
count, internal flag and config overrides here. On a single node the broker itself keeps it up to date:
this node is the only broker, the controller and the leader of every partition it hosts. In a cluster it
is fed from the cluster's metadata (ZooKeeper).

Invariants:

- Readers get immutable snapshots (frozen dataclasses, tuples): an update replaces a topic or the broker
  list whole, so a handler never sees a half-updated partition.
- A topic is known by name and by id at once or not at all; its partitions are numbered 0..n-1.
- A partition whose leader is -1 (no live leader) is reported as LEADER_NOT_AVAILABLE, never served.
- Pure: no asyncio, no sockets, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["BrokerInfo", "Endpoint", "MetadataCache", "PartitionInfo", "TopicInfo"]

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where clients reach a broker on one listener."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: its id, rack, one endpoint per listener, and its broker epoch (the czxid of its
    registration in a cluster: a new one each time it registers; -1 on a single node)."""

    node_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    epoch: int = -1

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        """The endpoint on ``listener`` (None: the first one), or None when the broker has no such
        listener (Kafka leaves such a broker out of the answer to a client on that listener)."""
        if listener is None:
            return self.endpoints[0] if self.endpoints else None
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's leadership as the cluster metadata has it."""

    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: identity, config overrides and partitions (index i at position i)."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    is_internal: bool = False

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    def partition(self, index: int) -> PartitionInfo | None:
        return self.partitions[index] if 0 <= index < len(self.partitions) else None


class MetadataCache:
    """This broker's view of the cluster; see the module docstring."""

    def __init__(self, node_id: int, cluster_id: str) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller_id = NO_LEADER
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}

    # -- brokers ---------------------------------------------------------------------------------------

    @property
    def controller_id(self) -> int:
        return self._controller_id

    def set_controller(self, node_id: int) -> None:
        self._controller_id = node_id

    def set_brokers(self, brokers: Iterable[BrokerInfo]) -> None:
        self._brokers = {b.node_id: b for b in brokers}

    def put_broker(self, broker: BrokerInfo) -> None:
        self._brokers = {**self._brokers, broker.node_id: broker}

    def brokers(self) -> list[BrokerInfo]:
        """The live brokers by node id."""
        return [self._brokers[node_id] for node_id in sorted(self._brokers)]

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self._brokers.get(node_id)

    def is_alive(self, node_id: int) -> bool:
        return node_id in self._brokers

    # -- topics ----------------------------------------------------------------------------------------

    def put_topic(self, topic: TopicInfo) -> None:
        old = self._topics.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self._by_id.pop(old.topic_id, None)
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def remove_topic(self, name: str) -> TopicInfo | None:
        topic = self._topics.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)
        return topic

    def topic(self, name: str | None) -> TopicInfo | None:
        return None if name is None else self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self._by_id.get(topic_id)
        return None if topic is None else topic.name

    def topics(self) -> list[TopicInfo]:
        """Every topic, by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(self.topics())

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __len__(self) -> int:
        return len(self._topics)

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        info = self._topics.get(topic)
        return None if info is None else info.partition(index)

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether ``topic`` exists and has partition ``index`` (what OffsetCommit checks first)."""
        return self.partition(topic, index) is not None
