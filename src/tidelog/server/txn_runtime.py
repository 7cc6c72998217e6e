"""The transaction coordinator on the coordinator runtime: ``__transaction_state``, producer ids while it
loads, KIP-890 verification, and the markers that end transactions.

The pure :class:`~tidelog.coordinator.txn.TransactionCoordinator` decides; the generic
:class:`~tidelog.server.coordinator_runtime.CoordinatorRuntime` loads its partitions, applies its results and
fires its timers (transaction timeouts, transactional-id expiry). What is the transaction coordinator's
own (Kafka's ``TransactionStateManager`` plus its marker channel):

- ``__transaction_state`` has ``transaction.state.log.num.partitions`` partitions, compacted; the
  coordinator epoch of a partition is its leader epoch (stamped on every marker).
- **No producer id is handed out while a partition of it loads**: each load holds the broker's
  ``ProducerIdManager`` from the moment the partition becomes loading (at start, before a request is read),
  released with its transactional ids' highest producer id when the load ends (one that fails releases
  with what it replayed), so the floor includes them (see producer_id_manager.py).
- **A marker is never written before the Prepare record that decided it has been appended**: markers are
  the runtime's after-commit effect, dropped when an append failed (the partition is reloaded and the
  coordinator, finding the transaction in Prepare*, emits them again).
- Markers go through :meth:`TransactionRuntime.write_marker` (``ReplicaManager.write_txn_marker``; an
  admin's WriteTxnMarkers, :mod:`tidelog.server.handlers.write_txn_markers`, takes the same path)
  synchronously, before the event loop gets to send the response: an EndTxn answer leaves once the
  transaction is complete on every partition (Kafka answers once the Prepare record is durable; answering
  later only helps the client's next transaction). Written partitions are reported with
  ``on_markers_written`` (a vanished partition counts as written); a marker on ``__consumer_offsets`` also
  settles the producer's pending offsets in the group coordinator. A marker refused with
  INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED stops that marker set unreported (a newer
  epoch has moved on); any other failure is retried on the partitions left.
- The produce path's KIP-890 verification is the coordinator's ``verify_partition``, registered with the
  replica manager when the runtime is built. Before ``__transaction_state`` exists no transaction can
  exist, so every transactional batch is refused with INVALID_TXN_STATE (as before a coordinator existed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from tidelog.coordinator.common import (
    TRANSACTION_STATE_TOPIC_NAME,
    CoordinatorRecord,
    CoordinatorResult,
    WriteTxnMarkers,
)
from tidelog.coordinator.txn import TransactionCoordinator, TransactionCoordinatorConfig, TxnTimerKey
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import ControlRecordType, SimpleRecord, encode_batch
from tidelog.protocol.schema import Request
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.config import BrokerConfig
from tidelog.server.coordinator_runtime import CoordinatorRuntime
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.group_runtime import OFFSETS_TOPIC, GroupRuntime
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.producer_id_floor import NONE_IN_USE, highest_in_transactions
from tidelog.server.producer_id_manager import ProducerIds
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionRuntime", "coordinator_config"]

log = logging.getLogger("tidelog.transactions")

TRANSACTION_STATE_TOPIC = TRANSACTION_STATE_TOPIC_NAME
"""Kafka's ``Topic.TRANSACTION_STATE_TOPIC_NAME``."""

MARKER_RETRY_BACKOFF_S = 0.2
"""Pause before writing a marker again after a failure that may pass (a storage error)."""

_STOP_MARKERS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


def state_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """Kafka's ``TransactionLog.transactionTopicConfigs``."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.transaction_state_log_segment_bytes),
        "min.insync.replicas": str(config.transaction_state_log_min_isr),
        "unclean.leader.election.enable": "false",
    }


def coordinator_config(
    broker_config: BrokerConfig, num_partitions: int, offsets_topic_num_partitions: int
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


class TransactionRuntime(CoordinatorRuntime[TxnTimerKey]):
    """Runs one broker's :class:`TransactionCoordinator` over its ``__transaction_state`` partitions."""

    what = "transactional ids"
    coordinator: TransactionCoordinator

    def __init__(
        self,
        *,
        admin: TopicAdmin,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        producer_ids: ProducerIds,
        groups: GroupRuntime,
        clock: Clock,
    ) -> None:
        config = admin.config
        existing = metadata.topic(TRANSACTION_STATE_TOPIC)
        partitions = (
            existing.num_partitions if existing is not None else config.transaction_state_log_num_partitions
        )
        super().__init__(
            TransactionCoordinator(
                coordinator_config(config, partitions, groups.num_partitions),
                allocate_producer_id=producer_ids.generate_producer_id,
                partition_exists=metadata.has_partition,
            ),
            admin=admin,
            metadata=metadata,
            replicas=replicas,
            clock=clock,
            load_buffer_bytes=config.transaction_state_log_load_buffer_size,
            topic_configs=state_topic_configs(config),
        )
        self._producer_ids = producer_ids
        self._groups = groups
        self._marker_retries: set[asyncio.TimerHandle] = set()
        replicas.set_transaction_verifier(self.verify_partition)

    @property
    def state_topic_exists(self) -> bool:
        return TRANSACTION_STATE_TOPIC in self._metadata

    def ensure_state_topic(self) -> TopicInfo | None:
        """Create ``__transaction_state`` if it does not exist (its empty partitions are loaded at once)."""
        return self.ensure_topic()

    def shutdown(self) -> None:
        """Broker stop: unload every partition (timers go; transactions left in Prepare* are finished by
        the next start, which writes their markers again)."""
        for handle in self._marker_retries:
            handle.cancel()
        self._marker_retries.clear()
        super().shutdown()

    # -- loading ---------------------------------------------------------------------------------------

    @staticmethod
    def _producer_ids_hold(partition: int) -> str:
        return f"{TRANSACTION_STATE_TOPIC}-{partition}"

    def _on_begin_loading(self, partition: int) -> None:
        self._producer_ids.hold(self._producer_ids_hold(partition))

    def _on_load_ended(self, partition: int) -> None:
        """The producer ids of ``partition``'s transactional ids are known: the floor may include them."""
        if self._producer_ids_hold(partition) not in self._producer_ids.holds:
            return
        if self.coordinator.is_loading(partition) and not self._stopped:
            log.warning(
                "%s-%d did not load: producer ids go on above the ids of the records it replayed",
                TRANSACTION_STATE_TOPIC,
                partition,
            )
        owned = self.coordinator.txn_partition(partition)
        in_use = highest_in_transactions(owned.transactions.values()) if owned is not None else NONE_IN_USE
        try:
            self._producer_ids.release(self._producer_ids_hold(partition), *in_use)
        except OSError as exc:  # the jumped block is written by the next InitProducerId then
            log.warning("cannot write the producer id block: %s", exc)

    def _loaded_summary(self, partition: int) -> str:
        owned = self.coordinator.txn_partition(partition)
        return f"{len(owned.transactions) if owned is not None else 0} transactional ids"

    def _batch(
        self, records: list[CoordinatorRecord], now_ms: int, producer: tuple[int, int] | None
    ) -> tuple[bytes, AppendOrigin]:
        assert producer is None  # the transaction log is written by the coordinator alone
        batch = encode_batch([SimpleRecord(key=r.key, value=r.value, timestamp=now_ms) for r in records])
        return batch, AppendOrigin.CLIENT

    def _after_commit(self, result: CoordinatorResult[TxnTimerKey]) -> None:
        for markers in result.markers:
            self._write_markers(markers, markers.partitions)

    # -- requests --------------------------------------------------------------------------------------

    def handle(self, ctx: RequestContext, request: Request) -> Answer:
        """Serve a transaction coordinator request (InitProducerId with a transactional id,
        AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions)."""
        answer = self.handle_request(request, ctx.api_version)
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
            self.apply(self.coordinator.on_markers_written(markers, now, written))
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


def _summary(message: object) -> str:
    """A short description of a request or response for debug logs."""
    parts = []
    for name in ("transactional_id", "producer_id", "producer_epoch", "committed", "group_id", "error_code"):
        value = getattr(message, name, None)
        if value not in (None, ""):
            parts.append(f"{name}={value}")
    return " ".join(parts)
