"""Partitions this broker leads, and the produce and fetch paths through them.

Invariants:
- A partition's high watermark never passes its log end offset. On a single node the ISR is this broker
  alone, so an append advances the high watermark to the new log end offset as soon as it returns
  (acks=1 and acks=-1 both complete at once); replication (wave 2) moves it only as followers catch up.
- Batches are validated whole (CRC, sizes, counts) before anything is written; a bad batch fails its own
  partition with a Kafka error code and nothing of that partition's payload is appended. On a compacted
  topic (and only there) records are decoded too: one without a key fails the partition (INVALID_RECORD).
- Consumers read only below the high watermark; read_committed consumers only below the last stable
  offset (the log's: the first offset of the oldest open transaction, else the high watermark).
- After every append, transaction markers included, the watchers of that partition in the fetch purgatory
  are checked, so a long-poll fetch completes as soon as enough data has arrived or the last stable offset
  has moved past it.
- Transactional produce is verified (KIP-890) through ``transaction_verifier``, which rejects everything
  until the transaction coordinator registers its own (:mod:`tidelog.server.txn_verification`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.records import ControlRecordType, validate_batches
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.compaction_validation import require_record_keys
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import PartitionLog
from tidelog.storage.producer_state import AppendOrigin

from .txn_verification import TransactionVerifier, reject_unverified

__all__ = ["Partition", "RegionList", "ReplicaManager"]

log = logging.getLogger("tidelog.replica_manager")


class RegionList:
    """Several file regions sent back to back as one ``records`` field (``nbytes`` is their sum)."""

    __slots__ = ("nbytes", "regions")

    def __init__(self, regions: list[Any]) -> None:
        self.regions = regions
        self.nbytes = sum(r.nbytes for r in regions)


@dataclass(slots=True)
class Partition:
    """One partition led by this broker: its log plus leader state."""

    topic: str
    index: int
    log: PartitionLog
    leader_epoch: int = 0

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate and append a produce payload; returns the storage's append info. ``origin``
        COORDINATOR is the broker's own transactional batches (offset commits): producer id and epoch
        without sequences, checked for epochs only."""
        validate_batches(
            records,
            max_batch_bytes=self.log.config.max_message_bytes,
            from_client=origin is AppendOrigin.CLIENT,
        )
        if self.log.config.compact_enabled:
            require_record_keys(records, f"{self.topic}-{self.index}")
        info = self.log.append(records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=origin)
        self.log.update_high_watermark(self.log.log_end_offset)
        return info

    def append_control_marker(
        self,
        kind: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
    ) -> LogAppendInfo:
        """Write a COMMIT/ABORT marker as leader (WriteTxnMarkers); raises the storage's typed errors."""
        info = self.log.append_control_marker(
            kind,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
        )
        self.log.update_high_watermark(self.log.log_end_offset)
        return info

    @property
    def high_watermark(self) -> int:
        return int(self.log.high_watermark)

    @property
    def last_stable_offset(self) -> int:
        return int(self.log.last_stable_offset)

    @property
    def log_start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self.log.log_end_offset)


class ReplicaManager:
    """Owns the Partition objects; the handlers reach logs only through it."""

    def __init__(self, log_manager: LogManager, on_append: Callable[[tuple[str, int]], None]) -> None:
        self._logs = log_manager
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._on_append = on_append
        self.transaction_verifier: TransactionVerifier = reject_unverified

    def set_transaction_verifier(self, verifier: TransactionVerifier | None) -> None:
        """Register the transaction coordinator's check of transactional produce (None: reject all)."""
        self.transaction_verifier = verifier if verifier is not None else reject_unverified

    def load(self, topic: str, index: int) -> Partition | None:
        existing = self._logs.get(topic, index)
        if existing is None:
            return None
        partition = Partition(topic, index, existing)
        # The ISR is this broker alone: everything in the log is committed.
        existing.update_high_watermark(existing.log_end_offset)
        self._partitions[(topic, index)] = partition
        return partition

    def create(self, topic: str, index: int, config: LogConfig) -> Partition:
        partition = Partition(topic, index, self._logs.create(topic, index, config))
        self._partitions[(topic, index)] = partition
        return partition

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def delete(self, topic: str, index: int) -> None:
        self._partitions.pop((topic, index), None)
        self._logs.delete(topic, index)

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def append(
        self,
        topic: str,
        index: int,
        records: Any,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> tuple[ErrorCode, Any, str | None]:
        """Append to one partition; returns (error, append info or None, error message)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
        if records is None:
            return ErrorCode.INVALID_RECORD, None, "produce request without records"
        try:
            info = partition.append(records, now_ms=now_ms, origin=origin)
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
    ) -> tuple[ErrorCode, LogAppendInfo | None, str | None]:
        """Write a transaction marker to one partition (what WriteTxnMarkers does per partition); returns
        (error, append info or None, error message): INVALID_PRODUCER_EPOCH for an older producer epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch, UNKNOWN_TOPIC_OR_PARTITION,
        KAFKA_STORAGE_ERROR. Long-poll fetches of the partition are checked afterwards (the LSO may move)."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
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
