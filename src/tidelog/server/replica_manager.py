"""The partition replicas this broker hosts, the write paths through them, and their roles in the cluster
(Kafka's ``ReplicaManager``).

Handlers and coordinator runtimes reach partition data only through here: writes through
:meth:`ReplicaManager.append`, :meth:`ReplicaManager.write_txn_marker` and
:meth:`ReplicaManager.delete_records`, reads through the :class:`~tidelog.replication.partition.Partition`
that :meth:`ReplicaManager.leader_partition` hands out (the only door to a log; nothing in the server
touches a ``PartitionLog``). It owns the two purgatories that wait on partitions: long-poll fetches and
acks=all produces.

Invariants:

- After every append, transaction markers included, the fetch purgatory's watchers of that partition are
  checked, so a long-poll fetch (a consumer's or a follower's) completes as soon as enough data has arrived
  or the last stable offset has moved past it. After every high-watermark move (a follower's fetch, an ISR
  change) both purgatories' watchers are checked; after every leadership change too (a waiting acks=all
  produce is answered NOT_LEADER_OR_FOLLOWER).
- Each partition succeeds or fails on its own: a bad batch fails its partition with a Kafka error code and
  nothing of that partition's payload is appended; a disk error is KAFKA_STORAGE_ERROR.
- Transactional produce is verified (KIP-890) through the registered verifier, which rejects everything
  until the transaction coordinator registers its own (:mod:`tidelog.server.txn_verification`).
- A DeleteRecords that moved a log start offset is checkpointed (``log-start-offset-checkpoint``) before
  it is answered.
- Roles: on a single node every hosted partition is led here (leader epoch 0, ISR of this broker). In a
  cluster a partition's role comes only from :meth:`apply_partition_state` (the cluster's state of it) and
  :meth:`fence` (this broker lost its ZooKeeper session: it leads nothing until the state is read again).
  The leadership listeners (coordinator runtimes, share groups, replica fetchers) hear of every change of
  role and of leader epoch, except a leader's going on at the very next epoch (the controller's ISR
  removal): an ISR change is never a leadership change.
  A partition this broker hosts but does not lead answers NOT_LEADER_OR_FOLLOWER; one it does not host
  but the cluster has, NOT_LEADER_OR_FOLLOWER too (the client's metadata is stale); one the cluster does
  not have, UNKNOWN_TOPIC_OR_PARTITION.
- ISR changes a leader proposes are handed to the registered ISR writer (ZooKeeper, conditional on the
  partition epoch) one at a time per partition; the partition changes its ISR only when the write was
  accepted.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.records import ControlRecordType
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.partition import Partition
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import KafkaStorageError
from tidelog.storage.log_dir_failures import takes_dir_offline
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.producer_state import AppendOrigin

from .clock import Clock
from .fetch_purgatory import FetchPurgatory
from .metadata_cache import MetadataCache
from .metrics.topic_metrics import BrokerTopicMetrics
from .produce_purgatory import ProducePurgatory
from .txn_verification import TransactionVerifier, reject_unverified

__all__ = ["AppendResult", "IsrWriter", "LeadershipListener", "ReplicaManager"]

log = logging.getLogger("tidelog.replica_manager")
_BYTES_LIKE = (bytes, bytearray, memoryview)

AppendResult = tuple[ErrorCode, LogAppendInfo | None, str | None]
"""(error, append info or None, error message or None)."""

IsrWriter = Callable[[str, int, LeaderAndIsr], Awaitable[LeaderAndIsr | None]]
"""Writes a leader's ISR change conditional on its partition epoch: the stored state, or None (refused)."""

LeadershipListener = Callable[[Partition, bool], None]
"""Told ``(partition, is_leader)`` each time a partition's role or leader epoch changes here, except when its
leader goes on leading at the next leader epoch (see :meth:`ReplicaManager.apply_partition_state`)."""


class ReplicaManager:
    """Owns this broker's :class:`Partition` objects; see the module docstring."""

    def __init__(
        self,
        log_manager: LogManager,
        clock: Clock,
        *,
        node_id: int,
        metadata: MetadataCache,
        cluster_mode: bool = False,
        replica_lag_time_max_ms: int = 30_000,
    ) -> None:
        self._logs = log_manager
        self._node_id = node_id
        self._clock = clock
        self._metadata = metadata
        self.cluster_mode = cluster_mode
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._transaction_verifier: TransactionVerifier = reject_unverified
        self.fetch_purgatory = FetchPurgatory(clock)
        self.produce_purgatory = ProducePurgatory(clock, self._led)
        self._isr_writer: IsrWriter | None = None
        self._isr_writes: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._leadership_listeners: list[LeadershipListener] = []
        self.fenced = False
        # issue 14 hooks: metrics
        self.topic_metrics: BrokerTopicMetrics | None = None
        """Counts client appends per topic when the broker's metrics are on (set by the broker)."""
        self.log_dir_failures = log_manager.log_dir_failures
        """Log dirs an I/O error took offline: their partitions answer KAFKA_STORAGE_ERROR (issue 17)."""
        self.log_dir_failure_listeners: list[Callable[[Path], None]] = []
        """Told each log dir that goes offline, once (issue 15: in a cluster, the controller hears of it)."""
        self.isr_shrinks = 0
        self.isr_expands = 0
        """ISR changes this leader stored (Kafka's IsrShrinksPerSec / IsrExpandsPerSec counts)."""

    # -- hosting ---------------------------------------------------------------------------------------

    def load(self, topic: str, index: int) -> Partition | None:
        """Serve the log of ``topic-index`` the log manager recovered, if it has one (single node: led
        here at once; cluster: offline until the cluster's state of it is applied)."""
        existing = self._logs.get(topic, index)
        if existing is None:
            return None
        return self._host(topic, index, Partition(topic, index, existing, local_broker_id=self._node_id))

    def create(
        self, topic: str, index: int, config: LogConfig, *, topic_id: uuid.UUID | None = None
    ) -> Partition:
        log = self._logs.create(topic, index, config, topic_id=topic_id)
        return self._host(topic, index, Partition(topic, index, log, local_broker_id=self._node_id))

    def holds_other_topic(self, topic: str, index: int, topic_id: uuid.UUID) -> bool:
        """Whether the log of ``topic-index`` on disk records another topic id than ``topic_id`` (it was left
        by a topic of that name deleted while this broker was down)."""
        recorded = self._logs.topic_id(topic, index)
        return recorded is not None and recorded != topic_id

    def record_topic_id(self, topic: str, index: int, topic_id: uuid.UUID) -> None:
        """Record ``topic_id`` in the hosted log of ``topic-index`` if it records none yet (a log written
        before ids were kept); check :meth:`holds_other_topic` first."""
        if self._logs.get(topic, index) is not None:
            self._logs.create(topic, index, topic_id=topic_id)

    def _host(self, topic: str, index: int, partition: Partition) -> Partition:
        if not self.cluster_mode:
            partition.make_single_node_leader(now_ms=self._clock.now_ms())  # the ISR is this broker alone
        self._partitions[(topic, index)] = partition
        return partition

    def delete(self, topic: str, index: int) -> None:
        partition = self._partitions.pop((topic, index), None)
        if partition is not None and partition.is_leader:
            partition.stop_leading()
            self._changed(partition)
        self.fetch_purgatory.appended_bytes.forget((topic, index))
        self._logs.delete(topic, index)

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Give every hosted partition log of ``topic`` its re-derived config (applied live)."""
        self._logs.update_config(topic, config)

    def get(self, topic: str, index: int) -> Partition | None:
        """The hosted replica of ``topic-index``, whatever its role."""
        return self._partitions.get((topic, index))

    def _led(self, topic: str, index: int) -> Partition | None:
        partition = self._partitions.get((topic, index))
        if partition is None or partition.leader_id != partition.local_broker_id:  # is_leader, without a call
            return None
        return None if self.fenced else partition

    def hosted_for_lookup(self) -> Mapping[tuple[str, int], Partition] | None:
        """The hosted replicas by (topic, index), when each one led here (``leader_id ==
        local_broker_id``) is what :meth:`leader_partition` answers for it (this broker not fenced, no log
        dir offline): a caller looking up many partitions checks that itself and asks
        :meth:`leader_partition` for the others (their error). None: ask :meth:`leader_partition` for each."""
        if self.fenced or self.log_dir_failures:
            return None
        return self._partitions

    def leader_partition(self, topic: str, index: int) -> Partition | ErrorCode:
        """The replica of ``topic-index`` if this broker leads it, else the error a client gets."""
        partition = self._led(topic, index)
        if partition is not None:
            if self.log_dir_failures and self._offline(topic, index):
                return ErrorCode.KAFKA_STORAGE_ERROR
            return partition
        if (topic, index) in self._partitions or self._metadata.has_partition(topic, index):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def _log_dir(self, topic: str, index: int) -> Path | None:
        partition_log = self._logs.get(topic, index)
        return partition_log.dir.parent if partition_log is not None else None

    def is_offline(self, topic: str, index: int) -> bool:
        """Whether the log of ``topic-index`` is in a log dir an I/O error took offline."""
        return bool(self.log_dir_failures) and self._offline(topic, index)

    def _offline(self, topic: str, index: int) -> bool:
        log_dir = self._log_dir(topic, index)
        return log_dir is not None and self.log_dir_failures.is_offline(log_dir)

    def io_failed(self, topic: str, index: int, exc: BaseException) -> ErrorCode:
        """An I/O error on ``topic-index``'s log: unless the disk is only full, its log dir goes offline
        (once, logged); KAFKA_STORAGE_ERROR either way."""
        log_dir = self._log_dir(topic, index)
        if log_dir is not None:
            self.log_dir_failed(log_dir, f"{topic}-{index}", exc)
        return ErrorCode.KAFKA_STORAGE_ERROR

    def _write_failed(self, what: str, topic: str, index: int, exc: OSError) -> AppendResult:
        """A write that raised ``exc`` outside the segment's own error handling (a roll's new files, the
        producer snapshot): a full disk is an operating condition (one line, no traceback), anything else
        is logged with its traceback; KAFKA_STORAGE_ERROR either way."""
        if takes_dir_offline(exc):
            log.error("%s %s-%s failed", what, topic, index, exc_info=exc)
        else:
            log.warning("%s %s-%s failed: the disk is full (%s)", what, topic, index, exc)
        return self.io_failed(topic, index, exc), None, "the broker could not write to its log"

    def log_dir_failed(self, log_dir: Path, what: str, exc: BaseException) -> None:
        """An I/O error on ``what`` (a partition, a file) in ``log_dir``: offline unless the disk is full."""
        if takes_dir_offline(exc) and self.log_dir_failures.fail(log_dir, str(exc)):
            log.error(
                "log dir %s is offline after an I/O error on %s: %s; its partitions answer "
                "KAFKA_STORAGE_ERROR until the broker restarts",
                log_dir,
                what,
                exc,
            )
            for listener in self.log_dir_failure_listeners:
                listener(log_dir)

    def partitions_in(self, log_dir: Path) -> list[Partition]:
        """The hosted partitions whose logs are in ``log_dir``."""
        return [p for p in self if self._log_dir(p.topic, p.index) == log_dir]

    def online_logs(self) -> list[PartitionLog]:
        """The logs in log dirs that are not offline (what background tasks may touch)."""
        failures = self.log_dir_failures
        return [plog for _tp, plog in self._logs if not failures or not failures.is_offline(plog.dir.parent)]

    def logs_to_flush(self) -> list[PartitionLog]:
        """The logs the periodic flush visits: those with a change since they were last idle
        (:meth:`LogManager.logs_to_flush`), in log dirs that are not offline."""
        failures = self.log_dir_failures
        logs = self._logs.logs_to_flush()
        if not failures:
            return logs
        return [plog for plog in logs if not failures.is_offline(plog.dir.parent)]

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def __len__(self) -> int:
        return len(self._partitions)

    # -- roles (cluster mode) --------------------------------------------------------------------------

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._leadership_listeners.append(listener)

    def set_isr_writer(self, writer: IsrWriter | None) -> None:
        self._isr_writer = writer

    def apply_partition_state(
        self,
        topic: str,
        index: int,
        *,
        assignment: tuple[int, ...],
        state: LeaderAndIsr,
        config: LogConfig,
        topic_id: uuid.UUID | None = None,
        removing_replicas: tuple[int, ...] = (),
    ) -> Partition | None:
        """The cluster's state of ``topic-index``: host it (creating its log) if this broker is assigned,
        and lead or follow as ``state`` says. A state older than the partition's is ignored. Returns the
        partition, or None when this broker is not assigned."""
        if self._node_id not in assignment:
            return None
        # issue 15: a replica in an offline log dir takes its role, touching no file there
        on_disk = not (self.log_dir_failures and self._offline(topic, index))
        if on_disk and topic_id is not None and self.holds_other_topic(topic, index, topic_id):
            log.warning(
                "%s-%d on disk belongs to an earlier topic of that name (deleted, created again): replacing it",
                topic,
                index,
            )
            self.delete(topic, index)
        partition = self._partitions.get((topic, index))
        if partition is None:
            partition = self.load(topic, index) or self.create(topic, index, config, topic_id=topic_id)
        if on_disk and topic_id is not None:
            self.record_topic_id(topic, index, topic_id)  # a log from before ids were kept gets it
        if self.fenced:
            return partition
        now = self._clock.now_ms()
        was_leader = partition.is_leader
        epoch_before = partition.leader_epoch
        if state.leader == self._node_id:
            changed = partition.make_leader(
                state, assignment, now_ms=now, removing_replicas=removing_replicas
            )
        else:
            changed = partition.make_follower(state, assignment, removing_replicas=removing_replicas)
        if changed or was_leader != partition.is_leader:
            log.info(
                "%s-%d: %s at leader epoch %d (ISR %s)",
                topic,
                index,
                "leader" if partition.is_leader else f"follower of {state.leader}",
                state.leader_epoch,
                sorted(state.isr),
            )
            if was_leader and partition.is_leader and partition.leader_epoch == epoch_before + 1:
                # The leader goes on at the next epoch: the controller took a replica out of the ISR (a
                # follower died) or changed the replicas (a reassignment). Nobody else led in between (every
                # leader change raises the epoch by one), so nothing held for being the leader is stale: the
                # coordinators stay loaded, share-partitions keep their acquisitions (Kafka's ZooKeeper-mode
                # makeLeader is "already the leader" then; its coordinator runtime "already loaded").
                self._check_waiters((topic, index))
            else:
                self._changed(partition)
        else:
            self._check_waiters((topic, index))
        return partition

    def fence(self) -> None:
        """This broker lost its ZooKeeper session: it stops leading everything until the cluster's state is
        applied again (:meth:`unfence` first)."""
        self.fenced = True
        for partition in self:
            if partition.is_leader:
                partition.stop_leading()
                self._changed(partition)

    def unfence(self) -> None:
        self.fenced = False

    def _changed(self, partition: Partition) -> None:
        for listener in self._leadership_listeners:
            try:
                listener(partition, partition.is_leader)
            except Exception:
                log.exception("leadership listener failed for %s-%d", partition.topic, partition.index)
        self.fetch_purgatory.appended_bytes.forget((partition.topic, partition.index))  # a new history
        self._check_waiters((partition.topic, partition.index))

    def _check_waiters(self, key: tuple[str, int]) -> None:
        self.produce_purgatory.check(key)
        self.fetch_purgatory.on_append(key)

    def _after_leader_append(
        self, partition: Partition, high_watermark_before: int | None, info: LogAppendInfo
    ) -> None:
        """Wake the long polls (followers wait for the new records; the fetch purgatory counts the append's
        size) and, only if the append moved the high watermark (an ISR of the leader alone), the acks=all
        produces: otherwise none of them can complete, and checking each waiting produce on every append
        costs O(waiting) per append (Kafka's ``tryCompleteDelayedRequests`` runs only when the high watermark
        was incremented). ``high_watermark_before`` None: no acks=all produce was waiting before the append
        (none can have started waiting during it), so there is nothing to check."""
        key = (partition.topic, partition.index)
        if high_watermark_before is not None and partition.high_watermark != high_watermark_before:
            self.produce_purgatory.check(key)
        if info.duplicate:  # a retried idempotent batch: nothing was written
            self.fetch_purgatory.on_append(key)
        else:
            self.fetch_purgatory.appended(key, info.first_offset, info.last_offset + 1, info.valid_bytes)

    # -- followers fetching from this leader -----------------------------------------------------------

    def follower_fetch(
        self,
        partition: Partition,
        replica_id: int,
        *,
        fetch_offset: int,
        log_start_offset: int,
        broker_epoch: int,
    ) -> None:
        """A follower's fetch at ``fetch_offset`` tells this leader its log end offset: move the high
        watermark, wake what waits on it, and propose the follower for the ISR if it caught up."""
        now = self._clock.now_ms()
        if partition.update_follower_fetch_state(
            replica_id,
            fetch_offset=fetch_offset,
            log_start_offset=log_start_offset,
            now_ms=now,
            broker_epoch=broker_epoch,
            max_lag_ms=self.replica_lag_time_max_ms,
        ):
            self._check_waiters((partition.topic, partition.index))
        broker = self._metadata.broker(replica_id)
        proposal = partition.maybe_expand_isr(
            replica_id, alive_broker_epoch=None if broker is None else broker.epoch
        )
        if proposal is not None:
            self._write_isr(partition, proposal)

    def shrink_isrs(self) -> None:
        """The periodic ISR check (every ``replica.lag.time.max.ms / 2``): drop followers that fell behind."""
        if self.fenced:
            return
        now = self._clock.now_ms()
        for partition in self:
            proposal = partition.maybe_shrink_isr(now_ms=now, max_lag_ms=self.replica_lag_time_max_ms)
            if proposal is not None:
                log.info(
                    "%s-%d: shrinking the ISR from %s to %s",
                    partition.topic,
                    partition.index,
                    sorted(partition.isr),
                    list(proposal.isr),
                )
                self._write_isr(partition, proposal)

    def _write_isr(self, partition: Partition, proposal: LeaderAndIsr) -> None:
        writer = self._isr_writer
        key = (partition.topic, partition.index)
        if writer is None:
            partition.isr_update_failed()
            return

        async def write() -> None:
            try:
                stored = await writer(partition.topic, partition.index, proposal)
            except Exception:
                log.exception("writing the ISR of %s-%d failed", partition.topic, partition.index)
                stored = None
            finally:
                self._isr_writes.pop(key, None)
            if stored is None:
                partition.isr_update_failed()
                return
            before = len(partition.isr)
            committed = partition.isr_update_committed(
                stored, now_ms=self._clock.now_ms(), max_lag_ms=self.replica_lag_time_max_ms
            )
            after = len(partition.isr)
            if after < before:
                self.isr_shrinks += 1
            elif after > before:
                self.isr_expands += 1
            if committed:
                self._check_waiters(key)
            else:
                self.produce_purgatory.check(key)

        self._isr_writes[key] = asyncio.get_running_loop().create_task(write())

    # -- transactions ----------------------------------------------------------------------------------

    def set_transaction_verifier(self, verifier: TransactionVerifier | None) -> None:
        """Register the transaction coordinator's check of transactional produce (None: reject all)."""
        self._transaction_verifier = verifier if verifier is not None else reject_unverified

    def verify_transaction(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str, index: int
    ) -> ErrorCode:
        """KIP-890: NONE when ``topic-index`` is in the producer's ongoing transaction."""
        return ErrorCode(
            self._transaction_verifier(transactional_id, producer_id, producer_epoch, topic, index)
        )

    # -- writes ----------------------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        index: int,
        records: object,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        required_acks: int = 1,
    ) -> AppendResult:
        """Append ``records`` (a produce payload: record batch bytes) to one partition this broker leads.
        With ``required_acks`` -1 the ISR must have ``min.insync.replicas`` members (else
        NOT_ENOUGH_REPLICAS, nothing written); waiting for the high watermark is the caller's
        (:attr:`produce_purgatory`)."""
        led = self._partitions.get((topic, index))
        if (
            led is not None
            and led.leader_id == led.local_broker_id  # is_leader
            and not self.fenced
            and not self.log_dir_failures
        ):
            partition = led  # what leader_partition answers, without its calls (asked of every produce)
        else:
            found = self.leader_partition(topic, index)
            if isinstance(found, ErrorCode):
                return found, None, None
            partition = found
        if not isinstance(records, _BYTES_LIKE):  # a tuple: the union ``a | b`` is built per call
            return ErrorCode.INVALID_RECORD, None, "produce request without records"
        # Whether the append moved the high watermark matters only to waiting acks=all produces: with none
        # (a single node: always), neither read nor compared (four property calls an append)
        high_watermark = partition.high_watermark if self.produce_purgatory.waiting else None
        try:
            info = partition.append_records_as_leader(
                records, now_ms=now_ms, origin=origin, required_acks=required_acks
            )
        except KafkaStorageError as exc:
            return self.io_failed(topic, index, exc), None, str(exc)
        except KafkaProtocolError as exc:
            return exc.error_code, None, str(exc)
        except OSError as exc:
            return self._write_failed("append to", topic, index, exc)
        self._after_leader_append(partition, high_watermark, info)
        if self.topic_metrics is not None and origin is AppendOrigin.CLIENT:
            self.topic_metrics.appended(topic, info.last_offset - info.first_offset + 1, len(records))
        return ErrorCode.NONE, info, None

    def write_txn_marker(
        self,
        topic: str,
        index: int,
        kind: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
        required_acks: int = 1,
    ) -> AppendResult:
        """Write a transaction marker to one partition (what WriteTxnMarkers does per partition):
        INVALID_PRODUCER_EPOCH for an older producer epoch, TRANSACTION_COORDINATOR_FENCED for an older
        coordinator epoch, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR; with
        ``required_acks`` -1 NOT_ENOUGH_REPLICAS for an ISR below ``min.insync.replicas`` (waiting for the high
        watermark is the caller's, as for :meth:`append`). Long-poll fetches of the partition are checked
        afterwards (the LSO may move)."""
        partition = self.leader_partition(topic, index)
        if isinstance(partition, ErrorCode):
            return partition, None, None
        high_watermark = partition.high_watermark
        try:
            info = partition.append_control_marker(
                kind,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                now_ms=now_ms,
                required_acks=required_acks,
            )
        except KafkaStorageError as exc:
            return self.io_failed(topic, index, exc), None, str(exc)
        except KafkaProtocolError as exc:
            return exc.error_code, None, str(exc)
        except OSError as exc:
            return self._write_failed("transaction marker to", topic, index, exc)
        self._after_leader_append(partition, high_watermark, info)
        return ErrorCode.NONE, info, None

    def delete_records(self, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
        """DeleteRecords on one partition: (error, new log start offset or -1). ``offset`` -1 is the high
        watermark; above it (or below -1) is OFFSET_OUT_OF_RANGE."""
        partition = self.leader_partition(topic, index)
        if isinstance(partition, ErrorCode):
            return partition, -1
        before = partition.log_start_offset
        try:
            low_watermark = partition.delete_records_before(offset, now_ms=self._clock.now_ms())
        except KafkaProtocolError as exc:
            return exc.error_code, -1
        if low_watermark != before:
            self._logs.checkpoint_log_start_offsets()
            self.fetch_purgatory.on_append((topic, index))  # the log start moved: fetch sessions tell it
        return ErrorCode.NONE, low_watermark

    def shutdown(self) -> None:
        """Broker stop: answer everything waiting now, stop writing ISR changes."""
        self.fetch_purgatory.complete_all()
        self.produce_purgatory.complete_all()
        for task in self._isr_writes.values():
            task.cancel()
        self._isr_writes.clear()
