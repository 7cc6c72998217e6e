"""The broker: wires config, storage, topic metadata, the purgatory, the dispatcher and the listeners.

Invariants:
- Start-up order: load topic metadata, recover every partition log (LogManager), reconcile the two
  (create partitions the metadata names but the disk lacks; rename a partition it does not name to
  ``-stray`` and keep it, as Kafka does with stray logs), and
  only then bind the listeners: a client never sees a half-loaded broker. Before the bind the producer id
  floor is raised above every producer id in the loaded logs' producer states (stray ones too), and the
  transaction runtime holds producer ids until ``__transaction_state`` is loaded (producer_id_manager.py):
  no producer id in use is handed out again, whatever became of the ``producer-id-block`` file.
- Shutdown order (SIGTERM/SIGINT): stop accepting, let in-flight requests finish (bounded), close
  connections, then flush every log, write checkpoints and the clean-shutdown marker (LogManager.shutdown).
- Background work runs on this one event loop: the purgatory clock, retention every
  ``log.retention.check.interval.ms``, removal of ``.deleted`` files after ``file.delete.delay.ms``,
  expiry of idle producer ids every ``producer.id.expiration.check.interval.ms``,
  checkpoints, closing idle connections after ``connections.max.idle.ms``, and the
  group coordinator's runtime (loading ``__consumer_offsets`` partitions, its timers; see group_runtime.py)
  and the transaction coordinator's (``__transaction_state``, markers, timeouts; see txn_runtime.py).
  The log cleaner runs every ``log.cleaner.backoff.ms``, cleaning in a worker thread (log_cleaner_task.py).
  The periodic flush (rolled segments, ``flush.ms``) is planned and completed on the loop and fsyncs in a
  worker thread (log_flush_task.py); stopping awaits it before the logs are flushed and closed.
  Stopping unloads the coordinators first, so parked JoinGroup/SyncGroup requests are answered.
- User and client entity configs (client quotas, SCRAM credentials: entity_configs.py) and group configs
  (group_configs.py) are read before the listeners bind: from the first log dir on a single node, from
  ZooKeeper in a cluster, where the metadata watcher's change notifications keep them current.
- ``self.config`` is the effective config: the static one with the dynamic broker configs laid over it
  (dynamic_config.py). Altering them stores them first, then swaps ``self.config`` and gives every
  partition log its re-derived ``LogConfig`` (topics without an override take the new defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tidelog.server.config import BrokerConfig, log_config_for_topic
from tidelog.server.config.listeners import advertised_endpoint
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

from .admin_manager import AdminManager, TopicAdmin
from .clock import SYSTEM_CLOCK, Clock
from .cluster.member import ClusterMember
from .connection import Connection
from .dispatch import ANONYMOUS, Dispatcher, KafkaPrincipal
from .dynamic_config import DynamicBrokerConfigs
from .entity_configs import EntityConfigs, FileEntityConfigs, ZkEntityConfigs
from .fetch_sessions import FetchSessionCache
from .group_configs import GroupConfigStore
from .group_runtime import GroupRuntime
from .handlers import build_routes
from .listeners import BoundListener, bind_client_listeners, canonical_hostname
from .log_cleaner_task import LogCleanerTask, cleaner_config
from .log_dir_moves import LogDirMoves
from .log_flush_task import LogFlushTask
from .metadata_cache import BrokerInfo, Endpoint, MetadataCache
from .metadata_store import MetadataStore
from .metrics.endpoint import MetricsEndpoint
from .metrics.setup import metrics_for, start_metrics_endpoint
from .open_files_limit import max_open_segments
from .producer_id_floor import highest_in_logs
from .producer_id_manager import PRODUCER_ID_BLOCK_FILE, ProducerIdManager, ProducerIds
from .recovery_progress import RecoveryProgressLog
from .replica_manager import ReplicaManager
from .security.acl_store import AclStore, LocalAclStore, authorizer_from_config
from .security.client_quotas import client_quotas_for
from .security.quota_throttling import QuotaEnforcer
from .security.sasl_config import sasl_session_factory
from .security.scram_credentials import credential_lookup
from .security.tls_accept import accept_tls
from .security.tls_config import ListenerTls, listener_tls
from .security.zk_acl_store import ZkAclStore
from .share_membership import ShareMembership
from .share_persister import SharePersister
from .share_routing import ShareRouting
from .share_runtime import ShareRuntime, share_defaults
from .share_state_runtime import ShareStateRuntime
from .transport import PlainTransport, Transport
from .txn_runtime import TransactionRuntime
from .zk.client import KafkaZkClient

__all__ = ["Broker"]

log = logging.getLogger("tidelog.broker")


class Broker:
    """A single tidelog broker process: the one place its parts are built and wired together."""

    def __init__(
        self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK, zk: KafkaZkClient | None = None
    ) -> None:
        """A single node, or with ``zk`` (connected, its cluster id in ``config.cluster_id``) a cluster member."""
        self.clock = clock
        self.node_id = config.node_id
        log_dirs = [Path(d) for d in config.log_dirs]
        log_dirs[0].mkdir(parents=True, exist_ok=True)
        self.dynamic_configs = DynamicBrokerConfigs(config, log_dirs[0])
        self.metadata_store = MetadataStore(log_dirs[0]) if zk is None else None
        self.acls: AclStore | None = None  # authorization: set when authorizer.class.name is
        authorizer = authorizer_from_config(config)
        if authorizer is not None:
            self.acls = LocalAclStore(log_dirs[0], authorizer) if zk is None else ZkAclStore(zk, authorizer)
        # issue 17 hook: the open-files limit raised (one descriptor per connection, 10,000 connections)
        # before the logs load, and descriptors and maps of segments bounded under it
        open_segments = max_open_segments(config.log_max_open_segments)
        self.logs = LogManager(
            log_dirs,
            log_config_for_topic(self.dynamic_configs.config, {}),
            now_ms=clock.now_ms(),
            node_id=config.node_id,
            cluster_id=config.cluster_id,
            topic_config=self._stored_topic_log_config,
            max_open_segments=open_segments,
            recovery_progress=RecoveryProgressLog(),  # issue 14 hook: recovery progress in the log
            producer_id_expiration_ms=lambda: self.config.producer_id_expiration_ms,
        )
        self.cluster_id = self.logs.cluster_id
        self.metadata = MetadataCache(self.node_id, self.cluster_id)
        self.replicas = ReplicaManager(
            self.logs,
            clock,
            node_id=self.node_id,
            metadata=self.metadata,
            cluster_mode=zk is not None,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
        )
        self.fetch_purgatory = self.replicas.fetch_purgatory
        self.log_dir_moves = LogDirMoves(  # issue 15 hook: JBOD moves
            self.replicas,
            self.logs,
            clock,
            chunk_bytes=config.replica_fetch_max_bytes,
            rate=lambda: self.config.replica_alter_log_dirs_io_max_bytes_per_second,
        )
        # issue 14 hook: metrics (None when metrics.listener is unset: nothing counted, nothing bound)
        self.metrics = metrics_for(config)
        self.metrics_endpoint: MetricsEndpoint | None = None
        if self.metrics is not None:
            self.replicas.topic_metrics = self.metrics.topics
        self.admin: TopicAdmin
        self.producer_ids: ProducerIds
        self.cluster: ClusterMember | None = None
        self.entity_configs: EntityConfigs
        self._zk_entity_configs: ZkEntityConfigs | None = None
        self.group_configs: GroupConfigStore  # per-group overrides; configs_of is the coordinators' lookup
        if zk is None:
            assert self.metadata_store is not None
            self.entity_configs = FileEntityConfigs(log_dirs[0])
            self.group_configs = GroupConfigStore.on_disk(log_dirs[0], lambda: self.config)
            self.metadata.set_controller(self.node_id)
            producer_ids = ProducerIdManager(log_dirs[0] / PRODUCER_ID_BLOCK_FILE, node_id=config.node_id)
            self.producer_ids = producer_ids
            local_admin = AdminManager(
                node_id=self.node_id,
                store=self.metadata_store,
                configs=self.dynamic_configs,
                replicas=self.replicas,
                cache=self.metadata,
            )
            self.admin = local_admin
        else:
            self.cluster = ClusterMember(
                zk,
                node_id=self.node_id,
                configs=self.dynamic_configs,
                metadata=self.metadata,
                replicas=self.replicas,
                logs=self.logs,
                advertised=self._advertised_endpoints,
                clock=clock,
            )
            self.admin = self.cluster.admin
            self.producer_ids = self.cluster.producer_ids
            self._zk_entity_configs = ZkEntityConfigs(zk)
            self.entity_configs = self._zk_entity_configs
            self.cluster.watcher.add_entity_config_listener(self._zk_entity_configs.reload)
            self.group_configs = GroupConfigStore.in_zookeeper(zk, lambda: self.config)
            self.cluster.watcher.add_entity_config_listener(self.group_configs.reload)
        self.producer_ids.raise_floor(*highest_in_logs(self.logs))  # before strays are closed
        self.log_cleaner = LogCleanerTask(
            self.logs,
            cleaner_config(config),
            clock_ms=clock.now_ms,
            after_swap=self.logs.checkpoint_recovery_points,
        )
        self.log_flusher = LogFlushTask(  # issue 17: logs of offline log dirs are left alone
            self.replicas.logs_to_flush,
            clock_ms=clock.now_ms,
            on_io_error=lambda plog, exc: self.replicas.log_dir_failed(plog.dir.parent, plog.dir.name, exc),
        )
        if zk is None:
            local_admin.load(self.logs)
        self.groups = GroupRuntime(
            admin=self.admin,
            metadata=self.metadata,
            replicas=self.replicas,
            clock=clock,
            group_configs=self.group_configs.configs_of,
        )
        self.transactions = TransactionRuntime(
            admin=self.admin,
            metadata=self.metadata,
            replicas=self.replicas,
            producer_ids=self.producer_ids,
            groups=self.groups,
            clock=clock,
        )
        if self.cluster is not None:
            self.transactions.set_broker_client(self.cluster.client)
        # issue 13 hook: share groups, each group's settings from its GROUP configs over the broker's
        # group.share.* defaults
        self.share_states = ShareStateRuntime(
            admin=self.admin, metadata=self.metadata, replicas=self.replicas, clock=clock
        )
        self.shares = ShareRuntime(
            replicas=self.replicas,
            metadata=self.metadata,
            purgatory=self.fetch_purgatory,
            clock=clock,
            defaults=share_defaults(config),
            group_configs=self.group_configs.configs_of,
            state=self.share_states,
        )
        self.shares.set_membership(ShareMembership(self.groups))  # issue 13: membership in __consumer_offsets
        self.shares.dead_letters.admin = self.admin  # KIP-1191: auto-creates dead-letter topics if enabled
        self.shares.dead_letters.producer.producer_ids = self.producer_ids  # idempotent dead-letter copies
        self.share_routing: ShareRouting | None = None
        if self.cluster is not None:  # issue 13 cluster hook: coordinators and share-partition leaders
            persister = SharePersister(
                local=self.share_states,
                metadata=self.metadata,
                replicas=self.replicas,
                client=self.cluster.client,
            )
            self.shares.set_state_store(persister)
            self.shares.dead_letters.producer.client = self.cluster.client  # copies to other brokers' leaders
            self.share_routing = ShareRouting(
                runtime=self.shares,
                groups=self.groups,
                persister=persister,
                metadata=self.metadata,
                replicas=self.replicas,
            )
        self.client_quotas = client_quotas_for(config, self.entity_configs)
        self.quota_enforcer = QuotaEnforcer(self.client_quotas, clock, self._mute)
        # issue 17 hook: incremental fetch sessions (KIP-227)
        self.fetch_sessions = FetchSessionCache(
            max_entries=config.max_incremental_fetch_session_cache_slots,
            eviction_ms=config.min_incremental_fetch_session_eviction_ms,
        )
        if self.metrics is not None:  # issue 14 hook: quota sensors, read at scrape time
            self.metrics.quota_values = lambda: self.client_quotas.metric_values(clock.now_ms())
        self.dispatcher = Dispatcher(
            self.quota_enforcer.wrap(
                build_routes(
                    replicas=self.replicas,
                    metadata=self.metadata,
                    admin=self.admin,
                    groups=self.groups,
                    transactions=self.transactions,
                    producer_ids=self.producer_ids,
                    fetch_purgatory=self.fetch_purgatory,
                    clock=clock,
                    controller=lambda: self.cluster.controller if self.cluster is not None else None,
                    acls=self.acls,
                    entity_configs=self.entity_configs,
                    client_quotas=self.client_quotas,
                    group_configs=self.group_configs,
                    fetch_sessions=self.fetch_sessions,
                    shares=self.shares,
                    share_routing=self.share_routing,
                    share_states=self.share_states,
                    fetch_max_bytes=self.config.fetch_max_bytes,
                    log_dir_moves=self.log_dir_moves,
                    # issue 15 hook: replication throttles (leader side)
                    leader_replication_quota=self.cluster.leader_quota if self.cluster is not None else None,
                )
            )
        )
        self._sasl_session = sasl_session_factory(config, credential_lookup(self.entity_configs))
        self.host = ""
        self.port = 0
        self.bound_listeners: list[BoundListener] = []
        self._listener_tls: dict[str, ListenerTls] = listener_tls(self.config)  # TLS listeners; ConfigError
        self._connections: dict[int, Connection] = {}
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._connection_ids = itertools.count(1)
        self._stopping = False
        if zk is None:
            self._publish_self()

    def _mute(self, connection_id: int, throttle_time_ms: int) -> None:
        """A client over its quota: its connection takes no request for ``throttle_time_ms``."""
        connection = self._connections.get(connection_id)
        if connection is not None:
            connection.mute_for(throttle_time_ms)

    @property
    def config(self) -> BrokerConfig:
        """The effective config: static, with the dynamic broker configs laid over it."""
        return self.dynamic_configs.config

    def _stored_topic_log_config(self, name: str) -> LogConfig | None:
        """A topic's log config at recovery: from the local store on a single node; in a cluster the
        defaults until the cluster's configs are read (the watcher applies them before anything is served)."""
        topic = self.metadata_store.get(name) if self.metadata_store is not None else None
        return None if topic is None else log_config_for_topic(self.dynamic_configs.config, topic.configs)

    def _advertised_endpoints(self) -> list[tuple[str, str, int, str]]:
        """(listener, host, port, security protocol) of every client listener, as clients are told them."""
        endpoints = []
        for listener in self.config.broker_listeners:
            host, port = self.advertised_host_port(listener.name)
            protocol = self.config.listener_security_protocol_map.get(listener.name, listener.name)
            endpoints.append((listener.name, host, port, protocol))
        return endpoints

    def _publish_self(self) -> None:
        """A single node's entry in the metadata cache: its advertised endpoint on every client listener."""
        endpoints = tuple(Endpoint(*e) for e in self._advertised_endpoints())
        self.metadata.put_broker(BrokerInfo(self.node_id, endpoints, rack=self.config.broker_rack))

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._zk_entity_configs is not None:
            await self._zk_entity_configs.load()  # SCRAM credentials and quotas, before any client connects
            self.client_quotas.apply_all()
            await self.group_configs.load()
        if isinstance(self.acls, ZkAclStore):
            await self.acls.start()  # before any listener: no request is authorized without the ACLs
        self.bound_listeners = bind_client_listeners(self.config)
        first = self.bound_listeners[0]
        self.host, self.port = first.host, first.port
        if self.cluster is None:
            self._publish_self()
        self.groups.start()
        self.transactions.start()
        self.share_states.start()
        self._background = [
            *(loop.create_task(self._accept_loop(bound)) for bound in self.bound_listeners),
            loop.create_task(self._every(self.config.log_retention_check_interval_ms, self._retention)),
            loop.create_task(
                self._every(min(self.config.log_flush_scheduler_interval_ms, 1000), self.log_flusher.run_once)
            ),
            loop.create_task(
                self._every(self.config.log_flush_offset_checkpoint_interval_ms, self._checkpoint)
            ),
            loop.create_task(self._every(min(self.config.connections_max_idle_ms, 10_000), self._close_idle)),
            loop.create_task(
                self._every(self.config.producer_id_expiration_check_interval_ms, self._expire_producers)
            ),
            loop.create_task(self.replicas.fetch_purgatory.run()),
            loop.create_task(self.replicas.produce_purgatory.run()),
            loop.create_task(self.groups.run_loader()),
            loop.create_task(self.groups.run_clock()),
            loop.create_task(self.transactions.run_loader()),
            loop.create_task(self.transactions.run_clock()),
            loop.create_task(self.share_states.run_loader()),
            loop.create_task(self.share_states.run_clock()),
        ]
        if self.log_cleaner.enabled:
            self._background.append(
                loop.create_task(
                    self._every(lambda: self.config.log_cleaner_backoff_ms, self.log_cleaner.run_once)
                )
            )
        if self.cluster is not None:
            await self.cluster.start()
        self.log_dir_moves.start()  # issue 15 hook: moves a restart interrupted go on
        if self.metrics is not None:  # issue 14 hook: metrics
            self.metrics_endpoint = await start_metrics_endpoint(self, self.metrics)
        for bound in self.bound_listeners:
            log.info(
                "listening on %s:%s for %s, advertised as %s:%s (node %s, cluster %s)",
                bound.host,
                bound.port,
                bound.name,
                *bound.advertised,
                self.node_id,
                self.cluster_id,
            )

    def advertised_host_port(self, listener_name: str | None = None) -> tuple[str, int]:
        """This broker's endpoint on ``listener_name`` (``None``: the first client listener), as clients
        are told it; before :meth:`start` binds, from the config with the configured port."""
        for bound in self.bound_listeners:
            if listener_name is None or bound.name == listener_name:
                return bound.advertised
        listener = self.config.advertised_listener(listener_name)
        return advertised_endpoint(listener, listener.port, canonical_hostname)

    async def _accept_loop(self, bound: BoundListener) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            try:
                client, address = await loop.sock_accept(bound.sock)
            except OSError as exc:
                if self._stopping:
                    return
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.05)
                continue
            if self._stopping:  # accepted in the same loop turn as stop(): nobody would serve or close it
                client.close()
                return
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection_id = next(self._connection_ids)
            peer = f"{address[0]}:{address[1]}"
            tls = self._listener_tls.get(bound.name)
            if tls is None:
                connection = self._connection(PlainTransport(client), peer, connection_id, bound, ANONYMOUS)
                self._connections[connection_id] = connection
                task = loop.create_task(self._serve(connection_id, connection))
            else:
                task = loop.create_task(self._serve_tls(client, peer, connection_id, bound, tls))
            self._connection_tasks.add(task)
            task.add_done_callback(self._connection_tasks.discard)

    def _connection(
        self,
        transport: Transport,
        peer: str,
        connection_id: int,
        bound: BoundListener,
        principal: KafkaPrincipal,
    ) -> Connection:
        return Connection(
            transport,
            peer,
            connection_id,
            self.dispatcher,
            max_request_bytes=self.config.socket_request_max_bytes,
            max_in_flight=self.config.queued_max_requests,
            listener_name=bound.name,
            principal=principal,
            security_protocol=bound.listener.security_protocol,
            request_metrics=None if self.metrics is None else self.metrics.requests,
            sasl=self._sasl_session(bound.listener),
        )

    async def _serve_tls(
        self, client: socket.socket, peer: str, connection_id: int, bound: BoundListener, tls: ListenerTls
    ) -> None:
        """A TLS listener's connection: the handshake (in this task, bounded), then served as any other."""
        accepted = await accept_tls(client, tls, peer=peer, connection_id=connection_id)
        if accepted is None:
            return
        if self._stopping:
            accepted.transport.close()
            return
        connection = self._connection(accepted.transport, peer, connection_id, bound, accepted.principal)
        self._connections[connection_id] = connection
        await self._serve(connection_id, connection)

    async def _serve(self, connection_id: int, connection: Connection) -> None:
        try:
            await connection.serve()
        except Exception:
            log.exception("connection %s from %s failed", connection_id, connection.peer)
        finally:
            connection.close()
            self._connections.pop(connection_id, None)

    def connection_listeners(self) -> list[str | None]:
        """The listener name of every open client connection (the connection-count gauge)."""
        return [connection.listener_name for connection in self._connections.values()]

    @property
    def metrics_port(self) -> int | None:
        """The bound port of ``metrics.listener`` (useful with port 0), None when metrics are off."""
        return None if self.metrics_endpoint is None else self.metrics_endpoint.port

    async def _every(
        self, interval_ms: int | Callable[[], int], action: Callable[[], Coroutine[Any, Any, None] | None]
    ) -> None:
        """Run ``action`` every ``interval_ms`` (a callable is asked again each time: a dynamic config)."""
        while True:
            interval = interval_ms() if callable(interval_ms) else interval_ms
            await asyncio.sleep(max(interval, 10) / 1000)
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("background task %s failed", getattr(action, "__name__", action))

    def _retention(self) -> None:
        now = self.clock.now_ms()
        for tp, partition_log in self.logs:
            deleted = partition_log.delete_retention(now)
            if deleted:
                log.info("retention deleted %d segment(s) of %s", deleted, tp)
            partition_log.remove_deleted_files(now)

    def _expire_producers(self) -> None:
        now = self.clock.now_ms()
        for _tp, partition_log in self.logs:
            partition_log.remove_expired_producers(now, self.config.producer_id_expiration_ms)

    def _checkpoint(self) -> None:
        self.logs.checkpoint_recovery_points()
        self.logs.checkpoint_log_start_offsets()
        self.logs.checkpoint_high_watermarks()

    def _close_idle(self) -> None:
        limit = self.config.connections_max_idle_ms / 1000
        cutoff = time.monotonic() - limit
        for connection in list(self._connections.values()):
            if connection.last_active < cutoff and not connection.busy:
                log.info("closing idle connection from %s", connection.peer)
                connection.close()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Graceful shutdown: (in a cluster, move leaderships away first,) stop accepting, drain, close,
        flush, checkpoint, mark clean."""
        if self.cluster is not None and self.config.controlled_shutdown_enable:
            await self.cluster.controlled_shutdown()
        self._stopping = True
        if self.metrics_endpoint is not None:  # issue 14 hook: metrics
            await self.metrics_endpoint.stop()
        for bound in self.bound_listeners:
            bound.sock.close()
        for task in self._background:
            task.cancel()
        for connection in list(self._connections.values()):
            connection.stop_reading()
        if self.cluster is not None:
            await self.cluster.stop_replication()
        self.log_dir_moves.shutdown()  # issue 15 hook: copies stop; a restart moves them on
        self.shares.dead_letters.shutdown()  # before the logs close (a drain never stops mid-copy)
        self.replicas.shutdown()
        self.share_states.shutdown()
        self.transactions.shutdown()
        self.groups.shutdown()
        if self._connection_tasks:
            _done, still_running = await asyncio.wait(list(self._connection_tasks), timeout=grace_s)
            for task in still_running:
                task.cancel()
        for connection in list(self._connections.values()):
            connection.close()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if isinstance(self.acls, ZkAclStore):
            await self.acls.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        self.logs.shutdown(self.clock.now_ms())
        log.info("shut down cleanly")
