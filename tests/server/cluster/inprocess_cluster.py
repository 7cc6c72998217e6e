"""Several real tidelog brokers in cluster mode on one event loop in a background thread, without
ZooKeeper: the test plays the controller and, where it wants to, the followers' replica fetchers.

Each broker is a :class:`~tidelog.server.broker.Broker` listening on 127.0.0.1:0 whose replica manager is
switched to cluster mode once it is started (so a partition is led or followed only as the test says) and
whose transaction runtime sends markers to other brokers through its own
:class:`~tidelog.server.cluster.broker_client.BrokerClient`. Every broker's metadata cache knows every
broker (endpoint, broker epoch) and every topic the test created.

- :meth:`InProcessCluster.create_topic` puts a topic (same id everywhere) with its assignment in every cache;
  :meth:`InProcessCluster.elect` is the controller's decision for one partition: applied with
  ``ReplicaManager.apply_partition_state`` on every running broker it assigns and shown in every cache.
- :meth:`InProcessCluster.replicate` is one fetch of a follower: a Fetch with the follower's replica id
  sent to the leader over the wire (the follower's BrokerClient), the records appended as follower, the
  follower's high watermark moved to the leader's. Two rounds move the leader's high watermark and then
  the follower's.
- :meth:`InProcessCluster.run` runs a coroutine on the cluster's loop and returns its result (blocking the
  calling thread), so tests drive raw requests there and real clients (confluent-kafka) from their own
  thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.server.inprocess import make_broker

from tidelog.coordinator.common import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import FetchRequest, FetchResponse
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.partition import Partition
from tidelog.server.broker import Broker
from tidelog.server.cluster.broker_client import BrokerClient
from tidelog.server.metadata_cache import BrokerInfo, Endpoint, PartitionInfo, TopicInfo

T = TypeVar("T")

BROKER_EPOCH_BASE = 1000
"""Broker n is registered with broker epoch 1000 + n."""

LISTENER = "PLAINTEXT"


@dataclass
class Node:
    node_id: int
    broker: Broker
    client: BrokerClient
    running: bool = True

    @property
    def info(self) -> BrokerInfo:
        return BrokerInfo(
            self.node_id,
            (Endpoint(LISTENER, "127.0.0.1", self.broker.port),),
            epoch=BROKER_EPOCH_BASE + self.node_id,
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def partition(self, topic: str, index: int = 0) -> Partition:
        partition = self.broker.replicas.get(topic, index)
        assert partition is not None, f"broker {self.node_id} hosts no {topic}-{index}"
        return partition


class InProcessCluster:
    """Brokers ``node_ids`` under ``data`` on a loop thread; see the module docstring."""

    def __init__(self, data: Path, node_ids: Sequence[int], overrides: dict[str, str]) -> None:
        self.data = data
        self.node_ids = tuple(node_ids)
        self.overrides = overrides
        self.nodes: dict[int, Node] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.states: dict[tuple[str, int], LeaderAndIsr] = {}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="inprocess-cluster", daemon=True)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    # -- the loop ----------------------------------------------------------------------------------------

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``coroutine`` on the cluster's loop; its result (blocks this thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, fn: Callable[[], T], timeout: float = 60) -> T:
        """Call ``fn`` on the cluster's loop; its result."""

        async def call() -> T:
            return fn()

        return self.run(call(), timeout)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        for node_id in self.node_ids:
            self.run(self._start_node(node_id))
        self.call(self._introduce)

    async def _start_node(self, node_id: int) -> None:
        settings = {
            "node.id": str(node_id),
            "listeners": f"{LISTENER}://127.0.0.1:0",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        broker = make_broker(self.data / f"broker-{node_id}", topic=None, **settings)
        await broker.start()
        broker.replicas.cluster_mode = True
        client = BrokerClient(
            node_id, self._endpoint_for, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200
        )
        broker.transactions.set_broker_client(client)
        self.nodes[node_id] = Node(node_id, broker, client)

    def _endpoint_for(self, node_id: int) -> tuple[str, int] | None:
        node = self.nodes.get(node_id)
        return None if node is None or not node.running else ("127.0.0.1", node.broker.port)

    def _introduce(self) -> None:
        running = [node for node in self.nodes.values() if node.running]
        for target in running:
            target.broker.metadata.set_brokers(node.info for node in running)
            target.broker.metadata.set_controller(min(self.nodes))

    def stop(self) -> None:
        for node_id in list(self.nodes):
            self.stop_node(node_id)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()

    def stop_node(self, node_id: int) -> None:
        """Stop broker ``node_id`` (its client, then the broker); the others drop it from their caches."""
        node = self.nodes[node_id]
        if not node.running:
            return
        node.running = False

        async def stop() -> None:
            await node.client.close_all()
            await node.broker.stop(grace_s=5)

        self.run(stop())
        self.call(self._introduce)

    # -- the controller's part ---------------------------------------------------------------------------

    def create_topic(
        self, name: str, assignment: Sequence[Sequence[int]], *, configs: dict[str, str] | None = None
    ) -> None:
        """Topic ``name`` with ``assignment[p]`` the replicas of partition p, offline until elected. The
        internal topics take their coordinators' configs unless told others."""
        internal = name in (GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME)
        if configs is None and internal:
            first = next(iter(self.nodes.values())).broker
            runtime = first.groups if name == GROUP_METADATA_TOPIC_NAME else first.transactions
            configs = runtime.topic_configs()
        self.topics[name] = TopicInfo(
            name,
            uuid.uuid4(),
            tuple(
                PartitionInfo(index, -1, -1, tuple(replicas), ()) for index, replicas in enumerate(assignment)
            ),
            configs=dict(configs or {}),
            is_internal=internal,
        )
        self.call(lambda: self._publish(name))

    def _publish(self, name: str, on: Iterable[Node] | None = None) -> None:
        for node in on if on is not None else self.nodes.values():
            if node.running:
                node.broker.metadata.put_topic(self.topics[name])

    def elect(
        self,
        topic: str,
        index: int,
        *,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        partition_epoch: int = 0,
        on: Iterable[int] | None = None,
    ) -> None:
        """The controller's state of ``topic-index``: shown in every running cache, applied on each running
        broker of ``on`` (default: every assigned one) in that order."""
        self.call(lambda: self._elect(topic, index, leader, leader_epoch, tuple(isr), partition_epoch, on))

    def _elect(
        self,
        topic: str,
        index: int,
        leader: int,
        leader_epoch: int,
        isr: tuple[int, ...],
        partition_epoch: int,
        on: Iterable[int] | None,
    ) -> None:
        info = self.topics[topic]
        assignment = info.partitions[index].replicas
        partitions = list(info.partitions)
        partitions[index] = PartitionInfo(index, leader, leader_epoch, assignment, isr)
        self.topics[topic] = TopicInfo(
            topic, info.topic_id, tuple(partitions), configs=info.configs, is_internal=info.is_internal
        )
        state = LeaderAndIsr(leader, leader_epoch, isr, controller_epoch=1, partition_epoch=partition_epoch)
        self.states[(topic, index)] = state
        self._publish(topic)
        for node_id in on if on is not None else assignment:
            node = self.nodes[node_id]
            if not node.running:
                continue
            broker = node.broker
            broker.replicas.apply_partition_state(
                topic, index, assignment=assignment, state=state, config=broker.admin.log_config(info.configs)
            )

    # -- the followers' part -----------------------------------------------------------------------------

    def replicate(self, topic: str, index: int, follower: int, rounds: int = 2) -> None:
        """``rounds`` fetches of ``follower`` from the leader of ``topic-index`` (see the module docstring)."""
        for _ in range(rounds):
            self.run(self._fetch(topic, index, follower))

    async def _fetch(self, topic: str, index: int, follower: int) -> None:
        leader = self.states[(topic, index)].leader
        node = self.nodes[follower]
        replica = node.partition(topic, index)
        latest_epoch = replica.latest_epoch
        request = FetchRequest(
            replica_id=follower,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 24,
            topics=[
                FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=index,
                            current_leader_epoch=replica.leader_epoch,
                            fetch_offset=replica.log_end_offset,
                            last_fetched_epoch=-1 if latest_epoch is None else latest_epoch,
                            log_start_offset=replica.log_start_offset,
                            partition_max_bytes=1 << 24,
                        )
                    ],
                )
            ],
        )
        response = await node.client.send(leader, request, 12, expect=FetchResponse)
        (data,) = response.responses[0].partitions
        assert data.error_code == ErrorCode.NONE, ErrorCode(data.error_code).name
        now = node.broker.clock.now_ms()
        if data.records:
            replica.append_records_as_follower(bytes(data.records), now_ms=now)
        replica.update_follower_high_watermark(data.high_watermark)


@contextlib.contextmanager
def inprocess_cluster(
    data: Path, node_ids: Sequence[int] = (1, 2, 3), **overrides: str
) -> Iterator[InProcessCluster]:
    """Brokers ``node_ids`` started on a loop thread, each knowing the others; stopped afterwards."""
    cluster = InProcessCluster(data, node_ids, overrides)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
