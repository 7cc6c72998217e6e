"""On the test's own event loop (the replica fetcher tests; inprocess_cluster.py is the thread-based variant
the coordinator tests use). Several real tidelog brokers in one event loop, replicating through their replica fetchers, with the test
playing the controller (no ZooKeeper).

Each :class:`Node` is a :class:`~tidelog.server.broker.Broker` listening on 127.0.0.1:0 whose replica
manager is in cluster mode (a partition is led or followed only as :meth:`InProcessCluster.elect` says),
a :class:`~tidelog.server.cluster.broker_client.BrokerClient` reaching the others through its metadata
cache, and a :class:`~tidelog.server.cluster.replica_fetcher.ReplicaFetcherManager` started with it.
:meth:`InProcessCluster.create_topic` puts a topic (same id everywhere) in every metadata cache;
:meth:`InProcessCluster.elect` applies a :class:`LeaderAndIsr` to every running broker, as the
metadata watcher will, and shows it in their metadata caches.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.server.inprocess import make_broker

from tidelog.protocol.records import iter_batch_headers
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.broker import Broker
from tidelog.server.cluster.broker_client import BrokerClient
from tidelog.server.cluster.inter_broker import endpoint_resolver, inter_broker_listener_name
from tidelog.server.cluster.replica_fetcher import ReplicaFetcherConfig, ReplicaFetcherManager
from tidelog.server.config import log_config_for_topic
from tidelog.server.metadata_cache import BrokerInfo, Endpoint, PartitionInfo, TopicInfo

BROKER_EPOCH_BASE = 1000
"""Broker n registers with epoch 1000 + n (its ``ReplicaState.replica_epoch``)."""


@dataclass
class Node:
    node_id: int
    broker: Broker
    client: BrokerClient
    fetchers: ReplicaFetcherManager
    running: bool = True

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def info(self) -> BrokerInfo:
        endpoint = Endpoint("PLAINTEXT", "127.0.0.1", self.broker.port)
        return BrokerInfo(self.node_id, (endpoint,), epoch=BROKER_EPOCH_BASE + self.node_id)

    def partition(self, topic: str, index: int = 0) -> Partition:
        partition = self.broker.replicas.get(topic, index)
        assert partition is not None, f"broker {self.node_id} hosts no {topic}-{index}"
        return partition


class InProcessCluster:
    """Brokers ``node_ids`` under ``data``; see the module docstring."""

    def __init__(self, data: Path, nodes: dict[int, Node]) -> None:
        self.data = data
        self.nodes = nodes
        self.topics: dict[str, TopicInfo] = {}

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def running(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.running]

    def introduce(self, node_ids: Iterable[int] | None = None, *, to: Iterable[int] | None = None) -> None:
        """Put ``node_ids`` (default: all running) into the metadata caches of ``to`` (default: all running)."""
        known = [self.nodes[n] for n in node_ids] if node_ids is not None else self.running()
        targets = [self.nodes[n] for n in to] if to is not None else self.running()
        for target in targets:
            for node in known:
                target.broker.metadata.put_broker(node.info)

    def create_topic(self, name: str, replicas: tuple[int, ...]) -> uuid.UUID:
        """Topic ``name`` with one partition on ``replicas``, offline until elected, in every cache."""
        topic_id = uuid.uuid4()
        self.topics[name] = TopicInfo(
            name, topic_id, (PartitionInfo(0, -1, -1, replicas, ()),), configs={}, is_internal=False
        )
        for node in self.running():
            node.broker.metadata.put_topic(self.topics[name])
        return topic_id

    def elect(
        self,
        topic: str,
        leader: int,
        leader_epoch: int,
        isr: tuple[int, ...],
        *,
        partition_epoch: int = 0,
        on: Iterable[int] | None = None,
    ) -> None:
        """What the controller decided for ``topic``-0, applied on ``on`` (default: every running broker) in
        that order."""
        info = self.topics[topic]
        assignment = info.partitions[0].replicas
        state = LeaderAndIsr(leader, leader_epoch, isr, controller_epoch=1, partition_epoch=partition_epoch)
        self.topics[topic] = TopicInfo(
            topic,
            info.topic_id,
            (PartitionInfo(0, leader, leader_epoch, assignment, isr),),
            configs={},
            is_internal=False,
        )
        targets = [self.nodes[n] for n in on] if on is not None else self.running()
        for node in targets:
            broker = node.broker
            broker.metadata.put_topic(self.topics[topic])
            broker.replicas.apply_partition_state(
                topic,
                0,
                assignment=assignment,
                state=state,
                config=log_config_for_topic(broker.config, {}),
            )

    async def stop(self, node_id: int) -> None:
        """Stop broker ``node_id`` (its fetchers, its client, then the broker: listeners, parked requests,
        logs); the others keep it in their metadata caches, as they would until its session expired."""
        node = self.nodes[node_id]
        if not node.running:
            return
        node.running = False
        await node.fetchers.shutdown()
        await node.client.close_all()
        await node.broker.stop(grace_s=5)


@contextlib.asynccontextmanager
async def inprocess_cluster(
    data: Path,
    node_ids: Iterable[int] = (1, 2),
    *,
    fetcher_config: ReplicaFetcherConfig | None = None,
    start_fetchers: bool = True,
    transaction_coordinator: int | None = None,
    **overrides: str,
) -> AsyncIterator[InProcessCluster]:
    """Brokers ``node_ids`` started in this event loop, each knowing the others; stopped afterwards.

    ``transaction_coordinator``: that broker gets its own single-replica ``__transaction_state`` (led by
    itself, as on a single node) before its replica manager goes into cluster mode, so transactional
    clients talking to it alone have a coordinator."""
    config = fetcher_config or ReplicaFetcherConfig(backoff_ms=50)
    nodes: dict[int, Node] = {}
    cluster = InProcessCluster(data, nodes)
    try:
        for node_id in node_ids:
            broker = make_broker(
                data / f"broker-{node_id}",
                topic=None,
                **{
                    "node.id": str(node_id),
                    "listeners": "PLAINTEXT://127.0.0.1:0",
                    "transaction.state.log.num.partitions": "1",
                    "offsets.topic.num.partitions": "1",
                    **overrides,
                },
            )
            await broker.start()
            client = BrokerClient(
                node_id,
                endpoint_resolver(broker.metadata, inter_broker_listener_name(broker.config)),
                reconnect_backoff_ms=20,
                reconnect_backoff_max_ms=200,
            )
            fetchers = ReplicaFetcherManager(
                broker.replicas,
                client,
                metadata=broker.metadata,
                node_id=node_id,
                broker_epoch=lambda n=node_id: BROKER_EPOCH_BASE + n,
                clock=broker.clock,
                config=config,
            )
            nodes[node_id] = Node(node_id, broker, client, fetchers)
        cluster.introduce()
        for node in nodes.values():
            if node.node_id == transaction_coordinator:
                node.broker.transactions.ensure_state_topic()
            node.broker.replicas.cluster_mode = True
            if start_fetchers:
                node.fetchers.start()
        yield cluster
    finally:
        for node_id in list(nodes):
            await cluster.stop(node_id)


# -- reading replicas -------------------------------------------------------------------------------------


def batches(partition: Partition, start: int | None = None) -> list[bytes]:
    """Every batch of ``partition`` from ``start`` (default: its log start) to its log end, as bytes."""
    offset = partition.log_start_offset if start is None else start
    if offset >= partition.log_end_offset:
        return []
    data = partition.read(offset, 1 << 30, isolation=FetchIsolation.LOG_END, min_one_batch=True).read_bytes()
    out = []
    for position, header in iter_batch_headers(data):
        out.append(data[position : position + header.size_in_bytes])
    return out


def in_sync(leader: Partition, follower: Partition) -> bool:
    """The follower has everything the leader has, and the leader's high watermark."""
    return (
        follower.log_end_offset == leader.log_end_offset
        and follower.high_watermark == leader.high_watermark
        and leader.high_watermark == leader.log_end_offset
    )
