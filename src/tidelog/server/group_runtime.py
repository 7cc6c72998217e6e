"""The group coordinator on the coordinator runtime: ``__consumer_offsets``, its batches, the KIP-848
topics image, deleted topics and transaction markers.

The pure :class:`~tidelog.coordinator.group.GroupCoordinator` decides; the generic
:class:`~tidelog.server.coordinator_runtime.CoordinatorRuntime` loads its partitions, applies its results,
parks JoinGroup/SyncGroup and fires its timers. What is the group coordinator's own:

- ``__consumer_offsets`` has ``offsets.topic.num.partitions`` partitions, compacted, segments of
  ``offsets.topic.segment.bytes``; its batches are compressed with ``offsets.topic.compression.codec``.
- TxnOffsetCommit records form a transactional batch of the request's producer (its id and epoch, no
  sequence; appended as the coordinator's, epochs checked); the transaction coordinator's markers on a
  partition settle them through :meth:`GroupRuntime.on_transaction_marker` (a loading partition reads the
  marker from its log itself).
- Server-side assignment (KIP-848) needs the cluster's topics: before a ConsumerGroupHeartbeat or
  ConsumerGroupDescribe the coordinator is handed a :class:`~tidelog.coordinator.group.TopicsImage` of the
  metadata cache's topics, rebuilt only when a topic was created, deleted or grew partitions.
- A deleted topic's committed offsets are tombstoned in every group at once
  (:meth:`GroupRuntime.on_topics_deleted`); partitions still loading do it when loaded.
- Share groups (KIP-932) are run by the share runtime and persisted here: load listeners
  (:meth:`GroupRuntime.add_load_listener`) hear when a partition begins loading, is unloaded, or is loaded
  (see :mod:`tidelog.server.share_membership`).
- In a cluster its records are answered once committed, within ``offsets.commit.timeout.ms`` (Kafka's
  write timeout of the group coordinator); a marker written on one of its partitions counts as written
  by it, so what is answered after the marker waits for the marker's commit too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tidelog.coordinator.common import GROUP_METADATA_TOPIC_NAME, CoordinatorRecord
from tidelog.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    TimerKey,
    TopicImage,
    TopicsImage,
)
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    TxnOffsetCommitRequest,
)
from tidelog.protocol.records import Compression, SimpleRecord, encode_batch
from tidelog.protocol.schema import Request
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.config import BrokerConfig
from tidelog.server.coordinator_runtime import CoordinatorRuntime, KeyFields
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = ["OFFSETS_TOPIC", "GroupRuntime", "coordinator_config"]

log = logging.getLogger("tidelog.groups")

OFFSETS_TOPIC = GROUP_METADATA_TOPIC_NAME
"""Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``."""


def coordinator_config(
    broker_config: BrokerConfig,
    num_partitions: int,
    group_configs: Callable[[str], Mapping[str, str]] | None = None,
) -> GroupCoordinatorConfig:
    """The coordinator's settings: the broker attributes of the same names (see GroupCoordinatorConfig),
    and each group's own configs through ``group_configs``."""
    values: dict[str, Any] = {
        f.name: getattr(broker_config, f.name)
        for f in dataclasses.fields(GroupCoordinatorConfig)
        if hasattr(broker_config, f.name)
    }
    values["offsets_topic_num_partitions"] = num_partitions
    if group_configs is not None:
        values["group_configs"] = group_configs
    return GroupCoordinatorConfig(**values)


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """Kafka's ``GroupCoordinator.groupMetadataTopicConfigs``."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.offsets_topic_segment_bytes),
        "compression.type": "producer",
    }


class GroupRuntime(CoordinatorRuntime[TimerKey]):
    """Runs one broker's :class:`GroupCoordinator` over its ``__consumer_offsets`` partitions."""

    what = "groups"
    key_fields = KeyFields(
        single=("group_id",), lists=("groups", "groups_names", "group_ids"), item_field="group_id"
    )
    coordinator: GroupCoordinator

    def __init__(
        self,
        *,
        admin: TopicAdmin,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        clock: Clock,
        group_configs: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        config = admin.config
        existing = metadata.topic(OFFSETS_TOPIC)
        partitions = existing.num_partitions if existing is not None else config.offsets_topic_num_partitions
        super().__init__(
            GroupCoordinator(coordinator_config(config, partitions, group_configs)),
            admin=admin,
            metadata=metadata,
            replicas=replicas,
            clock=clock,
            load_buffer_bytes=config.offsets_load_buffer_size,
            topic_configs=offsets_topic_configs(config),
            replication_factor=config.offsets_topic_replication_factor,
            commit_timeout_ms=config.offsets_commit_timeout_ms,
        )
        self._compression = Compression(config.offsets_topic_compression_codec)
        self._topics_image: tuple[tuple[tuple[str, object, int], ...], TopicsImage] | None = None
        self._load_listeners: list[Callable[[int, bool], None]] = []
        admin.add_topics_deleted_listener(self.on_topics_deleted)

    def add_load_listener(self, listener: Callable[[int, bool], None]) -> None:
        """issue 13 hook: ``listener(partition, True)`` once ``partition`` is loaded, ``(partition, False)``
        when it begins loading or is unloaded."""
        self._load_listeners.append(listener)

    def _on_begin_loading(self, partition: int) -> None:
        for listener in self._load_listeners:
            listener(partition, False)

    def _unload(self, partition: int) -> None:
        super()._unload(partition)
        for listener in self._load_listeners:
            listener(partition, False)

    def _complete_loading(self, partition: int, count: int, started: float) -> None:
        super()._complete_loading(partition, count, started)
        for listener in self._load_listeners:
            listener(partition, True)

    def ensure_offsets_topic(self) -> TopicInfo | None:
        """Create ``__consumer_offsets`` if it does not exist (its empty partitions are loaded at once)."""
        return self.ensure_topic()

    # -- requests --------------------------------------------------------------------------------------

    def handle(self, ctx: RequestContext, request: Request) -> Answer:
        """Serve a group coordinator request: the response, or a future of it for a parked request."""
        if isinstance(request, ConsumerGroupHeartbeatRequest | ConsumerGroupDescribeRequest):
            self._refresh_topics_image()
        producer = None
        if isinstance(request, TxnOffsetCommitRequest):
            producer = (request.producer_id, request.producer_epoch)
        answer = self.handle_request(
            request,
            ctx.api_version,
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",
            producer=producer,
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s v%d from %s: %s -> %s",
                type(request).__name__,
                ctx.api_version,
                ctx.client_id,
                _summary(request),
                "parked" if isinstance(answer, asyncio.Future) else _summary(answer),
            )
        return answer

    def _refresh_topics_image(self) -> None:
        topics = self._metadata.topics()
        fingerprint = tuple((t.name, t.topic_id, t.num_partitions) for t in topics)
        if self._topics_image is None or self._topics_image[0] != fingerprint:
            image = TopicsImage(TopicImage(t.name, t.topic_id, t.num_partitions) for t in topics)
            self._topics_image = (fingerprint, image)
        image = self._topics_image[1]
        if self.coordinator.topics_image is not image:
            self.coordinator.set_topics_image(image)

    def _batch(
        self, records: list[CoordinatorRecord], now_ms: int, producer: tuple[int, int] | None
    ) -> tuple[bytes, AppendOrigin]:
        simple = [SimpleRecord(key=r.key, value=r.value, timestamp=now_ms) for r in records]
        if producer is None:
            return encode_batch(simple, compression=self._compression), AppendOrigin.CLIENT
        # Kafka's transactional offset commit batch: the producer's id and epoch, no sequence.
        batch = encode_batch(
            simple,
            compression=self._compression,
            producer_id=producer[0],
            producer_epoch=producer[1],
            is_transactional=True,
        )
        return batch, AppendOrigin.COORDINATOR

    def _loaded_summary(self, partition: int) -> str:
        shard = self.coordinator.shard(partition)
        return f"{len(shard.state.groups) if shard is not None else 0} groups"

    # -- other coordinators' and the admin's events ----------------------------------------------------

    def on_topics_deleted(self, topics: list[str]) -> None:
        """Topics were deleted: tombstone their committed offsets in every group (Kafka's
        ``onPartitionsDeleted``). A partition whose append fails is reloaded from its log, which still has
        the offsets: the deletion is handed to the coordinator again, which redoes it once it is loaded."""
        result = self.coordinator.on_topics_deleted(topics)
        self.apply(result)
        if any(self.coordinator.is_loading(partition) for partition in result.records):
            self.apply(self.coordinator.on_topics_deleted(topics))

    def on_transaction_marker(
        self, partition: int, producer_id: int, committed: bool, end_offset: int | None = None
    ) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` was written on ``__consumer_offsets-partition`` (ending
        before ``end_offset``): its pending offsets become committed or are dropped. A loading shard reads
        the marker from the log itself."""
        shard = self.coordinator.shard(partition)
        if shard is not None and not shard.loading:
            shard.replay_end_transaction_marker(producer_id, committed)
            if end_offset is not None:
                self._note_written(partition, end_offset)


def _summary(message: object) -> str:
    """A short description of a request or response for debug logs."""
    parts = []
    for name in (
        "group_id",
        "member_id",
        "group_instance_id",
        "generation_id",
        "generation_id_or_member_epoch",
        "error_code",
        "protocol_name",
        "leader",
    ):
        value = getattr(message, name, None)
        if value not in (None, ""):
            parts.append(f"{name}={value}")
    return " ".join(parts)
