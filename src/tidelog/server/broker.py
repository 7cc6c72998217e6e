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
from functools import partial
from pathlib import Path
from typing import Any

from tidelog.server.config import BrokerConfig, ConfigError, log_config_for_topic
from tidelog.server.config.listeners import advertised_endpoint
from tidelog.storage.errors import InvalidConfigError
from tidelog.storage.log_manager import LogManager

from .connection import Connection
from .dispatch import Dispatcher, Route
from .dynamic_config import DynamicBrokerConfigs
from .fetch_purgatory import FetchPurgatory
from .group_runtime import GroupRuntime
from .listeners import BoundListener, bind_client_listeners, canonical_hostname
from .log_cleaner_task import LogCleanerTask, cleaner_config
from .log_flush_task import LogFlushTask
from .metadata_store import MetadataStore, TopicMetadata
from .producer_id_floor import highest_in_logs
from .producer_id_manager import PRODUCER_ID_BLOCK_FILE, ProducerIdManager
from .replica_manager import ReplicaManager
from .txn_runtime import TransactionRuntime

__all__ = ["Broker", "now_ms"]

log = logging.getLogger("tidelog.broker")


def now_ms() -> int:
    """The wall clock in milliseconds: read here, in the server, and passed down."""
    return time.time_ns() // 1_000_000


class Broker:
    """A single tidelog broker process."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        log_dirs = [Path(d) for d in config.log_dirs]
        log_dirs[0].mkdir(parents=True, exist_ok=True)
        self.dynamic_configs = DynamicBrokerConfigs(config, log_dirs[0])
        self.config = self.dynamic_configs.config
        self.metadata = MetadataStore(log_dirs[0])
        self.logs = LogManager(
            log_dirs,
            log_config_for_topic(self.config, {}),
            now_ms=now_ms(),
            node_id=config.node_id,
            cluster_id=config.cluster_id,
            topic_config=self._topic_log_config,
        )
        self.cluster_id = self.logs.cluster_id
        self.producer_ids = ProducerIdManager(log_dirs[0] / PRODUCER_ID_BLOCK_FILE, node_id=config.node_id)
        self.producer_ids.raise_floor(*highest_in_logs(self.logs))  # before strays are closed
        self.fetch_purgatory = FetchPurgatory()
        self.replicas = ReplicaManager(self.logs, self.fetch_purgatory.on_append)
        self.log_cleaner = LogCleanerTask(
            self.logs,
            cleaner_config(config),
            clock_ms=now_ms,
            after_swap=self.logs.checkpoint_recovery_points,
        )
        self.log_flusher = LogFlushTask(lambda: [p.log for p in self.replicas], clock_ms=now_ms)
        self._reconcile_topics()
        self.groups = GroupRuntime(self)
        self.transactions = TransactionRuntime(self)
        self.dispatcher = Dispatcher(self._routes())
        self.host = ""
        self.port = 0
        self.bound_listeners: list[BoundListener] = []
        self._connections: dict[int, Connection] = {}
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._background: list[asyncio.Task[None]] = []
        self._connection_ids = itertools.count(1)
        self._stopping = False

    # -- topics ----------------------------------------------------------------------------------------

    def _topic_log_config(self, name: str) -> Any:
        topic = self.metadata.get(name)
        return None if topic is None else self.log_config(topic)

    def _reconcile_topics(self) -> None:
        known = {(t.name, p) for t in self.metadata for p in range(t.num_partitions)}
        for name, index in list(self.logs.all_logs()):
            if (name, index) not in known:
                stray = self.logs.mark_stray(name, index)
                log.warning(
                    "partition %s-%s is not in the topic metadata: kept as %s, not served (remove it once sure"
                    " its data is not needed)",
                    name,
                    index,
                    stray,
                )
        for topic in self.metadata:
            config = self.log_config(topic)
            for index in range(topic.num_partitions):
                if self.replicas.load(topic.name, index) is None:
                    self.replicas.create(topic.name, index, config)

    def log_config(self, topic: TopicMetadata) -> Any:
        return log_config_for_topic(self.config, topic.configs)

    @staticmethod
    def now_ms() -> int:
        return now_ms()

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        is_internal: bool = False,
    ) -> TopicMetadata:
        topic = self.metadata.create(
            name, num_partitions, replication_factor, configs, is_internal=is_internal
        )
        log_config = self.log_config(topic)
        for index in range(num_partitions):
            self.replicas.create(name, index, log_config)
        log.info("created topic %s with %d partitions (id %s)", name, num_partitions, topic.topic_id)
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        """Delete the topic, its partitions and every group's committed offsets of it. The offsets go
        first: a crash in between leaves the topic without offsets, never offsets that a topic created
        later with the same name would inherit."""
        if name not in self.metadata:
            raise KeyError(name)
        self.groups.on_topics_deleted([name])
        topic = self.metadata.delete(name)
        for index in range(topic.num_partitions):
            self.replicas.delete(name, index)
        log.info("deleted topic %s", name)
        return topic

    def add_partitions(self, name: str, count: int) -> TopicMetadata:
        topic = self.metadata.set_partitions(name, count)
        log_config = self.log_config(topic)
        for index in range(count):
            if self.replicas.get(name, index) is None:
                self.replicas.create(name, index, log_config)
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        topic = self.metadata.set_configs(name, configs)
        self._apply_log_config(topic)
        return topic

    def alter_broker_configs(self, entity: str, configs: dict[str, str], *, validate_only: bool) -> None:
        """Make ``configs`` (validated) the dynamic layer ``entity`` (``""`` or this node's id): stored, then
        applied live to every partition log. Raises ``ConfigError`` and changes nothing if it cannot be."""
        config = self.dynamic_configs.propose(entity, configs)
        try:
            log_configs = {topic.name: log_config_for_topic(config, topic.configs) for topic in self.metadata}
        except InvalidConfigError as exc:
            raise ConfigError(str(exc)) from None
        if validate_only:
            return
        self.dynamic_configs.commit(entity, configs, config)
        self.config = config
        for topic in self.metadata:
            for index in range(topic.num_partitions):
                partition = self.replicas.get(topic.name, index)
                if partition is not None:
                    partition.log.update_config(log_configs[topic.name])
        level = "cluster default" if entity == "" else f"broker {entity}"
        log.info("dynamic broker configs (%s) are now %s", level, configs or "empty")

    def _apply_log_config(self, topic: TopicMetadata) -> None:
        log_config = self.log_config(topic)
        for index in range(topic.num_partitions):
            partition = self.replicas.get(topic.name, index)
            if partition is not None:
                partition.log.update_config(log_config)

    # -- lifecycle -------------------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        from .handlers import ROUTES

        return [Route(api_key, lo, hi, partial(handler, self)) for api_key, lo, hi, handler in ROUTES]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.bound_listeners = bind_client_listeners(self.config)
        first = self.bound_listeners[0]
        self.host, self.port = first.host, first.port
        self.groups.start()
        self.transactions.start()
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
            loop.create_task(self.fetch_purgatory.run()),
            loop.create_task(self.groups.run_loader()),
            loop.create_task(self.groups.run_clock()),
            loop.create_task(self.transactions.run_loader()),
            loop.create_task(self.transactions.run_clock()),
        ]
        if self.log_cleaner.enabled:
            self._background.append(
                loop.create_task(
                    self._every(lambda: self.config.log_cleaner_backoff_ms, self.log_cleaner.run_once)
                )
            )
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
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection_id = next(self._connection_ids)
            peer = f"{address[0]}:{address[1]}"
            connection = Connection(
                client,
                peer,
                connection_id,
                self.dispatcher,
                max_request_bytes=self.config.socket_request_max_bytes,
                listener_name=bound.name,
            )
            self._connections[connection_id] = connection
            task = loop.create_task(self._serve(connection_id, connection))
            self._connection_tasks.add(task)
            task.add_done_callback(self._connection_tasks.discard)

    async def _serve(self, connection_id: int, connection: Connection) -> None:
        try:
            await connection.serve()
        except Exception:
            log.exception("connection %s from %s failed", connection_id, connection.peer)
        finally:
            connection.close()
            self._connections.pop(connection_id, None)

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
        now = now_ms()
        for partition in self.replicas:
            deleted = partition.log.delete_retention(now)
            if deleted:
                log.info(
                    "retention deleted %d segment(s) of %s-%s", deleted, partition.topic, partition.index
                )
            partition.log.remove_deleted_files(now)

    def _expire_producers(self) -> None:
        now = now_ms()
        for partition in self.replicas:
            partition.log.remove_expired_producers(now, self.config.producer_id_expiration_ms)

    def _checkpoint(self) -> None:
        self.logs.checkpoint_recovery_points()
        self.logs.checkpoint_log_start_offsets()

    def _close_idle(self) -> None:
        limit = self.config.connections_max_idle_ms / 1000
        cutoff = time.monotonic() - limit
        for connection in list(self._connections.values()):
            if connection.last_active < cutoff and not connection.busy:
                log.info("closing idle connection from %s", connection.peer)
                connection.close()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Graceful shutdown: stop accepting, drain, close, flush, checkpoint, mark clean."""
        self._stopping = True
        for bound in self.bound_listeners:
            bound.sock.close()
        for task in self._background:
            task.cancel()
        for connection in list(self._connections.values()):
            connection.stop_reading()
        self.fetch_purgatory.complete_all()
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
        self.logs.shutdown(now_ms())
        log.info("shut down cleanly")
