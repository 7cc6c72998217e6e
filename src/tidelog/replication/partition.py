"""One partition replica on this broker: the only door to its log (Kafka's ``cluster.Partition``).

Everything the server does to a partition's data goes through a :class:`Partition`: appends as leader
(client batches, the coordinators' batches, transaction markers), reads up to a high-watermark policy,
offset lookups, DeleteRecords, leader-epoch fencing and the producer state DescribeProducers shows. The
server never reaches the :class:`~tidelog.storage.partition_log.PartitionLog` behind it.

Invariants:

- The high watermark never passes the log end offset and never decreases while this replica leads. It is
  the smallest log end offset over the in-sync replicas; on a single node the ISR is this broker alone, so
  every append moves it to the new log end offset before the append returns.
- Batches are validated whole (CRC, sizes, counts) before anything is written; on a compacted topic (and
  only there) records are decoded too: one without a key fails the append (INVALID_RECORD). A failed
  append writes nothing.
- Consumers read below the high watermark, read_committed consumers below the last stable offset (the
  first offset of the oldest open transaction, else the high watermark).
- A request carrying a leader epoch (``current_leader_epoch`` >= 0) is served only at this replica's own
  epoch: an older one is FENCED_LEADER_EPOCH (the client's metadata is stale), a newer one
  UNKNOWN_LEADER_EPOCH (this replica's is).
- Pure: no asyncio, no sockets, no clock; time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import ControlRecordType, validate_batches
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.compaction_validation import require_record_keys
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import OffsetOutOfRangeError
from tidelog.storage.fetch_data import FetchDataInfo
from tidelog.storage.partition_log import OffsetAndTimestamp, PartitionLog
from tidelog.storage.producer_state import AppendOrigin, ProducerStateEntry

__all__ = ["FetchIsolation", "Partition"]


class FetchIsolation(IntEnum):
    """How far a read may go (Kafka's ``FetchIsolation``)."""

    LOG_END = 0
    """A follower replica: everything the leader has."""
    HIGH_WATERMARK = 1
    """A read_uncommitted consumer: committed records only."""
    TXN_COMMITTED = 2
    """A read_committed consumer: below the last stable offset."""


class Partition:
    """A partition replica: its log and what this broker knows of its leadership."""

    __slots__ = ("_log", "index", "leader_epoch", "topic")

    def __init__(self, topic: str, index: int, log: PartitionLog, *, leader_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self._log = log
        self.leader_epoch = leader_epoch

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, leader_epoch={self.leader_epoch})"

    # -- offsets ---------------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._log.last_stable_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def config(self) -> LogConfig:
        return self._log.config

    def fetchable_offset(self, isolation: FetchIsolation) -> int:
        """The offset a read under ``isolation`` stops before."""
        if isolation is FetchIsolation.TXN_COMMITTED:
            return self.last_stable_offset
        if isolation is FetchIsolation.HIGH_WATERMARK:
            return self.high_watermark
        return self.log_end_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """NONE when a request at ``current_leader_epoch`` (-1: none given) may be served here, else the
        fencing error (Kafka's ``Partition.checkCurrentLeaderEpoch``)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def _maybe_increment_high_watermark(self) -> None:
        """The ISR is this replica alone: everything in the log is committed."""
        self._log.update_high_watermark(self._log.log_end_offset)

    # -- writes ----------------------------------------------------------------------------------------

    def append_records_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate and append a produce payload; raises the storage's and protocol's typed errors
        (:class:`~tidelog.protocol.errors.KafkaProtocolError`) and writes nothing then. ``origin``
        COORDINATOR is the broker's own transactional batches (offset commits): producer id and epoch
        without sequences, checked for epochs only."""
        validate_batches(
            records,
            max_batch_bytes=self._log.config.max_message_bytes,
            from_client=origin is AppendOrigin.CLIENT,
        )
        if self._log.config.compact_enabled:
            require_record_keys(records, f"{self.topic}-{self.index}")
        info = self._log.append(records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=origin)
        self._maybe_increment_high_watermark()
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
        info = self._log.append_control_marker(
            kind,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
        )
        self._maybe_increment_high_watermark()
        return info

    def delete_records_before(self, offset: int, *, now_ms: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (-1: the high watermark); returns the
        new log start offset. Raises :class:`~tidelog.storage.errors.OffsetOutOfRangeError` for an offset
        below 0 or above the high watermark, and then changes nothing."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic}-{self.index} before {offset}: the high watermark is "
                f"{self.high_watermark}"
            )
        if target > self.log_start_offset:
            self._log.delete_records_before(target, now_ms=now_ms)
        return self.log_start_offset

    # -- reads -----------------------------------------------------------------------------------------

    def read(
        self, fetch_offset: int, max_bytes: int, *, isolation: FetchIsolation, min_one_batch: bool
    ) -> FetchDataInfo:
        """Whole batches from ``fetch_offset`` below the offset ``isolation`` allows, as file regions;
        raises :class:`~tidelog.storage.errors.OffsetOutOfRangeError` outside the log."""
        limit = None if isolation is FetchIsolation.LOG_END else self.fetchable_offset(isolation)
        return self._log.read(fetch_offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of the aborted transactions overlapping the range, for a
        read_committed fetch of it."""
        return [
            (txn.producer_id, txn.first_offset)
            for txn in self._log.collect_aborted_transactions(start_offset, upper_bound_offset)
        ]

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """The first offset whose timestamp is >= ``timestamp_ms``; raises LogCorruptionError for a
        damaged batch where the records must be read."""
        return self._log.offset_for_timestamp(timestamp_ms)

    def max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        return self._log.max_timestamp_offset()

    def end_offset_for_leader_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` of the largest epoch <= ``leader_epoch`` this
        replica knows, or (-1, -1) for an epoch above its own. One epoch per partition until replication
        brings leader changes: the current epoch ends at the log end offset."""
        if leader_epoch > self.leader_epoch:
            return -1, -1
        return self.leader_epoch, self.log_end_offset

    def producer_states(self) -> Sequence[ProducerStateEntry]:
        """The log's producer state, one entry per producer id, by producer id (DescribeProducers)."""
        producers = self._log.producer_state.producers
        return [entry for _pid, entry in sorted(producers.items())]
