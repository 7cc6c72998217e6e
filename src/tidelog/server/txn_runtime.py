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
- **A marker is never written before the Prepare record that decided it is committed**: markers are the
  runtime's after-commit effect (in a cluster: once ``__transaction_state``'s high watermark passed the
  record, within ``request.timeout.ms``), dropped when the append or its commit failed (the partition is
  reloaded and the coordinator, finding the transaction in Prepare*, emits them again, again only once
  what it loaded is committed).
- **Markers go to each partition's leader** (Kafka's ``TransactionMarkerChannelManager``). A partition
  this broker leads (every partition on a single node) is written through
  :meth:`TransactionRuntime.write_markers_locally` (``ReplicaManager.write_txn_marker``; an admin's or
  another coordinator's WriteTxnMarkers, :mod:`tidelog.server.handlers.write_txn_markers`, takes the same
  path): on a single node synchronously, before the event loop gets to send the EndTxn response (Kafka
  answers once the Prepare record is durable; answering later only helps the client's next transaction);
  in a cluster with acks=-1, counted as written once committed. The partitions other brokers lead (the
  metadata cache's leader) go to them as WriteTxnMarkers v1 through the broker's
  :class:`~tidelog.server.cluster.broker_client.BrokerClient` (:meth:`TransactionRuntime.set_broker_client`),
  one request per leader per marker set, each carrying the coordinator epoch (the
  ``__transaction_state`` partition's leader epoch). Written partitions are reported with
  ``on_markers_written`` (a vanished partition, UNKNOWN_TOPIC_OR_PARTITION, counts as written); a marker on
  ``__consumer_offsets`` written here also settles the producer's pending offsets in the group
  coordinator. A marker refused with INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED stops that
  marker set unreported (a newer epoch has moved on); any other failure (NOT_LEADER_OR_FOLLOWER, no
  leader, a dead or silent broker, NOT_ENOUGH_REPLICAS, a timeout) is retried after
  :data:`MARKER_RETRY_BACKOFF_S` on the partitions left, against their leaders then. A marker set whose
  ``__transaction_state`` partition is no longer loaded here at its coordinator epoch is dropped: its new
  coordinator sends it again.
- The produce path's KIP-890 verification is the coordinator's ``verify_partition``, registered with the
  replica manager when the runtime is built. Before ``__transaction_state`` exists no transaction can
  exist, so every transactional batch is refused with INVALID_TXN_STATE (as before a coordinator existed).
  **In a cluster, verification happens only where the transactional id's coordinator is this broker**
  (it leads the id's ``__transaction_state`` partition): the verdict is then taken in the same synchronous
  step as the append, as on a single node. A partition leader whose coordinator is another broker does not
  verify (Kafka 3.5's behaviour, transaction version 1 without ``transaction.partition.verification``):
  the batch is checked by the log's producer state alone (epoch fencing, sequences), because a verdict
  fetched over the network could be overtaken by a marker before the append, and closing that gap needs
  Kafka 3.6's verification guard in the producer state, which tidelog does not have.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.coordinator.common import (
    TRANSACTION_STATE_TOPIC_NAME,
    CoordinatorRecord,
    CoordinatorResult,
    WriteTxnMarkers,
)
from tidelog.coordinator.txn import TransactionCoordinator, TransactionCoordinatorConfig, TxnTimerKey
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from tidelog.protocol.records import ControlRecordType, SimpleRecord, encode_batch
from tidelog.protocol.schema import Request
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.cluster.broker_client import BrokerClient, BrokerClientError
from tidelog.server.config import BrokerConfig
from tidelog.server.coordinator_runtime import CoordinatorRuntime, KeyFields
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.group_runtime import OFFSETS_TOPIC, GroupRuntime
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.produce_purgatory import PendingAppend
from tidelog.server.producer_id_floor import NONE_IN_USE, highest_in_transactions
from tidelog.server.producer_id_manager import ProducerIds
from tidelog.server.replica_manager import AppendResult, ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "MarkerOutcome",
    "MarkerOutcomes",
    "TransactionRuntime",
    "coordinator_config",
]

log = logging.getLogger("tidelog.transactions")

TRANSACTION_STATE_TOPIC = TRANSACTION_STATE_TOPIC_NAME
"""Kafka's ``Topic.TRANSACTION_STATE_TOPIC_NAME``."""

MARKER_RETRY_BACKOFF_S = 0.2
"""Pause before writing a marker again after a failure that may pass (a storage error, a moved leader)."""

WRITE_TXN_MARKERS_VERSION = 1
"""What a coordinator sends to partition leaders (Kafka's ``TransactionMarkerChannelManager``)."""

MARKER_RESPONSE_SLACK_MS = 5000
"""How much longer than ``request.timeout.ms`` a coordinator waits for a leader's WriteTxnMarkers answer:
the leader waits up to ``request.timeout.ms`` for its markers' commit and then answers REQUEST_TIMED_OUT,
which is better than a client-side timeout closing the connection to that broker."""

_STOP_MARKERS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


@dataclass(slots=True)
class MarkerOutcome:
    """What became of one partition's marker (the produce purgatory fills ``error_code`` in when the
    marker waits for its commit)."""

    error_code: int
    message: str | None = None


MarkerOutcomes = dict[TopicPartition, MarkerOutcome]
"""Each partition's outcome, in the order the partitions were given."""


@dataclass(slots=True, eq=False)
class _MarkerSet:
    """One marker set being written (its partitions may be in several requests and retries)."""

    markers: WriteTxnMarkers
    stopped: bool = False


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
    key_fields = KeyFields(
        single=("transactional_id", "v3_and_below_transactional_id"),
        lists=("transactional_ids", "transactions"),
        item_field="transactional_id",
    )
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
            replication_factor=config.transaction_state_log_replication_factor,
            commit_timeout_ms=config.request_timeout_ms,
        )
        self._producer_ids = producer_ids
        self._groups = groups
        self._request_timeout_ms = config.request_timeout_ms
        self._client: BrokerClient | None = None
        self._marker_retries: set[asyncio.TimerHandle] = set()
        self._marker_sends: set[asyncio.Task[None]] = set()
        replicas.set_transaction_verifier(self.verify_partition)

    def set_broker_client(self, client: BrokerClient | None) -> None:
        """The client markers to partitions other brokers lead are sent with (cluster mode)."""
        self._client = client

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
        for task in self._marker_sends:
            task.cancel()
        self._marker_sends.clear()
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
            self._write_markers(_MarkerSet(markers), markers.partitions)

    def _effect_partitions(self, result: CoordinatorResult[TxnTimerKey]) -> set[int]:
        return {markers.txn_partition for markers in result.markers}

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
        transaction, else the coordinator's error. In a cluster, NONE without a check when the
        transactional id's coordinator is another broker (see the module docstring)."""
        if (
            self._replicas.cluster_mode
            and transactional_id
            and self.coordinator.txn_partition(self.partition_for(transactional_id)) is None
        ):
            return ErrorCode.NONE  # Kafka 3.5: a partition leader does not ask a remote coordinator
        if not self.state_topic_exists:
            return ErrorCode.INVALID_TXN_STATE  # no transaction has ever existed here
        return self.coordinator.verify_partition(
            transactional_id, producer_id, producer_epoch, topic, partition
        )

    # -- markers ---------------------------------------------------------------------------------------

    def _write_markers(self, marker_set: _MarkerSet, partitions: Iterable[TopicPartition]) -> None:
        """Write ``marker_set``'s markers on ``partitions``, each through its leader; the outcomes are
        handled by :meth:`_markers_done` as they come (at once for what is written here on a single node)."""
        markers = marker_set.markers
        if self._stopped or marker_set.stopped or not self._coordinating(markers):
            return
        local, remote, leaderless = self._route_markers(partitions)
        if local:
            written = self.write_markers_locally(
                local,
                markers.result,
                producer_id=markers.producer_id,
                producer_epoch=markers.producer_epoch,
                coordinator_epoch=markers.coordinator_epoch,
                now_ms=self._clock(),
                stop_on=_STOP_MARKERS,
            )
            if isinstance(written, asyncio.Future):
                written.add_done_callback(
                    lambda done: None if done.cancelled() else self._markers_done(marker_set, done.result())
                )
            else:
                self._markers_done(marker_set, written)
        if leaderless:
            self._markers_done(
                marker_set,
                {
                    tp: MarkerOutcome(ErrorCode.LEADER_NOT_AVAILABLE, "no leader to send it to")
                    for tp in leaderless
                },
            )
        if marker_set.stopped:
            return
        loop = asyncio.get_running_loop()
        for leader, tps in remote.items():
            task = loop.create_task(self._send_markers(marker_set, leader, tps))
            self._marker_sends.add(task)
            task.add_done_callback(self._marker_sends.discard)

    def _coordinating(self, markers: WriteTxnMarkers) -> bool:
        """Whether this broker still coordinates ``markers``' transaction at their coordinator epoch."""
        owned = self.coordinator.txn_partition(markers.txn_partition)
        return (
            owned is not None and not owned.loading and owned.coordinator_epoch == markers.coordinator_epoch
        )

    def _route_markers(
        self, partitions: Iterable[TopicPartition]
    ) -> tuple[list[TopicPartition], dict[int, list[TopicPartition]], list[TopicPartition]]:
        """(led here, led by each other broker, without a leader to send to). On a single node every
        partition is written here (a missing one answers UNKNOWN_TOPIC_OR_PARTITION there)."""
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        leaderless: list[TopicPartition] = []
        for tp in partitions:
            led = self._replicas.leader_partition(tp.topic, tp.partition)
            if not self._replicas.cluster_mode or not isinstance(led, ErrorCode):
                local.append(tp)
                continue
            info = self._metadata.partition(tp.topic, tp.partition)
            if led == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or info is None:
                local.append(tp)  # the topic is gone: written as UNKNOWN_TOPIC_OR_PARTITION
            elif info.leader < 0 or info.leader == self._metadata.node_id or self._client is None:
                leaderless.append(tp)  # no leader, or this broker's role not applied yet
            else:
                remote.setdefault(info.leader, []).append(tp)
        return local, remote, leaderless

    async def _send_markers(
        self, marker_set: _MarkerSet, leader: int, partitions: list[TopicPartition]
    ) -> None:
        """WriteTxnMarkers to ``leader`` for ``partitions``; every outcome goes to :meth:`_markers_done`."""
        markers = marker_set.markers
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        request = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=markers.producer_id,
                    producer_epoch=markers.producer_epoch,
                    transaction_result=markers.result is ControlRecordType.COMMIT,
                    topics=[
                        WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in topics.items()
                    ],
                    coordinator_epoch=markers.coordinator_epoch,
                )
            ]
        )
        outcomes: MarkerOutcomes
        client = self._client
        try:
            assert client is not None
            response = await client.send(
                leader,
                request,
                WRITE_TXN_MARKERS_VERSION,
                timeout_ms=self._request_timeout_ms + MARKER_RESPONSE_SLACK_MS,
                expect=WriteTxnMarkersResponse,
            )
        except BrokerClientError as exc:
            failure = MarkerOutcome(ErrorCode.NETWORK_EXCEPTION, f"broker {leader}: {exc}")
            outcomes = dict.fromkeys(partitions, failure)
        except Exception as exc:  # a broken answer must not lose the marker set: retry it
            log.exception("WriteTxnMarkers to broker %d failed", leader)
            failure = MarkerOutcome(ErrorCode.UNKNOWN_SERVER_ERROR, f"broker {leader}: {exc}")
            outcomes = dict.fromkeys(partitions, failure)
        else:
            answered = {
                TopicPartition(topic.name, partition.partition_index): partition.error_code
                for result in response.markers
                if result.producer_id == markers.producer_id
                for topic in result.topics
                for partition in topic.partitions
            }
            unanswered = MarkerOutcome(ErrorCode.UNKNOWN_SERVER_ERROR, f"broker {leader} did not answer it")
            outcomes = {
                tp: MarkerOutcome(answered[tp], f"from broker {leader}") if tp in answered else unanswered
                for tp in partitions
            }
        self._markers_done(marker_set, outcomes)

    def _markers_done(self, marker_set: _MarkerSet, outcomes: MarkerOutcomes) -> None:
        """Report the written partitions, stop the set on a fencing error, retry the others later."""
        if self._stopped:
            return
        markers = marker_set.markers
        written: list[TopicPartition] = []
        retry: list[TopicPartition] = []
        for tp, outcome in outcomes.items():
            error = ErrorCode(outcome.error_code)
            if error in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                written.append(tp)  # a partition that is gone has nothing to mark (Kafka drops it too)
            elif error in _STOP_MARKERS:
                log.warning(
                    "%s marker of %r (producer %d epoch %d) refused by %s: %s %s; not retried",
                    markers.result.name,
                    markers.transactional_id,
                    markers.producer_id,
                    markers.producer_epoch,
                    tp,
                    error.name,
                    outcome.message or "",
                )
                marker_set.stopped = True
            else:
                log.warning(
                    "%s marker of %r to %s failed: %s %s; retrying",
                    markers.result.name,
                    markers.transactional_id,
                    tp,
                    error.name,
                    outcome.message or "",
                )
                retry.append(tp)
        if written:
            self.apply(self.coordinator.on_markers_written(markers, self._clock(), written))
        if retry and not marker_set.stopped:
            self._retry_markers(marker_set, tuple(retry))

    def write_markers_locally(
        self,
        partitions: Iterable[TopicPartition],
        result: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
        stop_on: frozenset[ErrorCode] = frozenset(),
    ) -> MarkerOutcomes | asyncio.Future[MarkerOutcomes]:
        """Write one marker on each of ``partitions`` as their leader (:meth:`write_marker`), stopping at
        the first error in ``stop_on``. On a single node the outcomes now; in a cluster the markers are
        appended with acks=-1 and the outcomes come once each written one is committed (or not: Kafka's
        acks=all errors, within ``request.timeout.ms``)."""
        acks = -1 if self._replicas.cluster_mode else 1
        outcomes: MarkerOutcomes = {}
        waiting: list[PendingAppend] = []
        for tp in partitions:
            error, info, message = self.write_marker(
                tp,
                result,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                now_ms=now_ms,
                required_acks=acks,
            )
            outcome = outcomes[tp] = MarkerOutcome(error, message)
            if acks == -1 and info is not None:
                waiting.append(PendingAppend(tp.topic, tp.partition, info.last_offset + 1, outcome))
            if error in stop_on:
                break
        if not waiting:
            return outcomes
        return self._replicas.produce_purgatory.delay(self._request_timeout_ms, waiting, outcomes)

    def write_marker(
        self,
        tp: TopicPartition,
        result: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
        required_acks: int = 1,
    ) -> AppendResult:
        """Write one COMMIT/ABORT marker to one partition, as leader; returns (error, append info, message).
        The one path every marker written here takes, this coordinator's, another coordinator's and an
        admin's (``kafka-transactions.sh abort``): a marker written on ``__consumer_offsets`` settles the
        producer's pending offsets there. Waiting for its commit (``required_acks`` -1) is the caller's."""
        error, info, message = self._replicas.write_txn_marker(
            tp.topic,
            tp.partition,
            result,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            now_ms=now_ms,
            required_acks=required_acks,
        )
        if error == ErrorCode.NONE and tp.topic == OFFSETS_TOPIC:
            self._groups.on_transaction_marker(
                tp.partition,
                producer_id,
                result is ControlRecordType.COMMIT,
                None if info is None else info.last_offset + 1,
            )
        return ErrorCode(error), info, message

    def _retry_markers(self, marker_set: _MarkerSet, partitions: tuple[TopicPartition, ...]) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def again() -> None:
            self._marker_retries.discard(handle)
            try:
                self._write_markers(marker_set, partitions)
            except Exception:
                log.exception("writing the markers of %r failed", marker_set.markers.transactional_id)

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
