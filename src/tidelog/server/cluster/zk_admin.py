"""Topic and config administration of a cluster, in ZooKeeper (Kafka's ``ZkAdminManager`` and
``AdminZkClient``): any broker takes CreateTopics, DeleteTopics, CreatePartitions and config changes and
writes them where the controller and every broker see them.

Invariants:

- CreateTopics writes ``/config/topics/T`` first, then ``/brokers/topics/T`` (assignment and a new topic
  id) — Kafka's order, so a broker that sees the topic always finds its configs. The assignment is the
  client's (checked: every broker alive, distinct, one replication factor) or Kafka's placement over the
  live brokers (rack-aware when they have racks). The answer waits (up to the request's timeout) until
  the metadata shows every partition with a leader: a client that creates a topic and produces at once
  finds it ready. A timeout answers REQUEST_TIMED_OUT (the topic is created anyway, as in Kafka).
- DeleteTopics writes ``/admin/delete_topics/T`` and waits until the topic is gone from the metadata; the
  controller deletes it (every broker then deletes its replicas, a broker that was down at its next
  start).
- CreatePartitions rewrites ``/brokers/topics/T`` conditionally on the version it read (a concurrent
  change makes it fail, never lose an update), the new partitions placed continuing the topic's spread.
- Topic config changes are ``/config/topics/T`` plus a ``/config/changes`` notification every broker
  applies. Dynamic broker configs live in ``/config/brokers/<default>`` and ``/config/brokers/<id>``,
  notified the same way.
- Auto-creation (Metadata) and the coordinators' internal topics are created in the background: the caller
  is answered at once (LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE, which clients retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence

from tidelog.protocol.errors import ErrorCode
from tidelog.replication.replica_assignment import (
    AssignmentError,
    assign_replicas_to_brokers,
    check_assignment,
)
from tidelog.server.admin_errors import AdminError
from tidelog.server.config import BrokerConfig, ConfigError, log_config_for_topic
from tidelog.server.dynamic_config import DynamicBrokerConfigs
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.errors import TopicAlreadyMarkedForDeletionError, TopicExistsError
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import InvalidConfigError

from .metadata_watcher import MetadataWatcher

__all__ = ["ZkAdminManager"]

log = logging.getLogger("tidelog.cluster.admin")

TopicsDeletedListener = Callable[[list[str]], None]


class ZkAdminManager:
    """Topics and configs of a cluster member; see the module docstring."""

    def __init__(
        self,
        zk: KafkaZkClient,
        *,
        metadata: MetadataCache,
        watcher: MetadataWatcher,
        configs: DynamicBrokerConfigs,
        rng: random.Random | None = None,
    ) -> None:
        self._zk = zk
        self._metadata = metadata
        self._watcher = watcher
        self._configs = configs
        self._rng = rng or random.Random()
        self._creating: dict[str, asyncio.Task[None]] = {}

    @property
    def config(self) -> BrokerConfig:
        return self._configs.config

    @property
    def dynamic_configs(self) -> DynamicBrokerConfigs:
        return self._configs

    def add_topics_deleted_listener(self, listener: TopicsDeletedListener) -> None:
        self._watcher.add_topics_deleted_listener(listener)

    def log_config(self, topic_configs: Mapping[str, str]) -> LogConfig:
        return log_config_for_topic(self.config, topic_configs)

    # -- topics ----------------------------------------------------------------------------------------

    def _live_brokers(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in self._metadata.brokers()}

    def _assignment(
        self, num_partitions: int, replication_factor: int, assignments: Mapping[int, Sequence[int]] | None
    ) -> dict[int, tuple[int, ...]]:
        live = self._live_brokers()
        try:
            if assignments:
                check_assignment(assignments, sorted(live))
                return {p: tuple(r) for p, r in assignments.items()}
            return assign_replicas_to_brokers(live, num_partitions, replication_factor, rng=self._rng)
        except AssignmentError as exc:
            code = (
                ErrorCode.INVALID_REPLICATION_FACTOR
                if exc.invalid_replication_factor
                else ErrorCode.INVALID_REPLICA_ASSIGNMENT
                if assignments
                else ErrorCode.INVALID_PARTITIONS
            )
            raise AdminError(code, str(exc)) from None

    def check_new_topic(
        self, num_partitions: int, replication_factor: int, assignments: Mapping[int, Sequence[int]] | None
    ) -> None:
        """Raise :class:`AdminError` if the topic cannot be placed on the live brokers."""
        self._assignment(num_partitions, replication_factor, assignments)

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
        is_internal: bool = False,  # noqa: ARG002 - TopicAdmin: internal topics are named, not flagged, in ZooKeeper
        timeout_ms: int = 30_000,
    ) -> TopicInfo | None:
        """Create the topic; the topic once every partition has a leader, None when ``timeout_ms`` ran out
        first (0: do not wait). Raises :class:`AdminError` (TOPIC_ALREADY_EXISTS, placement errors)."""
        assignment = self._assignment(num_partitions, replication_factor, assignments)
        topic_id = uuid.uuid4()
        await self._zk.set_or_create_entity_config("topics", name, dict(configs))
        try:
            await self._zk.create_topic_assignment(name, topic_id, assignment)
        except TopicExistsError:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        log.info(
            "created topic %s with %d partitions (id %s), assignment %s",
            name,
            len(assignment),
            topic_id,
            assignment,
        )
        if timeout_ms <= 0:
            return None
        ready = await self._watcher.wait_for(lambda: self._ready(name, topic_id), timeout_ms / 1000)
        return self._metadata.topic(name) if ready else None

    def _ready(self, name: str, topic_id: uuid.UUID) -> bool:
        topic = self._metadata.topic(name)
        return (
            topic is not None and topic.topic_id == topic_id and all(p.has_leader for p in topic.partitions)
        )

    def ensure_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        is_internal: bool,  # noqa: ARG002 - TopicAdmin: internal topics are named, not flagged, in ZooKeeper
    ) -> TopicInfo | None:
        """The topic if it exists; else start creating it in the background and return None."""
        topic = self._metadata.topic(name)
        if topic is not None:
            return topic
        if name not in self._creating:

            async def create() -> None:
                try:
                    await self.create_topic(name, num_partitions, replication_factor, configs, timeout_ms=0)
                except AdminError as exc:
                    if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                        log.warning("cannot create topic %s yet: %s", name, exc)
                finally:
                    self._creating.pop(name, None)

            self._creating[name] = asyncio.get_running_loop().create_task(create())
        return None

    async def delete_topic(self, name: str, *, timeout_ms: int = 30_000) -> bool:
        """Mark the topic for deletion; True once it is gone from the metadata within ``timeout_ms``."""
        with contextlib.suppress(TopicAlreadyMarkedForDeletionError):
            await self._zk.create_delete_topic_marker(name)
        log.info("topic %s marked for deletion", name)
        return await self._watcher.wait_for(lambda: name not in self._metadata, timeout_ms / 1000)

    async def add_partitions(
        self,
        name: str,
        count: int,
        *,
        assignments: Sequence[Sequence[int]] | None = None,
        timeout_ms: int = 30_000,
    ) -> bool:
        """Grow the topic to ``count`` partitions; True once the metadata shows them with leaders."""
        current = await self._zk.get_topic_assignment(name)
        if current is None:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        existing = len(current.partitions)
        if count <= existing:
            raise AdminError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {existing} partitions, which is higher than or equal to the requested {count}.",
            )
        factor = len(current.replicas(0))
        live = self._live_brokers()
        try:
            if assignments is not None:
                added = {existing + i: tuple(r) for i, r in enumerate(assignments)}
                check_assignment(added, sorted(live), first_partition=existing)
                if {len(r) for r in added.values()} != {factor}:
                    raise AssignmentError(
                        f"Inconsistent replication factor between partitions, {factor} is expected."
                    )
            else:
                added = assign_replicas_to_brokers(
                    live, count - existing, factor, start_partition=existing, rng=self._rng
                )
        except AssignmentError as exc:
            raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from None
        await self._zk.add_topic_partitions(name, added)
        log.info("topic %s grows to %d partitions: %s", name, count, added)
        return await self._watcher.wait_for(
            lambda: (
                (t := self._metadata.topic(name)) is not None
                and t.num_partitions >= count
                and all(p.has_leader for p in t.partitions)
            ),
            timeout_ms / 1000,
        )

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        await self._zk.change_topic_config(name, dict(configs))

    # -- broker configs --------------------------------------------------------------------------------

    async def alter_broker_configs(
        self, entity: str, configs: Mapping[str, str], *, validate_only: bool
    ) -> None:
        """Make ``configs`` the dynamic layer ``entity`` (``""``: every broker; an id: that broker), stored in
        ZooKeeper; each broker applies it when notified. Raises ``ConfigError`` and writes nothing if the
        result would be invalid here."""
        config = self._configs.propose(entity, configs)
        try:
            for topic in self._metadata.topics():
                log_config_for_topic(config, topic.configs)
        except InvalidConfigError as exc:
            raise ConfigError(str(exc)) from None
        if validate_only:
            return
        await self._zk.change_entity_config("brokers", entity or "<default>", dict(configs))
