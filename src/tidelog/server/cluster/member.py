"""The cluster-mode parts of one broker, built and wired in one place (the single-node broker has none of
them): the metadata watcher, the ZooKeeper topic admin, producer ids from ZooKeeper, the broker's
registration, the controller, the inter-broker clients (the replica fetchers' own, and one for everything
else: transaction markers, controlled shutdown), the ISR writer, the periodic ISR check and the controlled
shutdown.

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
6. The controller campaigns only once this broker is registered; a stopping broker first asks the
   controller to move its leaderships away (ControlledShutdown, ``controlled.shutdown.max.retries`` times,
   ``controlled.shutdown.retry.backoff.ms`` apart) until it leads nothing another live replica could lead
   (a partition whose other replicas are all on brokers that are not registered cannot move, so it is not
   waited for: the last broker of a cluster stops at once instead of after every retry), waits (at most
   the retry backoff) until it has applied those leader changes itself, so that the produces it holds are
   answered NOT_LEADER_OR_FOLLOWER with the new leader, then resigns as controller, then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import ControlledShutdownRequest, ControlledShutdownResponse
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.partition import Partition
from tidelog.server.clock import Clock
from tidelog.server.config import BrokerConfig, log_config_for_topic
from tidelog.server.dynamic_config import DynamicBrokerConfigs
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.replication_quota import ReplicationQuotaManager
from tidelog.server.security.inter_broker_sasl import inter_broker_authenticate
from tidelog.server.security.tls_config import inter_broker_tls
from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.errors import BadVersion, ZkError
from tidelog.server.zk.zk_data import BrokerRegistration, Endpoint
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

from .broker_client import BrokerClient
from .client_errors import BrokerClientError, RequestTimeoutError
from .controller import Controller, ControllerConfig
from .fetcher_config import ReplicaFetcherConfig
from .inter_broker import inter_broker_listener_name
from .log_dir_events import announce_log_dir_failure
from .membership import BrokerMembership
from .metadata_watcher import MetadataWatcher
from .replica_fetcher import ReplicaFetcherManager
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
        clock: Clock,
    ) -> None:
        self.zk = zk
        self.node_id = node_id
        self._configs = configs
        self._clock = clock
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
        self._log_dir_events: set[asyncio.Task[None]] = set()  # issue 15 hook: failed log dirs announced
        replicas.log_dir_failure_listeners.append(
            announce_log_dir_failure(zk, replicas, node_id, self._log_dir_events)
        )
        self.controller = Controller(
            zk, node_id, config=ControllerConfig.from_broker_config(self.config), clock=clock
        )
        # TLS on an SSL / SASL_SSL inter-broker listener (the SASL exchange will plug into BrokerClient's
        # ``authenticate`` hook); a bad TLS setting raises ConfigError here, naming the key
        inter_broker_ssl = inter_broker_tls(self.config, inter_broker_listener_name(self.config))
        # SASL on a SASL_* inter-broker listener: each new connection logs in (a bad login is a ConfigError here)
        inter_broker_login = inter_broker_authenticate(self.config)
        self.client = BrokerClient(
            node_id,
            self.endpoint_for,
            request_timeout_ms=self.config.replica_socket_timeout_ms,
            ssl_context=inter_broker_ssl,
            authenticate=inter_broker_login,
        )
        # The fetchers have connections of their own (Kafka's fetcher threads each have their NetworkClient):
        # a broker answers a connection's requests in order, so a WriteTxnMarkers waiting for its marker to
        # be replicated would hold up, on a shared connection, the very fetch that replicates it.
        self.fetcher_client = BrokerClient(
            node_id,
            self.endpoint_for,
            client_id=f"broker-{node_id}-fetcher",
            request_timeout_ms=self.config.replica_socket_timeout_ms,
            ssl_context=inter_broker_ssl,
            authenticate=inter_broker_login,
        )
        self.fetchers = ReplicaFetcherManager(
            replicas,
            self.fetcher_client,
            metadata=metadata,
            node_id=node_id,
            broker_epoch=lambda: self.membership.epoch,
            clock=clock,
            config=ReplicaFetcherConfig.from_broker_config(self.config),
        )
        # issue 15 hook: replication throttles (server/replication_quota.py), rates from the dynamic broker
        # configs and throttled replicas from the topic configs, both read at each fetch
        self.leader_quota = ReplicationQuotaManager.for_side(
            "leader", broker_id=node_id, config=lambda: self.config, topic_configs=self.watcher.topic_configs
        )
        self.fetchers.quota = ReplicationQuotaManager.for_side(
            "follower",
            broker_id=node_id,
            config=lambda: self.config,
            topic_configs=self.watcher.topic_configs,
        )
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def config(self) -> BrokerConfig:
        return self._configs.config

    @property
    def broker_epoch(self) -> int:
        return self.membership.epoch

    def endpoint_for(self, node_id: int) -> tuple[str, int] | None:
        """Where this broker reaches broker ``node_id``: its endpoint on ``inter.broker.listener.name``
        (else the listener named by ``security.inter.broker.protocol``, else its first one)."""
        broker = self._metadata.broker(node_id)
        if broker is None:
            return None
        endpoint = broker.endpoint(inter_broker_listener_name(self.config)) or broker.endpoint()
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def log_config(self, topic_configs: dict[str, str]) -> LogConfig:
        return log_config_for_topic(self.config, topic_configs)

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(
            self.node_id,
            tuple(Endpoint(name, host, port, protocol) for name, host, port, protocol in self._advertised()),
            timestamp_ms=self._clock.now_ms(),
            rack=self.config.broker_rack,
        )

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the cluster, take this broker's roles, then register (see the module docstring)."""
        await self.producer_ids.start()
        await self.watcher.start()
        self.fetchers.start()
        await self.membership.register()
        await self.controller.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._check_isrs()))

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away (Kafka's ``controlledShutdown``)."""
        config = self.config
        for attempt in range(config.controlled_shutdown_max_retries + 1):
            if attempt:
                await asyncio.sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
            try:
                remaining = await self._request_controlled_shutdown()
            except (BrokerClientError, KafkaProtocolError) as exc:
                log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
                continue
            movable = {tp for tp in remaining if self._another_replica_is_live(tp)}
            if not movable:
                await self._await_demotion(remaining)
                log.info(
                    "controlled shutdown done: leading %d partitions with no other live replica",
                    len(remaining),
                )
                return
            log.info("controlled shutdown: still leading %d partitions others could lead", len(movable))
        log.warning("controlled shutdown did not complete; stopping anyway")

    async def _await_demotion(self, kept: set[TopicPartition]) -> None:
        """Until the replica manager has applied the leader changes the controller answered about (the
        watcher delivers them from ZooKeeper, possibly after the answer: at once when this broker is the
        controller), at most ``controlled.shutdown.retry.backoff.ms``. The acks=all produces waiting on a
        partition that moved are then answered NOT_LEADER_OR_FOLLOWER with the new leader (KIP-951), and
        the client goes there at once, rather than REQUEST_TIMED_OUT when the broker stops."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.controlled_shutdown_retry_backoff_ms / 1000

        def still_leading() -> list[Partition]:
            return [p for p in self._replicas if p.is_leader and TopicPartition(p.topic, p.index) not in kept]

        while led := still_leading():
            if loop.time() >= deadline:
                log.warning(
                    "controlled shutdown: %d moved leaderships not applied here yet; stopping", len(led)
                )
                return
            await asyncio.sleep(0.01)

    def _assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        partition = self._metadata.partition(tp.topic, tp.partition)
        return () if partition is None else partition.replicas

    def _another_replica_is_live(self, tp: TopicPartition) -> bool:
        """Whether a replica of ``tp`` other than this broker's is on a registered broker (one that could
        take the leadership over once in the ISR, so a retry may move it)."""
        return any(r != self.node_id and self._metadata.is_alive(r) for r in self._assignment(tp))

    async def _request_controlled_shutdown(self) -> set[TopicPartition]:
        if self.controller.is_active:
            # bounded as a request to another broker is: the controller's work may wait on ZooKeeper
            # (its writes are retried until it is back), and a stopping broker must not wait forever
            timeout_ms = self.config.replica_socket_timeout_ms
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    return await self.controller.controlled_shutdown(self.node_id, self.broker_epoch)
            except TimeoutError:
                raise RequestTimeoutError(
                    self.node_id, None, f"this broker's controller did not answer within {timeout_ms} ms"
                ) from None
        controller_id = self._metadata.controller_id
        if controller_id < 0:
            raise KafkaProtocolError("no controller is known", ErrorCode.NOT_CONTROLLER)
        response = await self.client.send(
            controller_id,
            ControlledShutdownRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch),
            3,
            expect=ControlledShutdownResponse,
        )
        if response.error_code != ErrorCode.NONE:
            raise KafkaProtocolError(
                f"the controller answered {ErrorCode(response.error_code).name}",
                ErrorCode(response.error_code),
            )
        return {TopicPartition(p.topic_name, p.partition_index) for p in response.remaining_partitions}

    async def stop_replication(self) -> None:
        """Stop fetching from the leaders (the broker is stopping)."""
        await self.fetchers.shutdown()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.controller.stop()
        await self.membership.stop()
        await self.watcher.stop()
        await self.client.close_all()
        await self.fetcher_client.close_all()

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
        self.fetchers.resync()
