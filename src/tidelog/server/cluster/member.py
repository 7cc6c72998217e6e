"""The cluster-mode parts of one broker, built and wired in one place (the single-node broker has none of
them): the metadata watcher, the ZooKeeper topic admin, producer ids from ZooKeeper, the broker's
registration, the ISR writer and the periodic ISR check.

Invariants (the start-up order is what keeps them):

1. The ZooKeeper session and the cluster id exist before the broker is built (``main`` checks the cluster
   id against ``meta.properties`` through the log manager): a data dir of another cluster never starts.
2. Every local log is hosted *offline* before anything is read: nothing is served until the cluster's state
   of its partition says this broker leads it.
3. :meth:`ClusterMember.start` reads the whole cluster state (the watcher's first sync: leaders and
   followers take their roles, coordinators load, fetchers start) before it registers the broker: the
   controller counts a broker as alive only once it is ready to follow.
4. ISR changes a leader proposes are written to its state znode conditional on the partition epoch it holds
   (``update_isr``): a refused write (BadVersion: someone changed it) leaves the ISR as it was; the watcher
   delivers the newer state and the leader decides again. Without a session nothing is written at all.
5. Fencing (session expiry): every partition stops leading at once; on the new session the broker registers
   again (a new broker epoch), re-reads every partition state and only then serves again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from tidelog.protocol import TopicPartition
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.server.config import BrokerConfig, log_config_for_topic
from tidelog.server.dynamic_config import DynamicBrokerConfigs
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.errors import BadVersion, ZkError
from tidelog.server.zk.zk_data import BrokerRegistration, Endpoint
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

from .membership import BrokerMembership
from .metadata_watcher import MetadataWatcher
from .zk_admin import ZkAdminManager
from .zk_producer_ids import ZkProducerIdManager

__all__ = ["ClusterMember"]

log = logging.getLogger("tidelog.cluster")


class ClusterMember:
    """One broker's membership of a ZooKeeper cluster; see the module docstring."""

    def __init__(
        self,
        zk: KafkaZkClient,
        *,
        node_id: int,
        configs: DynamicBrokerConfigs,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        logs: LogManager,
        advertised: Callable[[], list[tuple[str, str, int, str]]],
    ) -> None:
        self.zk = zk
        self.node_id = node_id
        self._configs = configs
        self._metadata = metadata
        self._replicas = replicas
        self._logs = logs
        self._advertised = advertised
        for tp, _log in logs:
            replicas.load(tp.topic, tp.partition)  # offline until the cluster's state of it is applied
        self.watcher = MetadataWatcher(
            zk,
            node_id=node_id,
            metadata=metadata,
            replicas=replicas,
            logs=logs,
            log_config=self.log_config,
            broker_configs=configs,
        )
        self.admin = ZkAdminManager(zk, metadata=metadata, watcher=self.watcher, configs=configs)
        self.producer_ids = ZkProducerIdManager(zk, node_id=node_id)
        self.membership = BrokerMembership(
            zk,
            self._registration,
            on_fenced=self._fenced,
            on_registered=self._registered,
            wait_for_id_s=2 * self.config.zookeeper_session_timeout_ms / 1000 + 5,
        )
        replicas.set_isr_writer(self._write_isr)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def config(self) -> BrokerConfig:
        return self._configs.config

    @property
    def broker_epoch(self) -> int:
        return self.membership.epoch

    def log_config(self, topic_configs: dict[str, str]) -> LogConfig:
        return log_config_for_topic(self.config, topic_configs)

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(
            self.node_id,
            tuple(Endpoint(name, host, port, protocol) for name, host, port, protocol in self._advertised()),
            timestamp_ms=time.time_ns() // 1_000_000,
            rack=self.config.broker_rack,
        )

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the cluster, take this broker's roles, then register (see the module docstring)."""
        await self.producer_ids.start()
        await self.watcher.start()
        await self.membership.register()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._check_isrs()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.membership.stop()
        await self.watcher.stop()

    async def _check_isrs(self) -> None:
        """Kafka's ``isr-expiration`` task: every ``replica.lag.time.max.ms / 2``."""
        while True:
            await asyncio.sleep(max(self.config.replica_lag_time_max_ms / 2, 100) / 1000)
            try:
                self._replicas.shrink_isrs()
            except Exception:
                log.exception("the ISR check failed")

    # -- ISR writes and fencing ------------------------------------------------------------------------

    async def _write_isr(self, topic: str, index: int, proposal: LeaderAndIsr) -> LeaderAndIsr | None:
        try:
            written = await self.zk.update_isr(TopicPartition(topic, index), proposal)
        except ZkError as exc:
            log.warning(
                "%s-%d: the ISR change to %s was not written: %s", topic, index, list(proposal.isr), exc
            )
            return None
        if isinstance(written, BadVersion):
            log.info(
                "%s-%d: the ISR change to %s was refused (the partition changed meanwhile); deciding again",
                topic,
                index,
                list(proposal.isr),
            )
            return None
        log.info(
            "%s-%d: ISR is now %s (partition epoch %d)",
            topic,
            index,
            list(written.isr),
            written.partition_epoch,
        )
        return written

    def _fenced(self) -> None:
        self._replicas.fence()

    async def _registered(self, epoch: int) -> None:
        log.info("registered again with broker epoch %d: reading the cluster's state", epoch)
        self._replicas.unfence()
        await self.watcher.resync()
