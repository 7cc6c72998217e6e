"""The transaction coordinator's runtime: ``__transaction_state``, loading, appends, markers and timers.

The pure :class:`~tidelog.coordinator.txn.TransactionCoordinator` decides; this module does the I/O around it on
the broker's event loop (Kafka's ``TransactionStateManager`` plus its marker channel, single-threaded), in the
shape of :mod:`tidelog.server.group_runtime`:

- ``__transaction_state`` is an internal, compacted topic of ``transaction.state.log.num.partitions``
  partitions, created on first use (FindCoordinator for a transactional id). A broker that starts with it on
  disk makes every partition *loading* before it accepts a connection, then replays each partition's log in
  a background task (reads of ``transaction.state.log.load.buffer.size``, yielding to the loop between
  them); until a partition is loaded its transactional ids get COORDINATOR_LOAD_IN_PROGRESS. The
  coordinator epoch of a partition is its leader epoch (stamped on every marker).
- **No producer id is handed out before every partition loading at start is loaded**: each one is a
  hold on the broker's ``ProducerIdManager`` from :meth:`TransactionRuntime.start` (before a request is
  read), released with its transactional ids' highest producer id when its load ends (one that fails
  releases with what it replayed), so the floor includes them (see producer_id_manager.py).
- Every :class:`~tidelog.coordinator.common.CoordinatorResult` is applied in the coordinator's
  order: its records are appended first, one batch per partition (on a single node the high watermark is
  the log end offset, so they are committed when the append returns), then the response is settled, then
  the markers are written, then the timers are set. **A marker is never written before the Prepare record
  that decided it has been appended**: when an append fails, the request gets the mapped error, the
  markers are dropped and the partition is unloaded and loaded again from its log (the truth).
- Markers go through :meth:`TransactionRuntime.write_marker` (``ReplicaManager.write_txn_marker``; an
  admin's WriteTxnMarkers, :mod:`tidelog.server.handlers.write_txn_markers`, takes the same path)
  synchronously, before the event loop gets to send the response: an EndTxn answer leaves once the
  transaction is complete on every partition (Kafka answers once the Prepare record is durable; answering
  later only helps the client's next transaction). Written partitions are reported with
  ``on_markers_written`` (a vanished partition counts as written); a marker on ``__consumer_offsets`` also
  settles the producer's pending offsets in the group coordinator. A marker refused with
  INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED stops that marker set unreported (a newer
  epoch has moved on); any other failure is retried on the partitions left.
- Transaction timeouts and transactional-id expiry are timers on a timing wheel driven by one clock task
  (:class:`~tidelog.server.coordinator_support.KeyedTimers`), firing ``on_timeout`` never early.
- The produce path's KIP-890 verification is the coordinator's ``verify_partition``, registered with the
  replica manager when the runtime is built. Before ``__transaction_state`` exists no transaction can
  exist, so every transactional batch is refused with INVALID_TXN_STATE (as before a coordinator existed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from tidelog.coordinator.common import (
    TRANSACTION_STATE_TOPIC_NAME,
    CancelTimer,
    CoordinatorRecord,
    CoordinatorResult,
    ScheduleTimer,
    WriteTxnMarkers,
)
from tidelog.coordinator.txn import (
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TxnRecordError,
    TxnTimerKey,
    txn_append_error_to_response_error,
    txn_error_response,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import ControlRecordType, SimpleRecord, encode_batch
from tidelog.protocol.schema import Request
from tidelog.server.admin_manager import AdminManager
from tidelog.server.clock import Clock
from tidelog.server.coordinator_support import KeyedTimers, read_records, run_partition_loader
from tidelog.server.dispatch import RequestContext
from tidelog.server.group_runtime import OFFSETS_TOPIC, GroupRuntime
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.producer_id_floor import NONE_IN_USE, highest_in_transactions
from tidelog.server.producer_id_manager import ProducerIdManager
from tidelog.server.replica_manager import ReplicaManager
from tidelog.protocol import TopicPartition

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionRuntime", "coordinator_config"]

log = logging.getLogger("tidelog.transactions")

TRANSACTION_STATE_TOPIC = TRANSACTION_STATE_TOPIC_NAME
"""Kafka's ``Topic.TRANSACTION_STATE_TOPIC_NAME``."""

MARKER_RETRY_BACKOFF_S = 0.2
"""Pause before writing a marker again after a failure that may pass (a storage error)."""

_STOP_MARKERS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


def coordinator_config(
    broker_config: Any, num_partitions: int, offsets_topic_num_partitions: int
) -> TransactionCoordinatorConfig:
    """The coordinator's settings: the broker attributes of the same names, with the partition counts of
    the internal topics as they are (an existing topic keeps its count whatever the config says now)."""
    values = {
        f.name: getattr(broker_config, f.name)
        for f in dataclasses.fields(TransactionCoordinatorConfig)
        if hasattr(broker_config, f.name)
    }
    values["transaction_state_log_num_partitions"] = num_partitions
    values["offsets_topic_num_partitions"] = offsets_topic_num_partitions
    return TransactionCoordinatorConfig(**values)


class TransactionRuntime:
    """Runs one broker's :class:`TransactionCoordinator` over its ``__transaction_state`` partitions."""

    def __init__(
        self,
        *,
        admin: AdminManager,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        producer_ids: ProducerIdManager,
        groups: GroupRuntime,
        clock: Clock,
    ) -> None:
        self._admin = admin
        self._metadata = metadata
        self._replicas = replicas
        self._producer_ids = producer_ids
        self._groups = groups
        self._clock = clock.now_ms
        config = admin.config
        existing = metadata.topic(TRANSACTION_STATE_TOPIC)
        partitions = (
            existing.num_partitions if existing is not None else config.transaction_state_log_num_partitions
        )
        self.coordinator = TransactionCoordinator(
            coordinator_config(config, partitions, groups.num_partitions),
            allocate_producer_id=producer_ids.generate_producer_id,
            partition_exists=self._metadata.has_partition,
        )
        self._load_buffer = max(config.transaction_state_log_load_buffer_size, 1024)
        self.timers: KeyedTimers[TxnTimerKey] = KeyedTimers(
            self._on_timer, clock=self._clock, name="transaction coordinator"
        )
        self._to_load: list[int] = []
        self._load_wakeup = asyncio.Event()
        self._marker_retries: set[asyncio.TimerHandle] = set()
        self._stopped = False
        replicas.set_transaction_verifier(self.verify_partition)

    # -- the topic -------------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self.coordinator.config.transaction_state_log_num_partitions

    def state_topic_configs(self) -> dict[str, str]:
        """Kafka's ``TransactionLog.transactionTopicConfigs``."""
        config = self._admin.config
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(config.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(config.transaction_state_log_min_isr),
            "unclean.leader.election.enable": "false",
        }

    @property
    def state_topic_exists(self) -> bool:
        return TRANSACTION_STATE_TOPIC in self._metadata

    def ensure_state_topic(self) -> TopicInfo:
        """Create ``__transaction_state`` if it does not exist (its empty partitions are loaded at once)."""
        topic = self._metadata.topic(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            return topic
        topic = self._admin.create_topic(
            TRANSACTION_STATE_TOPIC, self.num_partitions, 1, self.state_topic_configs(), is_internal=True
        )
        for partition in range(topic.num_partitions):
            if self.coordinator.txn_partition(partition) is not None:  # the topic was deleted under us
                self._apply(self.coordinator.unload(partition))
            self._begin_loading(partition)
            self._complete_loading(partition, 0, time.monotonic())
        return topic

    def partition_for(self, transactional_id: str) -> int:
        return self.coordinator.partition_for(transactional_id)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Broker start: every partition of an existing ``__transaction_state`` becomes loading now (so no
        request sees a half-loaded transaction); :meth:`run_loader` replays them."""
        topic = self._metadata.topic(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return
        for partition in range(topic.num_partitions):
            if self.coordinator.txn_partition(partition) is None:
                self._begin_loading(partition)
                self._producer_ids.hold(self._producer_ids_hold(partition))
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
            topic=TRANSACTION_STATE_TOPIC,
            what="transactional ids",
        )

    async def run_clock(self) -> None:
        await self.timers.run()

    def shutdown(self) -> None:
        """Broker stop: unload every partition (timers go; transactions left in Prepare* are finished by
        the next start, which writes their markers again)."""
        self._stopped = True
        for handle in self._marker_retries:
            handle.cancel()
        self._marker_retries.clear()
        for partition in self.coordinator.owned_partitions:
            self._apply(self.coordinator.unload(partition))
        self.timers.clear()

    # -- loading ---------------------------------------------------------------------------------------

    def _begin_loading(self, partition: int) -> None:
        replica = self._replicas.get(TRANSACTION_STATE_TOPIC, partition)
        coordinator_epoch = replica.leader_epoch if replica is not None else 0
        self.coordinator.begin_loading(partition, coordinator_epoch)

    async def _load_partition(self, partition: int) -> None:
        started = time.monotonic()
        count = 0
        try:
            replica = self._replicas.get(TRANSACTION_STATE_TOPIC, partition)
            if replica is not None:
                for chunk in read_records(replica, self._load_buffer):
                    count += self._replay(partition, chunk)
                    await asyncio.sleep(0)
                    if self._stopped or not self.coordinator.is_loading(partition):
                        return
            self._complete_loading(partition, count, started)
        finally:
            if self._producer_ids_hold(partition) in self._producer_ids.holds:
                if not self._stopped:
                    log.warning(
                        "%s-%d did not load: producer ids go on above the ids of the records it replayed",
                        TRANSACTION_STATE_TOPIC,
                        partition,
                    )
                self._release_producer_ids(partition)

    @staticmethod
    def _producer_ids_hold(partition: int) -> str:
        return f"{TRANSACTION_STATE_TOPIC}-{partition}"

    def _release_producer_ids(self, partition: int) -> None:
        """The producer ids of ``partition``'s transactional ids are known: the floor may include them."""
        owned = self.coordinator.txn_partition(partition)
        in_use = highest_in_transactions(owned.transactions.values()) if owned is not None else NONE_IN_USE
        try:
            self._producer_ids.release(self._producer_ids_hold(partition), *in_use)
        except OSError as exc:  # the jumped block is written by the next InitProducerId then
            log.warning("cannot write the producer id block: %s", exc)

    def _replay(self, partition: int, chunk: list[Any]) -> int:
        replayed = 0
        for header, records in chunk:
            if header.is_control:
                continue
            for record in records:
                if record.key is None:
                    continue
                try:
                    self.coordinator.replay(partition, record.key, record.value)
                except TxnRecordError as exc:
                    log.warning(
                        "skipping record at offset %d of %s-%d: %s",
                        record.offset,
                        TRANSACTION_STATE_TOPIC,
                        partition,
                        exc,
                    )
                replayed += 1
        return replayed

    def _complete_loading(self, partition: int, count: int, started: float) -> None:
        self._apply(self.coordinator.complete_loading(partition, self._clock()))
        self._release_producer_ids(partition)
        if count:
            owned = self.coordinator.txn_partition(partition)
            ids = len(owned.transactions) if owned is not None else 0
            log.info(
                "loaded %s-%d: %d records, %d transactional ids in %.0f ms",
                TRANSACTION_STATE_TOPIC,
                partition,
                count,
                ids,
                (time.monotonic() - started) * 1000,
            )

    # -- requests --------------------------------------------------------------------------------------

    def handle(self, ctx: RequestContext, request: Request) -> Any:
        """Serve a transaction coordinator request (InitProducerId with a transactional id,
        AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions)."""
        result = self.coordinator.handle(request, ctx.api_version, now_ms=self._clock())
        answer = self._apply(result, request, ctx.api_version)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s v%d from %s: %s -> %s",
                type(request).__name__,
                ctx.api_version,
                ctx.client_id,
                _summary(request),
                _summary(answer),
            )
        return answer

    def verify_partition(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> ErrorCode:
        """The produce path's check (KIP-890): NONE when the partition is in the producer's ongoing
        transaction, else the coordinator's error."""
        if not self.state_topic_exists:
            return ErrorCode.INVALID_TXN_STATE  # no transaction has ever existed here
        return self.coordinator.verify_partition(
            transactional_id, producer_id, producer_epoch, topic, partition
        )

    # -- applying results ------------------------------------------------------------------------------

    def _apply(
        self, result: CoordinatorResult[TxnTimerKey], request: Request | None = None, api_version: int = 0
    ) -> Any:
        failed: list[int] = []
        failure: ErrorCode | None = None
        for partition, records in result.records.items():
            if not records:
                continue
            error = self._append(partition, records)
            if error is not ErrorCode.NONE:
                failure = txn_append_error_to_response_error(error)
                failed.append(partition)
        answer: Any = result.response
        if failure is not None and request is not None:
            answer = txn_error_response(request, api_version, failure)
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers.schedule(op.key, op.deadline_ms)
            else:
                assert isinstance(op, CancelTimer)
                self.timers.cancel(op.key)
        if failed:
            for partition in failed:
                self._reload(partition)
            return answer  # markers dropped: their Prepare record may not be in the log
        for markers in result.markers:
            self._write_markers(markers, markers.partitions)
        return answer

    def _append(self, partition: int, records: list[CoordinatorRecord]) -> ErrorCode:
        now = self._clock()
        batch = encode_batch([SimpleRecord(key=r.key, value=r.value, timestamp=now) for r in records])
        error, _info, message = self._replicas.append(TRANSACTION_STATE_TOPIC, partition, batch, now_ms=now)
        if error is not ErrorCode.NONE:
            log.warning(
                "appending %d records to %s-%d failed: %s %s",
                len(records),
                TRANSACTION_STATE_TOPIC,
                partition,
                error.name,
                message or "",
            )
        return ErrorCode(error)

    def _reload(self, partition: int) -> None:
        """After a failed append the coordinator is ahead of its log: unload the partition, load it again."""
        self._apply(self.coordinator.unload(partition))
        if self._stopped:
            return
        self._begin_loading(partition)
        self._to_load.append(partition)
        self._load_wakeup.set()

    def _write_markers(self, markers: WriteTxnMarkers, partitions: tuple[TopicPartition, ...]) -> None:
        """Write ``markers`` on ``partitions``; report the written ones; retry the others later."""
        if self._stopped:
            return
        now = self._clock()
        written: list[TopicPartition] = []
        retry: list[TopicPartition] = []
        stopped = False
        for tp in partitions:
            error, message = self.write_marker(
                tp,
                markers.result,
                producer_id=markers.producer_id,
                producer_epoch=markers.producer_epoch,
                coordinator_epoch=markers.coordinator_epoch,
                now_ms=now,
            )
            if error == ErrorCode.NONE:
                written.append(tp)
            elif error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                written.append(tp)  # the partition is gone: nothing to mark (Kafka drops it too)
            elif error in _STOP_MARKERS:
                log.warning(
                    "%s marker of %r (producer %d epoch %d) refused by %s: %s %s; not retried",
                    markers.result.name,
                    markers.transactional_id,
                    markers.producer_id,
                    markers.producer_epoch,
                    tp,
                    ErrorCode(error).name,
                    message or "",
                )
                stopped = True
                break
            else:
                log.warning(
                    "%s marker of %r to %s failed: %s %s; retrying",
                    markers.result.name,
                    markers.transactional_id,
                    tp,
                    ErrorCode(error).name,
                    message or "",
                )
                retry.append(tp)
        if written:
            self._apply(self.coordinator.on_markers_written(markers, now, written))
        if retry and not stopped:
            self._retry_markers(markers, tuple(retry))

    def write_marker(
        self,
        tp: TopicPartition,
        result: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
    ) -> tuple[ErrorCode, str | None]:
        """Write one COMMIT/ABORT marker to one partition, as leader; returns (error, message). The one path
        every marker takes, this coordinator's and an admin's WriteTxnMarkers (``kafka-transactions.sh
        abort``): a marker written on ``__consumer_offsets`` settles the producer's pending offsets there."""
        error, _info, message = self._replicas.write_txn_marker(
            tp.topic,
            tp.partition,
            result,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            now_ms=now_ms,
        )
        if error == ErrorCode.NONE and tp.topic == OFFSETS_TOPIC:
            self._groups.on_transaction_marker(tp.partition, producer_id, result is ControlRecordType.COMMIT)
        return ErrorCode(error), message

    def _retry_markers(self, markers: WriteTxnMarkers, partitions: tuple[TopicPartition, ...]) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def again() -> None:
            self._marker_retries.discard(handle)
            try:
                self._write_markers(markers, partitions)
            except Exception:
                log.exception("writing the markers of %r failed", markers.transactional_id)

        handle = loop.call_later(MARKER_RETRY_BACKOFF_S, again)
        self._marker_retries.add(handle)

    # -- time ------------------------------------------------------------------------------------------

    def _on_timer(self, key: TxnTimerKey, now_ms: int) -> None:
        self._apply(self.coordinator.on_timeout(key, now_ms))


def _summary(message: Any) -> str:
    """A short description of a request or response for debug logs."""
    parts = []
    for name in ("transactional_id", "producer_id", "producer_epoch", "committed", "group_id", "error_code"):
        value = getattr(message, name, None)
        if value not in (None, ""):
            parts.append(f"{name}={value}")
    return " ".join(parts)
