"""The group coordinator's runtime: ``__consumer_offsets``, loading, appends, parked requests and timers.

The pure :class:`~tidelog.coordinator.group.GroupCoordinator` decides; this module does the I/O around it on the
broker's event loop (Kafka's ``CoordinatorRuntime``, single-threaded):

- ``__consumer_offsets`` is an internal, compacted topic of ``offsets.topic.num.partitions`` partitions,
  created on first use (FindCoordinator for a group). A broker that starts with it on disk makes every
  partition *loading* before it accepts a connection, then replays each partition's log in a background
  task (in chunks of ``offsets.load.buffer.size``, yielding to the loop between chunks); until a partition
  is loaded its groups get COORDINATOR_LOAD_IN_PROGRESS.
- Every :class:`~tidelog.coordinator.common.CoordinatorResult` is applied in the coordinator's order: its records
  are appended first, one batch per partition (on a single node the high watermark is the log end offset,
  so they are committed when the append returns), then the response and the completions of parked
  requests are released, then the timers are set. TxnOffsetCommit records form a transactional batch of
  the request's producer (appended as the coordinator's, epochs checked); the transaction coordinator's
  markers on a partition settle them through :meth:`GroupRuntime.on_transaction_marker`. A failed
  append answers the request and the
  completions with the mapped error, and the partition is unloaded and loaded again from its log (the
  truth).
- A deleted topic's committed offsets are tombstoned in every group at once
  (:meth:`GroupRuntime.on_topics_deleted`); partitions still loading do it when loaded.
- A parked JoinGroup/SyncGroup is an ``asyncio.Future`` the connection awaits; it is resolved exactly once
  (by a completion, or with NOT_COORDINATOR when the partition is unloaded or the broker stops).
- Coordinator timers live on a timing wheel driven by one clock task (the pattern of
  :mod:`tidelog.server.fetch_purgatory`). Scheduling a key replaces its earlier timer; a timer fires
  through ``GroupCoordinator.on_timeout`` in the clock task only, never inside another coordinator call,
  and never before its deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

from tidelog.coordinator.common import (
    CancelTimer,
    CoordinatorRecord,
    CoordinatorRecordError,
    CoordinatorResult,
    DeferredResponse,
    ScheduleTimer,
)
from tidelog.coordinator.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    TimerKey,
    TopicImage,
    TopicsImage,
    group_append_error_to_response_error,
    group_error_response,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    TxnOffsetCommitRequest,
)
from tidelog.protocol.records import (
    Compression,
    ControlRecordType,
    SimpleRecord,
    decode_control_record,
    encode_batch,
)
from tidelog.protocol.schema import Request
from tidelog.server.admin_manager import AdminManager
from tidelog.server.clock import Clock
from tidelog.server.coordinator_support import KeyedTimers, read_records, run_partition_loader
from tidelog.server.dispatch import RequestContext
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = ["OFFSETS_TOPIC", "GroupRuntime"]

log = logging.getLogger("tidelog.groups")

OFFSETS_TOPIC = "__consumer_offsets"
"""Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``."""


@dataclass(slots=True)
class _Parked:
    future: asyncio.Future[Any]
    request: Request
    api_version: int


def coordinator_config(broker_config: Any, num_partitions: int) -> GroupCoordinatorConfig:
    """The coordinator's settings: the broker attributes of the same names (see GroupCoordinatorConfig)."""
    values = {
        f.name: getattr(broker_config, f.name)
        for f in dataclasses.fields(GroupCoordinatorConfig)
        if hasattr(broker_config, f.name)
    }
    values["offsets_topic_num_partitions"] = num_partitions
    return GroupCoordinatorConfig(**values)


class GroupRuntime:
    """Runs one broker's :class:`GroupCoordinator` over its ``__consumer_offsets`` partitions."""

    def __init__(
        self, *, admin: AdminManager, metadata: MetadataCache, replicas: ReplicaManager, clock: Clock
    ) -> None:
        self._admin = admin
        self._metadata = metadata
        self._replicas = replicas
        self._clock = clock.now_ms
        config = admin.config
        existing = metadata.topic(OFFSETS_TOPIC)
        partitions = existing.num_partitions if existing is not None else config.offsets_topic_num_partitions
        self.coordinator = GroupCoordinator(coordinator_config(config, partitions))
        self._compression = Compression(config.offsets_topic_compression_codec)
        self._load_buffer = max(config.offsets_load_buffer_size, 1024)
        self._segment_bytes = config.offsets_topic_segment_bytes
        self._topics_image: tuple[tuple[tuple[str, object, int], ...], TopicsImage] | None = None
        self.timers: KeyedTimers[TimerKey] = KeyedTimers(
            self._on_timer, clock=self._clock, name="group coordinator"
        )
        admin.add_topics_deleted_listener(self.on_topics_deleted)
        self._parked: dict[int, _Parked] = {}
        self._to_load: list[int] = []
        self._load_wakeup = asyncio.Event()
        self._stopped = False

    # -- the topic -------------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.coordinator.config.offsets_topic_num_partitions

    def offsets_topic_configs(self) -> dict[str, str]:
        """Kafka's ``GroupCoordinator.groupMetadataTopicConfigs``."""
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self._segment_bytes),
            "compression.type": "producer",
        }

    def ensure_offsets_topic(self) -> TopicInfo:
        """Create ``__consumer_offsets`` if it does not exist (its empty partitions are loaded at once)."""
        topic = self._metadata.topic(OFFSETS_TOPIC)
        if topic is not None:
            return topic
        topic = self._admin.create_topic(
            OFFSETS_TOPIC, self.num_partitions, 1, self.offsets_topic_configs(), is_internal=True
        )
        for partition in range(topic.num_partitions):
            if self.coordinator.shard(partition) is not None:  # the topic was deleted under us
                self._apply(self.coordinator.unload(partition))
            self.coordinator.begin_loading(partition)
            self._load_partition_now(partition)
        return topic

    def partition_for(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Broker start: every partition of an existing ``__consumer_offsets`` becomes loading now (so no
        request sees a half-loaded group); :meth:`run_loader` replays them."""
        topic = self._metadata.topic(OFFSETS_TOPIC)
        if topic is None:
            return
        for partition in range(topic.num_partitions):
            if self.coordinator.shard(partition) is None:
                self.coordinator.begin_loading(partition)
                self._to_load.append(partition)
        self._load_wakeup.set()

    async def run_loader(self) -> None:
        """Loads the partitions queued by :meth:`start` and by failed appends, one at a time."""
        await run_partition_loader(
            self._to_load,
            self._load_wakeup,
            is_loading=self.coordinator.is_loading,
            load=self._load_partition,
            stopped=lambda: self._stopped,
            topic=OFFSETS_TOPIC,
            what="groups",
        )

    async def run_clock(self) -> None:
        """Fires coordinator timers when due (see :class:`~tidelog.server.coordinator_support.KeyedTimers`)."""
        await self.timers.run()

    def _on_timer(self, key: TimerKey, now_ms: int) -> None:
        self._apply(self.coordinator.on_timeout(key, now_ms))

    def shutdown(self) -> None:
        """Broker stop: unload every partition, so parked requests are answered (NOT_COORDINATOR) now."""
        self._stopped = True
        for partition in self.coordinator.owned_partitions:
            self._apply(self.coordinator.unload(partition))
        for parked in self._parked.values():
            if not parked.future.done():
                parked.future.set_result(
                    group_error_response(parked.request, parked.api_version, ErrorCode.NOT_COORDINATOR)
                )
        self._parked.clear()

    # -- loading ---------------------------------------------------------------------------------------

    async def _load_partition(self, partition: int) -> None:
        started = time.monotonic()
        count = 0
        for chunk in self._partition_chunks(partition):
            count += chunk
            await asyncio.sleep(0)
        self._complete_loading(partition, count, started)

    def _load_partition_now(self, partition: int) -> None:
        started = time.monotonic()
        count = sum(self._partition_chunks(partition))
        self._complete_loading(partition, count, started)

    def _complete_loading(self, partition: int, count: int, started: float) -> None:
        self._apply(self.coordinator.complete_loading(partition, self._clock()))
        elapsed = (time.monotonic() - started) * 1000
        if count:
            shard = self.coordinator.shard(partition)
            groups = len(shard.state.groups) if shard is not None else 0
            log.info(
                "loaded %s-%d: %d records, %d groups in %.0f ms",
                OFFSETS_TOPIC,
                partition,
                count,
                groups,
                elapsed,
            )

    def _partition_chunks(self, partition: int) -> Any:
        """Replays the partition's log into its shard, one read of ``offsets.load.buffer.size`` at a time,
        up to the high watermark as it is at each read (markers the transaction coordinator writes while
        this partition loads are replayed here: on_transaction_marker skips loading shards); yields the
        number of records replayed by each read."""
        replica = self._replicas.get(OFFSETS_TOPIC, partition)
        if replica is None:
            return
        shard = self.coordinator.shard(partition)
        assert shard is not None
        for chunk in read_records(replica, self._load_buffer):
            replayed = 0
            for header, records in chunk:
                if header.is_control:
                    for record in records:
                        kind, _epoch = decode_control_record(record)
                        shard.replay_end_transaction_marker(
                            header.producer_id, kind is ControlRecordType.COMMIT
                        )
                    continue
                producer_id = header.producer_id if header.is_transactional else -1
                for record in records:
                    if record.key is None:
                        continue
                    try:
                        self.coordinator.replay(partition, record.key, record.value, producer_id=producer_id)
                    except CoordinatorRecordError as exc:
                        log.warning(
                            "skipping record at offset %d of %s-%d: %s",
                            record.offset,
                            OFFSETS_TOPIC,
                            partition,
                            exc,
                        )
                    replayed += 1
            yield replayed

    # -- requests --------------------------------------------------------------------------------------

    def _refresh_topics_image(self) -> None:
        """Server-side assignment (KIP-848) needs the cluster's topics: hand the coordinator a TopicsImage of
        the metadata cache's topics, rebuilt only when a topic was created, deleted or grew partitions."""
        topics = self._metadata.topics()
        fingerprint = tuple((t.name, t.topic_id, t.num_partitions) for t in topics)
        if self._topics_image is None or self._topics_image[0] != fingerprint:
            image = TopicsImage(TopicImage(t.name, t.topic_id, t.num_partitions) for t in topics)
            self._topics_image = (fingerprint, image)
        image = self._topics_image[1]
        if self.coordinator.topics_image is not image:
            self.coordinator.set_topics_image(image)

    def handle(self, ctx: RequestContext, request: Request) -> Any:
        """Serve a group coordinator request: the response, or a future of it for a parked request."""
        if isinstance(request, ConsumerGroupHeartbeatRequest | ConsumerGroupDescribeRequest):
            self._refresh_topics_image()
        result = self.coordinator.handle(
            request,
            ctx.api_version,
            now_ms=self._clock(),
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",
        )
        producer = None
        if isinstance(request, TxnOffsetCommitRequest):
            producer = (request.producer_id, request.producer_epoch)
        answer = self._apply(result, request, ctx.api_version, producer)
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

    def _apply(
        self,
        result: CoordinatorResult[TimerKey],
        request: Request | None = None,
        api_version: int = 0,
        producer: tuple[int, int] | None = None,
    ) -> Any:
        """``producer``: (producer id, epoch) whose transactional batch the records form (TxnOffsetCommit)."""
        failure: ErrorCode | None = None
        failed_partitions: list[int] = []
        for partition, records in result.records.items():
            if not records:
                continue
            error = self._append(partition, records, producer)
            if error is not ErrorCode.NONE:
                failure = group_append_error_to_response_error(error)
                failed_partitions.append(partition)
        answer: Any = result.response
        if isinstance(answer, DeferredResponse):
            assert request is not None
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._parked[answer.handle_id] = _Parked(future, request, api_version)
            answer = future
        elif failure is not None and request is not None and answer is not None:
            answer = group_error_response(request, api_version, failure)
        for handle, response in result.completions:
            parked = self._parked.pop(handle.handle_id, None)
            if parked is None or parked.future.done():
                continue  # its connection went away
            if failure is not None:
                response = group_error_response(parked.request, parked.api_version, failure)
            parked.future.set_result(response)
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers.schedule(op.key, op.deadline_ms)
            else:
                assert isinstance(op, CancelTimer)
                self.timers.cancel(op.key)
        for partition in failed_partitions:
            self._reload(partition)
        return answer

    def _append(
        self, partition: int, records: list[CoordinatorRecord], producer: tuple[int, int] | None = None
    ) -> ErrorCode:
        now = self._clock()
        simple = [SimpleRecord(key=r.key, value=r.value, timestamp=now) for r in records]
        if producer is None:
            batch = encode_batch(simple, compression=self._compression)
            origin = AppendOrigin.CLIENT
        else:
            # Kafka's transactional offset commit batch: the producer's id and epoch, no sequence.
            batch = encode_batch(
                simple,
                compression=self._compression,
                producer_id=producer[0],
                producer_epoch=producer[1],
                is_transactional=True,
            )
            origin = AppendOrigin.COORDINATOR
        error, _info, message = self._replicas.append(
            OFFSETS_TOPIC, partition, batch, now_ms=now, origin=origin
        )
        if error is not ErrorCode.NONE:
            log.warning(
                "appending %d records to %s-%d failed: %s %s",
                len(records),
                OFFSETS_TOPIC,
                partition,
                error.name,
                message or "",
            )
        return ErrorCode(error)

    def on_topics_deleted(self, topics: list[str]) -> None:
        """Topics were deleted: tombstone their committed offsets in every group (Kafka's
        ``onPartitionsDeleted``). A partition whose append fails is reloaded from its log, which still has
        the offsets: the deletion is handed to the coordinator again, which redoes it once it is loaded."""
        result = self.coordinator.on_topics_deleted(topics)
        self._apply(result)
        if any(self.coordinator.is_loading(partition) for partition in result.records):
            self._apply(self.coordinator.on_topics_deleted(topics))

    def on_transaction_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """The transaction coordinator wrote a COMMIT/ABORT marker of ``producer_id`` on
        ``__consumer_offsets-partition``: its pending offsets become committed or are dropped. A loading
        shard reads the marker from the log itself."""
        shard = self.coordinator.shard(partition)
        if shard is not None and not shard.loading:
            shard.replay_end_transaction_marker(producer_id, committed)

    def _reload(self, partition: int) -> None:
        """After a failed append the shard is ahead of its log: unload it and load it again."""
        self._apply(self.coordinator.unload(partition))
        if self._stopped:
            return
        self.coordinator.begin_loading(partition)
        self._to_load.append(partition)
        self._load_wakeup.set()


def _summary(message: Any) -> str:
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
