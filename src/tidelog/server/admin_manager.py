"""Topic and config administration on a single node (Kafka's ``ZkAdminManager``'s jobs): create, delete and
grow topics, set topic config overrides and dynamic broker configs, and publish every change to the
:class:`~tidelog.server.metadata_cache.MetadataCache` the handlers answer from.

:class:`TopicAdmin` is what the handlers and coordinator runtimes use: this single-node
:class:`AdminManager` and the cluster's :class:`~tidelog.server.cluster.zk_admin.ZkAdminManager` both
implement it. Its operations are coroutines (a cluster waits for the metadata to show a change); here they
complete at once through the synchronous ``*_now`` methods.

Invariants:

- The :class:`~tidelog.server.metadata_store.MetadataStore` is the truth of which topics exist: a change is
  persisted there first, then the partitions' logs follow (created after, deleted after), then the cache
  shows it. A crash in between leaves logs the store does not name (strays, set aside at the next start)
  or names partitions the disk lacks (created at the next start), never a topic that half exists.
- Start-up (:meth:`AdminManager.load`): partitions the store names but the disk lacks are created; a
  partition dir the store does not name is renamed ``-stray`` and kept (Kafka's stray logs).
- Deleting a topic first tells the listeners (the group coordinator tombstones every group's offsets of
  it), so a topic created later with the same name inherits nothing.
- The effective broker config is ``configs.config``: the static config with the dynamic layers over it.
  Altering a layer validates the result for every topic before anything is stored, stores it, then gives
  every partition log its re-derived :class:`~tidelog.storage.config.LogConfig` (topics without an
  override take the new defaults at once).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tidelog.protocol.errors import ErrorCode
from tidelog.replication.replica_assignment import (
    AssignmentError,
    assign_replicas_to_brokers,
    check_assignment,
)
from tidelog.server.config import BrokerConfig, ConfigError, log_config_for_topic
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import InvalidConfigError, KafkaStorageError
from tidelog.storage.log_manager import LogManager

from .admin_errors import AdminError
from .dynamic_config import DynamicBrokerConfigs
from .metadata_cache import MetadataCache, PartitionInfo, TopicInfo
from .metadata_store import MetadataStore, TopicMetadata
from .replica_manager import ReplicaManager

__all__ = ["AdminManager", "TopicAdmin", "TopicsDeletedListener"]

log = logging.getLogger("tidelog.admin")

TopicsDeletedListener = Callable[[list[str]], None]


class TopicAdmin(Protocol):
    """Topic and config administration, on a single node or in a cluster."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def dynamic_configs(self) -> DynamicBrokerConfigs: ...

    def add_topics_deleted_listener(self, listener: TopicsDeletedListener) -> None: ...

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig: ...

    def check_new_topic(
        self, num_partitions: int, replication_factor: int, assignments: Mapping[int, Sequence[int]] | None
    ) -> None:
        """Raise :class:`AdminError` if such a topic cannot be placed on the live brokers."""
        ...

    def ensure_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        is_internal: bool,
    ) -> TopicInfo | None:
        """The topic, created if missing; None while a cluster creates it in the background."""
        ...

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
        is_internal: bool = False,
        timeout_ms: int = 30_000,
    ) -> TopicInfo | None:
        """Create a topic; it once ready, None if ``timeout_ms`` ran out first. Raises :class:`AdminError`."""
        ...

    async def delete_topic(self, name: str, *, timeout_ms: int = 30_000) -> bool:
        """Delete a topic; True once it is gone."""
        ...

    async def add_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        timeout_ms: int = 30_000,
    ) -> bool:
        """Grow a topic to ``count`` partitions; True once they are ready. Raises :class:`AdminError`."""
        ...

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    async def alter_broker_configs(
        self, entity: str, configs: Mapping[str, str], *, validate_only: bool
    ) -> None: ...


class AdminManager:
    """Topics and configs of a single-node broker; see the module docstring."""

    def __init__(
        self,
        *,
        node_id: int,
        store: MetadataStore,
        configs: DynamicBrokerConfigs,
        replicas: ReplicaManager,
        cache: MetadataCache,
    ) -> None:
        self._node_id = node_id
        self._store = store
        self._configs = configs
        self._replicas = replicas
        self._cache = cache
        self._on_topics_deleted: list[TopicsDeletedListener] = []

    @property
    def config(self) -> BrokerConfig:
        """The effective broker config (static + dynamic layers)."""
        return self._configs.config

    @property
    def dynamic_configs(self) -> DynamicBrokerConfigs:
        return self._configs

    def add_topics_deleted_listener(self, listener: TopicsDeletedListener) -> None:
        self._on_topics_deleted.append(listener)

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig:
        return log_config_for_topic(self.config, topic_configs)

    def topic_log_config(self, name: str) -> LogConfig | None:
        """The log config of topic ``name`` (None: no such topic): for the log manager's recovery."""
        topic = self._store.get(name)
        return None if topic is None else self.log_config(topic.configs)

    # -- start-up --------------------------------------------------------------------------------------

    def load(self, logs: LogManager) -> None:
        """Match the recovered logs with the stored topics and publish them (see the module docstring)."""
        known = {(t.name, p) for t in self._store for p in range(t.num_partitions)}
        for name, index in list(logs.all_logs()):
            if (name, index) not in known:
                stray = logs.mark_stray(name, index)
                log.warning(
                    "partition %s-%s is not in the topic metadata: kept as %s, not served (remove it once sure"
                    " its data is not needed)",
                    name,
                    index,
                    stray,
                )
        for topic in self._store:
            config = self.log_config(topic.configs)
            for index in range(topic.num_partitions):
                if self._replicas.load(topic.name, index) is None:
                    self._replicas.create(topic.name, index, config, topic_id=topic.topic_id)
                elif self._replicas.holds_other_topic(topic.name, index, topic.topic_id):
                    log.warning(
                        "%s-%d names another topic id than the topic metadata; serving it anyway (a single "
                        "node's metadata is its only record of topics)",
                        topic.name,
                        index,
                    )
                else:
                    self._replicas.record_topic_id(topic.name, index, topic.topic_id)
            self._publish(topic)

    def _publish(self, topic: TopicMetadata) -> TopicInfo:
        node = self._node_id
        partitions = []
        for index in range(topic.num_partitions):
            replica = self._replicas.get(topic.name, index)
            partitions.append(
                PartitionInfo(
                    index=index,
                    leader=node if replica is not None else -1,
                    leader_epoch=replica.leader_epoch if replica is not None else -1,
                    replicas=(node,),
                    isr=(node,),
                )
            )
        info = TopicInfo(
            name=topic.name,
            topic_id=topic.topic_id,
            partitions=tuple(partitions),
            configs=dict(topic.configs),
            is_internal=topic.is_internal,
        )
        self._cache.put_topic(info)
        return info

    # -- topics ----------------------------------------------------------------------------------------

    def create_topic_now(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        is_internal: bool = False,
    ) -> TopicInfo:
        try:
            topic = self._store.create(
                name, num_partitions, replication_factor, dict(configs), is_internal=is_internal
            )
        except OSError as exc:
            raise KafkaStorageError(f"could not store topic {name}: {exc}") from exc
        try:
            self._make_partitions(topic)
        except OSError as exc:
            self._undo_create(name, num_partitions)
            raise KafkaStorageError(f"could not create the partitions of {name}: {exc}") from exc
        log.info("created topic %s with %d partitions (id %s)", name, num_partitions, topic.topic_id)
        return self._publish(topic)

    def _make_partitions(self, topic: TopicMetadata) -> None:
        """The partitions of a stored topic that this broker does not host yet."""
        log_config = self.log_config(topic.configs)
        for index in range(topic.num_partitions):
            if self._replicas.get(topic.name, index) is None:
                self._replicas.create(topic.name, index, log_config, topic_id=topic.topic_id)

    def _finish_create(self, topic: TopicMetadata) -> TopicInfo | None:
        """A topic stored but not all of whose partitions could be made, nor the store entry undone (a
        full disk): make the missing partitions now; None while that still fails."""
        try:
            self._make_partitions(topic)
        except OSError as exc:
            log.warning("could not create the partitions of %s: %s", topic.name, exc)
            return None
        log.info("created the remaining partitions of topic %s (id %s)", topic.name, topic.topic_id)
        return self._publish(topic)

    def _undo_create(self, name: str, num_partitions: int) -> None:
        """A topic whose partitions could not all be made (a full disk): forget it again, best effort (a
        store that cannot be rewritten now makes the missing partitions at the next start)."""
        for index in range(num_partitions):
            with contextlib.suppress(OSError, KeyError):
                self._replicas.delete(name, index)
        with contextlib.suppress(OSError):
            self._store.delete(name)

    def delete_topic_now(self, name: str) -> TopicInfo:
        """Delete the topic, its partitions and every group's committed offsets of it. The offsets go
        first: a crash in between leaves the topic without offsets, never offsets that a topic created
        later with the same name would inherit."""
        info = self._cache.topic(name)
        if info is None or name not in self._store:
            raise KeyError(name)
        for listener in self._on_topics_deleted:
            listener([name])
        topic = self._store.delete(name)
        self._cache.remove_topic(name)
        for index in range(topic.num_partitions):
            self._replicas.delete(name, index)
        log.info("deleted topic %s", name)
        return info

    def add_partitions_now(self, name: str, count: int) -> TopicInfo:
        topic = self._store.set_partitions(name, count)
        log_config = self.log_config(topic.configs)
        for index in range(count):
            if self._replicas.get(name, index) is None:
                self._replicas.create(name, index, log_config, topic_id=topic.topic_id)
        return self._publish(topic)

    def set_topic_configs_now(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        topic = self._store.set_configs(name, dict(configs))
        self._replicas.update_config(name, self.log_config(topic.configs))
        return self._publish(topic)

    # -- broker configs --------------------------------------------------------------------------------

    def alter_broker_configs_now(
        self, entity: str, configs: Mapping[str, str], *, validate_only: bool
    ) -> None:
        """Make ``configs`` (validated) the dynamic layer ``entity`` (``""`` or this node's id): stored, then
        applied live to every partition log. Raises ``ConfigError`` and changes nothing if it cannot be."""
        config = self._configs.propose(entity, configs)
        try:
            log_configs = {topic.name: log_config_for_topic(config, topic.configs) for topic in self._store}
        except InvalidConfigError as exc:
            raise ConfigError(str(exc)) from None
        if validate_only:
            return
        self._configs.commit(entity, configs, config)
        for name, log_config in log_configs.items():
            self._replicas.update_config(name, log_config)
        level = "cluster default" if entity == "" else f"broker {entity}"
        log.info("dynamic broker configs (%s) are now %s", level, dict(configs) or "empty")

    # -- TopicAdmin ------------------------------------------------------------------------------------

    def check_new_topic(
        self, num_partitions: int, replication_factor: int, assignments: Mapping[int, Sequence[int]] | None
    ) -> None:
        live = {self._node_id: None}
        try:
            if assignments:
                check_assignment(assignments, sorted(live))
            else:
                assign_replicas_to_brokers(live, num_partitions, replication_factor)
        except AssignmentError as exc:
            code = (
                ErrorCode.INVALID_REPLICATION_FACTOR
                if exc.invalid_replication_factor
                else ErrorCode.INVALID_REPLICA_ASSIGNMENT
                if assignments
                else ErrorCode.INVALID_PARTITIONS
            )
            raise AdminError(code, str(exc)) from None

    def ensure_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        is_internal: bool,
    ) -> TopicInfo | None:
        topic = self._cache.topic(name)
        if topic is not None:
            return topic
        stored = self._store.get(name)
        if stored is not None:
            return self._finish_create(stored)
        try:
            return self.create_topic_now(
                name, num_partitions, replication_factor, configs, is_internal=is_internal
            )
        except KafkaStorageError as exc:  # a full disk: not available yet (callers retry, as for a cluster)
            log.warning("%s", exc)
            return None

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
        is_internal: bool = False,
        timeout_ms: int = 30_000,  # noqa: ARG002 - TopicAdmin: a single node answers at once
    ) -> TopicInfo | None:
        if name in self._store:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self.check_new_topic(num_partitions, replication_factor, assignments)
        count = len(assignments) if assignments else num_partitions
        try:
            return self.create_topic_now(name, count, replication_factor, configs, is_internal=is_internal)
        except KafkaStorageError as exc:
            raise AdminError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None

    async def delete_topic(self, name: str, *, timeout_ms: int = 30_000) -> bool:  # noqa: ARG002
        self.delete_topic_now(name)
        return True

    async def add_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        timeout_ms: int = 30_000,  # noqa: ARG002 - TopicAdmin: a single node answers at once
    ) -> bool:
        topic = self._store.get(name)
        if topic is None:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        if assignments is not None:
            added = {topic.num_partitions + i: tuple(r) for i, r in enumerate(assignments)}
            try:
                check_assignment(added, [self._node_id], first_partition=topic.num_partitions)
            except AssignmentError as exc:
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None
        self.add_partitions_now(name, count)
        return True

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        self.set_topic_configs_now(name, configs)

    async def alter_broker_configs(
        self, entity: str, configs: Mapping[str, str], *, validate_only: bool
    ) -> None:
        self.alter_broker_configs_now(entity, configs, validate_only=validate_only)
