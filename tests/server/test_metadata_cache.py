"""MetadataCache: snapshots by name and id, brokers by listener, partitions without a leader."""

from __future__ import annotations

import uuid

from tidelog.server.metadata_cache import BrokerInfo, Endpoint, MetadataCache, PartitionInfo, TopicInfo


def _topic(name: str, topic_id: uuid.UUID, partitions: int, leader: int = 1) -> TopicInfo:
    return TopicInfo(
        name=name,
        topic_id=topic_id,
        partitions=tuple(PartitionInfo(i, leader, 0, (1, 2), (1, 2)) for i in range(partitions)),
    )


def test_topics_by_name_and_id_replace_and_remove() -> None:
    cache = MetadataCache(1, "cluster")
    first, second = uuid.uuid4(), uuid.uuid4()
    cache.put_topic(_topic("b", first, 2))
    cache.put_topic(_topic("a", second, 1))
    assert [t.name for t in cache.topics()] == ["a", "b"]
    assert cache.topic_name(first) == "b"
    assert cache.has_partition("b", 1)
    assert not cache.has_partition("b", 2)
    assert not cache.has_partition("x", 0)
    recreated = uuid.uuid4()
    cache.put_topic(_topic("b", recreated, 3))  # deleted and created again: a new id
    assert cache.topic_by_id(first) is None
    assert cache.topic_name(recreated) == "b"
    assert cache.topic("b") is not None
    assert cache.topic("b").num_partitions == 3
    assert cache.remove_topic("b") is not None
    assert cache.topic_by_id(recreated) is None
    assert "b" not in cache
    assert len(cache) == 1


def test_a_partition_without_leader() -> None:
    cache = MetadataCache(1, "cluster")
    cache.put_topic(_topic("t", uuid.uuid4(), 1, leader=-1))
    partition = cache.partition("t", 0)
    assert partition is not None
    assert not partition.has_leader


def test_brokers_and_endpoints_by_listener() -> None:
    cache = MetadataCache(1, "cluster")
    cache.set_brokers(
        [
            BrokerInfo(2, (Endpoint("INTERNAL", "10.0.0.2", 9093),), rack="r2"),
            BrokerInfo(1, (Endpoint("EXTERNAL", "h1", 9092), Endpoint("INTERNAL", "10.0.0.1", 9093))),
        ]
    )
    cache.set_controller(2)
    assert [b.node_id for b in cache.brokers()] == [1, 2]
    assert cache.controller_id == 2
    assert cache.is_alive(2)
    assert not cache.is_alive(3)
    one = cache.broker(1)
    assert one is not None
    assert one.endpoint("INTERNAL") == Endpoint("INTERNAL", "10.0.0.1", 9093)
    assert one.endpoint() == Endpoint("EXTERNAL", "h1", 9092)
    two = cache.broker(2)
    assert two is not None
    assert two.endpoint("EXTERNAL") is None
