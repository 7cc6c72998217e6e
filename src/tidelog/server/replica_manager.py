"""The partition replicas this broker hosts, and the write paths through them (Kafka's ``ReplicaManager``).

Handlers and coordinator runtimes reach partition data only through here: writes through
:meth:`ReplicaManager.append`, :meth:`ReplicaManager.write_txn_marker` and
:meth:`ReplicaManager.delete_records`, reads through the :class:`~tidelog.replication.partition.Partition`
that :meth:`ReplicaManager.leader_partition` hands out (the only door to a log; nothing in the server
touches a ``PartitionLog``).

Invariants:

- After every append, transaction markers included, the watchers of that partition in the fetch purgatory
  are checked (``on_append``), so a long-poll fetch completes as soon as enough data has arrived or the
  last stable offset has moved past it.
- Each partition succeeds or fails on its own: a bad batch fails its partition with a Kafka error code and
  nothing of that partition's payload is appended; a disk error is KAFKA_STORAGE_ERROR.
- Transactional produce is verified (KIP-890) through the registered verifier, which rejects everything
  until the transaction coordinator registers its own (:mod:`tidelog.server.txn_verification`).
- A DeleteRecords that moved a log start offset is checkpointed (``log-start-offset-checkpoint``) before
  it is answered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.records import ControlRecordType
from tidelog.replication.partition import Partition
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager
from tidelog.storage.producer_state import AppendOrigin

from .clock import Clock
from .txn_verification import TransactionVerifier, reject_unverified

__all__ = ["AppendResult", "ReplicaManager"]

log = logging.getLogger("tidelog.replica_manager")

AppendResult = tuple[ErrorCode, LogAppendInfo | None, str | None]
"""(error, append info or None, error message or None)."""


class ReplicaManager:
    """Owns this broker's :class:`Partition` objects; see the module docstring."""

    def __init__(
        self,
        log_manager: LogManager,
        on_append: Callable[[tuple[str, int]], None],
        clock: Clock,
        *,
        node_id: int,
    ) -> None:
        self._logs = log_manager
        self._node_id = node_id
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._on_append = on_append
        self._clock = clock
        self._transaction_verifier: TransactionVerifier = reject_unverified

    # -- hosting ---------------------------------------------------------------------------------------

    def load(self, topic: str, index: int) -> Partition | None:
        """Serve the log of ``topic-index`` the log manager recovered, if it has one."""
        existing = self._logs.get(topic, index)
        if existing is None:
            return None
        return self._host(topic, index, Partition(topic, index, existing, local_broker_id=self._node_id))

    def create(self, topic: str, index: int, config: LogConfig) -> Partition:
        log = self._logs.create(topic, index, config)
        return self._host(topic, index, Partition(topic, index, log, local_broker_id=self._node_id))

    def _host(self, topic: str, index: int, partition: Partition) -> Partition:
        partition.make_single_node_leader(now_ms=self._clock.now_ms())  # the ISR is this broker alone
        self._partitions[(topic, index)] = partition
        return partition

    def delete(self, topic: str, index: int) -> None:
        self._partitions.pop((topic, index), None)
        self._logs.delete(topic, index)

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Give every hosted partition log of ``topic`` its re-derived config (applied live)."""
        self._logs.update_config(topic, config)

    def get(self, topic: str, index: int) -> Partition | None:
        """The hosted replica of ``topic-index``, whatever its role."""
        return self._partitions.get((topic, index))

    def leader_partition(self, topic: str, index: int) -> Partition | ErrorCode:
        """The replica of ``topic-index`` if this broker leads it, else the error a client gets
        (UNKNOWN_TOPIC_OR_PARTITION: not hosted here)."""
        partition = self._partitions.get((topic, index))
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if partition is None else partition

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def __len__(self) -> int:
        return len(self._partitions)

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
    ) -> AppendResult:
        """Append ``records`` (a produce payload: record batch bytes) to one partition this broker leads."""
        partition = self.leader_partition(topic, index)
        if isinstance(partition, ErrorCode):
            return partition, None, None
        if not isinstance(records, bytes | bytearray | memoryview):
            return ErrorCode.INVALID_RECORD, None, "produce request without records"
        try:
            info = partition.append_records_as_leader(records, now_ms=now_ms, origin=origin)
        except KafkaProtocolError as exc:
            return exc.error_code, None, str(exc)
        except OSError:
            log.exception("append to %s-%s failed", topic, index)
            return ErrorCode.KAFKA_STORAGE_ERROR, None, "the broker could not write to its log"
        self._on_append((topic, index))
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
    ) -> AppendResult:
        """Write a transaction marker to one partition (what WriteTxnMarkers does per partition):
        INVALID_PRODUCER_EPOCH for an older producer epoch, TRANSACTION_COORDINATOR_FENCED for an older
        coordinator epoch, UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR. Long-poll fetches of the
        partition are checked afterwards (the LSO may move)."""
        partition = self.leader_partition(topic, index)
        if isinstance(partition, ErrorCode):
            return partition, None, None
        try:
            info = partition.append_control_marker(
                kind,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                now_ms=now_ms,
            )
        except KafkaProtocolError as exc:
            return exc.error_code, None, str(exc)
        except OSError:
            log.exception("transaction marker to %s-%s failed", topic, index)
            return ErrorCode.KAFKA_STORAGE_ERROR, None, "the broker could not write to its log"
        self._on_append((topic, index))
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
        return ErrorCode.NONE, low_watermark
