"""The replica fetchers of this broker (Kafka's ``ReplicaFetcherManager`` / ``AbstractFetcherManager``):
which partitions are fetched from which leader broker, by which fetcher task.

It listens to the :class:`~tidelog.server.replica_manager.ReplicaManager`'s leadership changes: a partition
that becomes a follower of broker L at leader epoch E goes to L's fetcher at its log end offset (and leaves
any other fetcher); one that becomes leader, or has no leader (offline), leaves its fetcher. A fetcher is
one asyncio task (:class:`~tidelog.server.cluster.replica_fetcher_task.ReplicaFetcher`); see there for
what one fetch round does.

Invariants:

- A partition is in at most one fetcher, the one of its current leader: ``num.replica.fetchers`` tasks
  per leader broker, the partition's always the same (a hash of topic and partition, as Kafka's
  ``getFetcherId``). Re-adding a partition at the same leader epoch keeps its fetch state.
- A fetcher exists only while it has partitions: the last one leaving stops its task. Tasks run between
  :meth:`ReplicaFetcherManager.start` and :meth:`ReplicaFetcherManager.shutdown`; partitions added
  before :meth:`start` wait for it, and :meth:`start` also picks up every follower the replica manager
  already hosts (states applied before the manager existed).
- Everything here runs on the event loop, synchronously with the leadership changes: between two awaits
  of a fetcher its partitions cannot change under it, and a fetcher checks, before applying an answer,
  that the partition is still its own at the epoch it asked with.
- A deleted replica (the replica manager no longer hosts that object) or one that no longer follows the
  fetcher's leader is dropped by its fetcher before its next request or answer is applied
  (:meth:`remove_partitions` does it at once).
- A fenced broker (ZooKeeper session lost) may keep fetching: leaders fence by epoch, and its fetch states
  carry the broker epoch read at each request. :meth:`remove_all` stops everything if wanted; after the
  cluster's state was applied again, :meth:`resync` takes in every follower whose state did not change
  (those are not announced as leadership changes).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Iterable

from tidelog.protocol import TopicPartition
from tidelog.replication.partition import Partition
from tidelog.server.clock import Clock
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.replication_quota import ReplicationQuotaManager

from .broker_client import BrokerClient
from .fetch_state import FetcherView, FetchStatus, PartitionFetchView
from .fetcher_config import ReplicaFetcherConfig
from .replica_fetcher_task import ReplicaFetcher

__all__ = [
    "FetchStatus",
    "FetcherView",
    "PartitionFetchView",
    "ReplicaFetcher",
    "ReplicaFetcherConfig",
    "ReplicaFetcherManager",
    "fetcher_id",
]

log = logging.getLogger("tidelog.replica_fetcher")

_FetcherKey = tuple[int, int]  # (leader broker id, fetcher id)


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a leader's ``num_fetchers`` fetchers fetches ``tp`` (stable across restarts)."""
    return (31 * zlib.crc32(tp.topic.encode("utf-8")) + tp.partition) % num_fetchers


class ReplicaFetcherManager:
    """This broker's replica fetchers; see the module docstring."""

    def __init__(
        self,
        replicas: ReplicaManager,
        client: BrokerClient,
        *,
        metadata: MetadataCache,
        node_id: int,
        broker_epoch: Callable[[], int],
        clock: Clock,
        config: ReplicaFetcherConfig | None = None,
    ) -> None:
        self._replicas = replicas
        self._client = client
        self._metadata = metadata
        self._node_id = node_id
        self._broker_epoch = broker_epoch
        self._clock = clock
        self.config = config if config is not None else ReplicaFetcherConfig()
        self._fetchers: dict[_FetcherKey, ReplicaFetcher] = {}
        self.quota: ReplicationQuotaManager | None = None
        """Issue 15 hook: the follower replication throttle, given to every fetcher created after it is set."""
        self._stopping: set[asyncio.Task[None]] = set()
        self._started = False
        self._closed = False
        self._offline = replicas.is_offline  # issue 15 hook: no fetching into a failed log dir
        replicas.add_leadership_listener(self._on_leadership_change)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start a task per fetcher (on the running loop) after taking in every follower already hosted."""
        if self._closed or self._started:
            return
        self._started = True
        self.resync()
        for fetcher in self._fetchers.values():
            fetcher.start()

    async def shutdown(self) -> None:
        """Stop every fetcher and wait for their tasks to end; leadership changes are ignored afterwards."""
        self._closed = True
        for key in list(self._fetchers):
            self._stop(key)
        tasks = list(self._stopping)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- membership ------------------------------------------------------------------------------------

    def _on_leadership_change(self, partition: Partition, is_leader: bool) -> None:
        if self._closed:
            return
        if (
            is_leader
            or not self._follows_another_broker(partition)
            or self._offline(partition.topic, partition.index)
        ):
            self.remove_partitions([TopicPartition(partition.topic, partition.index)])
        else:
            self.add_partition(partition)

    def _follows_another_broker(self, partition: Partition) -> bool:
        return not partition.is_leader and partition.leader_id >= 0 and partition.leader_id != self._node_id

    def add_partition(self, partition: Partition) -> None:
        """Fetch ``partition`` from its leader (``partition.leader_id``) at its leader epoch, from its log end
        offset; it leaves any other fetcher. Ignored after :meth:`shutdown` or when it does not follow
        another broker."""
        if (
            self._closed
            or not self._follows_another_broker(partition)
            or self._offline(partition.topic, partition.index)
        ):
            return
        tp = TopicPartition(partition.topic, partition.index)
        key = (partition.leader_id, fetcher_id(tp, self.config.num_fetchers))
        for other, fetcher in list(self._fetchers.items()):
            if other != key and tp in fetcher:
                fetcher.remove(tp)
                if not len(fetcher):
                    self._stop(other)
        existing = self._fetchers.get(key)
        if existing is not None:
            fetcher = existing
        else:
            fetcher = self._fetchers[key] = ReplicaFetcher(
                key[0],
                key[1],
                replicas=self._replicas,
                client=self._client,
                metadata=self._metadata,
                node_id=self._node_id,
                broker_epoch=self._broker_epoch,
                clock=self._clock,
                config=self.config,
                on_stale=self._remove_one,
                quota=self.quota,
            )
        fetcher.add(partition)
        if self._started:
            fetcher.start()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching ``tps`` (a topic deleted, this broker no longer a replica); a fetcher left without
        partitions stops."""
        wanted = set(tps)
        for key, fetcher in list(self._fetchers.items()):
            for tp in wanted:
                fetcher.remove(tp)
            if not len(fetcher):
                self._stop(key)

    def _remove_one(self, tp: TopicPartition) -> None:
        self.remove_partitions([tp])

    def remove_all(self) -> None:
        """Stop every fetcher (the partitions come back through :meth:`add_partition` or :meth:`resync`)."""
        for key in list(self._fetchers):
            self._stop(key)

    def resync(self) -> None:
        """Make the fetchers match the replica manager: every hosted replica that follows another broker
        is fetched from it (kept as it is when already there), nothing else is. For start-up and for after
        a gap in the leadership changes (a fenced broker that registered again)."""
        if self._closed:
            return
        hosted: set[TopicPartition] = set()
        for partition in self._replicas:
            if self._follows_another_broker(partition):
                hosted.add(TopicPartition(partition.topic, partition.index))
                self.add_partition(partition)
        stale = {tp for fetcher in self._fetchers.values() for tp in fetcher.partitions()} - hosted
        if stale:
            self.remove_partitions(stale)

    def _stop(self, key: _FetcherKey) -> None:
        fetcher = self._fetchers.pop(key, None)
        if fetcher is None:
            return
        task = fetcher.stop()
        if task is not None:
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    # -- introspection ---------------------------------------------------------------------------------

    @property
    def leaders(self) -> list[int]:
        """The brokers fetched from, by id."""
        return sorted({leader for leader, _fetcher_id in self._fetchers})

    def fetcher_for(self, leader: int) -> FetcherView | None:
        """What this broker fetches from ``leader`` (all of that leader's fetchers together), or None."""
        fetchers = [fetcher for (source, _id), fetcher in sorted(self._fetchers.items()) if source == leader]
        if not fetchers:
            return None
        partitions: dict[TopicPartition, PartitionFetchView] = {}
        for fetcher in fetchers:
            partitions.update(fetcher.views())
        versions = [f.fetch_version for f in fetchers if f.fetch_version is not None]
        return FetcherView(
            leader_id=leader,
            partitions=partitions,
            requests=sum(f.requests for f in fetchers),
            fetch_in_flight=any(f.fetch_in_flight for f in fetchers),
            fetch_version=max(versions) if versions else None,
        )

    def partition_view(self, tp: TopicPartition) -> PartitionFetchView | None:
        """``tp`` as its fetcher sees it, None when no fetcher has it."""
        for fetcher in self._fetchers.values():
            if tp in fetcher:
                return fetcher.views()[tp]
        return None
