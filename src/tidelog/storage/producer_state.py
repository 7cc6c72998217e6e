"""Idempotent-producer state of one partition (Kafka's ``ProducerStateManager``): epochs and sequences.

For every producer id that wrote to the partition it keeps the producer epoch and the metadata of its
last five batches (sequence range, offset range, timestamp). A leader append is *validated first*
(:meth:`ProducerStateManager.prepare`, nothing changes) and *applied after* the bytes are written
(:meth:`ProducerStateManager.commit`, which is when offsets are known).

Rules (Kafka 3.x ``ProducerAppendInfo`` for appends from clients):

* Stale epoch: a batch whose epoch is below the producer's current epoch -> ``INVALID_PRODUCER_EPOCH``.
* New epoch (higher than the current one): it must start at sequence 0 -> else
  ``OUT_OF_ORDER_SEQUENCE_NUMBER``; the batches kept for the old epoch are dropped.
* Same epoch: the first sequence must follow the last one (``last + 1``, or 0 after ``INT32_MAX``: sequences
  wrap) -> else ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (a gap, or an old batch that is no longer among the five).
* Duplicate: a batch of the current epoch whose first *and* last sequence equal one of the five batches
  kept is a retry; the whole append is answered with that batch's offsets and nothing is written.
  Duplicates are looked up in the state before the append (Kafka's ``findDuplicateBatch``).
* Unknown producer id: accepted at *any* sequence (KIP-360, Kafka >= 2.5). The state may have been lost
  legitimately (expiry, retention, a snapshot that keeps only the last batch), so the broker never answers
  ``UNKNOWN_PRODUCER_ID``; the first batch simply starts the producer's state.
* Batches without a producer id are not tracked. Control batches (transaction markers, written only by
  the broker) move the epoch forward but carry no sequences.
* A follower's append of the leader's batches (``AppendOrigin.REPLICATION``) goes through the same
  prepare/commit with the checks the leader made left out: no duplicate or sequence check, and an older
  producer epoch or coordinator epoch is logged and applied (Kafka's ``checkProducerEpoch`` /
  ``checkCoordinatorEpoch`` for replication); a non-transactional batch while a transaction is open is
  still ``INVALID_TXN_STATE``. The state it leaves is a leader's: this replica can take over and go on
  checking sequences, epochs and transactions.
* The producer's state is *not* dropped when the log start offset passes its batches (Kafka 3.x); only
  ``producer.id.expiration.ms`` after its last batch's timestamp (:meth:`remove_expired_producers`), and
  never while it has a transaction open.

Transactions (Kafka's ``ProducerAppendInfo.appendDataBatch`` / ``appendEndTxnMarker``):

* A transactional batch of a producer with no open transaction starts one at the batch's first offset; a
  non-transactional batch while one is open -> ``INVALID_TXN_STATE``.
* An end marker (COMMIT/ABORT control batch, :class:`EndTxnMarker`) with an epoch below the producer's ->
  ``INVALID_PRODUCER_EPOCH``; with a coordinator epoch below the last one seen ->
  ``TRANSACTION_COORDINATOR_FENCED``. It closes the open transaction, if any (a marker for a partition the
  producer never wrote to is legal and completes nothing), producing a :class:`CompletedTxn` whose
  ``last_stable_offset`` is the first offset of the oldest transaction of *another* producer still open,
  else the marker's offset + 1 (what the aborted-transaction index stores).
* The *first unstable offset* is the first offset of the oldest transaction that is open, or completed
  with its marker not yet below the high watermark (:meth:`on_high_watermark_updated`).
* Snapshots carry each producer's open transaction's first offset and coordinator epoch, so loading one
  restores the open transactions.

Snapshots: :meth:`take_snapshot` writes the state as of ``map_end_offset`` to ``<offset>.snapshot``
(:mod:`tidelog.storage.producer_snapshot`); :meth:`load` rebuilds the state from the latest snapshot at
or below the log end offset plus a replay of batch *headers* (no decompression) from there to the log end.
Nothing here reads a clock (``now_ms`` is passed in) or knows about segments (the log hands headers in).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Final, NamedTuple

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    ControlRecordType,
    RecordBatchHeader,
)
from tidelog.storage.checkpoint import atomic_write, fsync_dir
from tidelog.storage.errors import StorageError
from tidelog.storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_file,
    snapshot_offsets,
)

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "AppendOrigin",
    "AppendStatus",
    "BatchMetadata",
    "CompletedTxn",
    "EndTxnMarker",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TransactionCoordinatorFencedError",
    "in_sequence",
]

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN: Final = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default (one day)."""
_INT32_MAX: Final = 2**31 - 1


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Whether ``next_sequence`` directly follows ``last_sequence`` (wrapping from INT32_MAX to 0)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == _INT32_MAX)


def _decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


class OutOfOrderSequenceError(StorageError):
    """A batch whose sequence does not follow the producer's last one (Kafka's OutOfOrderSequenceException)."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """A batch from an older producer epoch than the partition has seen (Kafka's InvalidProducerEpochException)."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer whose transaction is open (Kafka's InvalidTxnStateException)."""

    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    """An end marker from an older coordinator epoch than the last marker's (Kafka's
    TransactionCoordinatorFencedException)."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class EndTxnMarker(NamedTuple):
    """The record of a transaction marker (control batch): COMMIT or ABORT, and the coordinator's epoch."""

    kind: ControlRecordType
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker at ``last_offset`` (Kafka's ``CompletedTxn``), with the partition's
    last stable offset as of that marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer (Kafka's ``BatchMetadata``)."""

    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_sequence(self) -> int:
        return _decrement_sequence(self.last_sequence, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer's epoch and its last (up to five) batches, oldest first."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    """First offset of the producer's open transaction, -1 when none is open."""

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def find_duplicate(
        self, producer_epoch: int, first_sequence: int, last_sequence: int
    ) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_epoch(producer_epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def maybe_update_epoch(self, producer_epoch: int) -> None:
        if producer_epoch != self.producer_epoch:
            self.producer_epoch = producer_epoch
            self.batches.clear()


class AppendOrigin(Enum):
    """Who appends (Kafka's ``AppendOrigin``): a client's batches get every check; the broker's
    coordinators (transactional offset commits, transaction markers) only the epoch checks: their batches
    carry no sequences and are never retried as duplicates. REPLICATION is a follower copying the leader's
    batches, which the leader checked: no duplicate or sequence check, and an older producer or coordinator
    epoch is logged, not refused; the state is tracked all the same (so that this replica can lead)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class AppendStatus(Enum):
    """What :meth:`ProducerStateManager.prepare` decided about an append."""

    OK = "ok"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"
    INVALID_TXN_STATE = "invalid_txn_state"
    TRANSACTION_COORDINATOR_FENCED = "transaction_coordinator_fenced"

    @property
    def error_code(self) -> ErrorCode:
        return _STATUS_ERRORS[self]


_STATUS_ERRORS: Final = {
    AppendStatus.OK: ErrorCode.NONE,
    AppendStatus.DUPLICATE: ErrorCode.NONE,
    AppendStatus.OUT_OF_ORDER_SEQUENCE: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    AppendStatus.INVALID_PRODUCER_EPOCH: ErrorCode.INVALID_PRODUCER_EPOCH,
    AppendStatus.INVALID_TXN_STATE: ErrorCode.INVALID_TXN_STATE,
    AppendStatus.TRANSACTION_COORDINATOR_FENCED: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
}

_STATUS_EXCEPTIONS: Final[dict[AppendStatus, type[StorageError]]] = {
    AppendStatus.OUT_OF_ORDER_SEQUENCE: OutOfOrderSequenceError,
    AppendStatus.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    AppendStatus.INVALID_TXN_STATE: InvalidTxnStateError,
    AppendStatus.TRANSACTION_COORDINATOR_FENCED: TransactionCoordinatorFencedError,
}


@dataclass(frozen=True, slots=True)
class _PendingBatch:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    relative_offset: int
    """Offset of the batch's first record relative to the append's first offset."""
    offset_delta: int
    timestamp: int
    starts_transaction: bool = False


@dataclass(frozen=True, slots=True)
class _PendingMarker:
    producer_id: int
    producer_epoch: int
    relative_offset: int
    marker: EndTxnMarker
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerAppendInfo:
    """The verdict on an append: OK (with the updates :meth:`ProducerStateManager.commit` applies),
    DUPLICATE (with the original batch), or an error status with a message."""

    status: AppendStatus
    message: str = ""
    duplicate: BatchMetadata | None = None
    pending: tuple[_PendingBatch, ...] = ()
    markers: tuple[_PendingMarker, ...] = ()

    @property
    def error_code(self) -> ErrorCode:
        return self.status.error_code

    def raise_for_error(self) -> None:
        """Raise the typed error of an error status (nothing for OK and DUPLICATE)."""
        error = _STATUS_EXCEPTIONS.get(self.status)
        if error is not None:
            raise error(self.message)


_OK_EMPTY: Final = ProducerAppendInfo(AppendStatus.OK)


class ProducerStateManager:
    """The producers of one partition, plus its ``.snapshot`` files in ``directory``."""

    def __init__(
        self, directory: Path, *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self._dir = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._map_end_offset = 0
        self._ongoing: dict[int, int] = {}
        """Open transactions: first offset -> producer id."""
        self._unreplicated: dict[int, tuple[int, int]] = {}
        """Completed transactions whose marker is not below the high watermark yet: first offset ->
        (producer id, marker offset)."""

    # ---- state ------------------------------------------------------------------------------------

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view, by producer id."""
        return MappingProxyType(self._producers)

    @property
    def map_end_offset(self) -> int:
        """The log offset up to which the state is known (exclusive)."""
        return self._map_end_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    # ---- transactions -----------------------------------------------------------------------------

    @property
    def ongoing_transactions(self) -> Mapping[int, int]:
        """Open transactions: producer id -> first offset, oldest first."""
        return {pid: first for first, pid in sorted(self._ongoing.items())}

    @property
    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction (no marker yet), None if none is open."""
        return min(self._ongoing) if self._ongoing else None

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction either open or completed by a marker that is not below
        the high watermark yet (Kafka's ``firstUnstableOffset``); None if there is none."""
        ongoing, unreplicated = self._ongoing, self._unreplicated
        # every read_committed fetch asks, per partition (three times): no list built in the usual case
        if not unreplicated:
            return min(ongoing) if ongoing else None
        return min([*ongoing, *unreplicated])

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is now below the high watermark are stable."""
        if self._unreplicated:  # after every leader append: no call when no transaction awaits it
            self._remove_unreplicated_before(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Completed transactions whose marker is below the log start offset are gone with their data."""
        self._remove_unreplicated_before(log_start_offset)
        self._map_end_offset = max(self._map_end_offset, log_start_offset)

    def _remove_unreplicated_before(self, offset: int) -> None:
        if self._unreplicated:
            self._unreplicated = {f: v for f, v in self._unreplicated.items() if v[1] >= offset}

    def _complete(self, entry: ProducerStateEntry, marker: EndTxnMarker, offset: int) -> CompletedTxn | None:
        """Close ``entry``'s open transaction (if any) at the marker ``offset``."""
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        pid = entry.producer_id
        others = [f for f, p in self._ongoing.items() if p != pid]
        completed = CompletedTxn(
            pid,
            first,
            offset,
            is_aborted=marker.kind == ControlRecordType.ABORT,
            last_stable_offset=min(others) if others else offset + 1,
        )
        if self._ongoing.get(first) == pid:
            del self._ongoing[first]
        self._unreplicated[first] = (pid, offset)
        entry.current_txn_first_offset = -1
        return completed

    def _start(self, entry: ProducerStateEntry, first_offset: int) -> None:
        entry.current_txn_first_offset = first_offset
        self._ongoing[first_offset] = entry.producer_id

    # ---- leader appends ---------------------------------------------------------------------------

    def prepare(
        self,
        headers: Sequence[RecordBatchHeader],
        markers: Sequence[EndTxnMarker | None] | None = None,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> ProducerAppendInfo:
        """Validate the batches of one append (in order, offsets not yet assigned); changes nothing.

        ``markers`` gives, position by position, the end marker of each control batch among ``headers``
        (None for data batches, and for control batches without one: those are skipped). With
        ``origin`` COORDINATOR, data batches are not checked for duplicates and sequences. With
        REPLICATION the headers carry their offsets (a compacted leader's batches may leave gaps): the
        updates are placed by them, and only INVALID_TXN_STATE can be refused (Kafka's rules for
        replication: an older producer or coordinator epoch is logged and applied).
        """
        if markers is None and len(headers) == 1 and headers[0].producer_id <= NO_PRODUCER_ID:
            return _OK_EMPTY  # one batch without a producer id (most produce requests): the loop skips it
        client = origin is AppendOrigin.CLIENT
        replication = origin is AppendOrigin.REPLICATION
        working: dict[int, ProducerStateEntry] = {}
        pending: list[_PendingBatch] = []
        pending_markers: list[_PendingMarker] = []
        relative = 0
        for index, header in enumerate(headers):
            if replication:
                batch_relative = header.base_offset - headers[0].base_offset
            else:
                batch_relative = relative
                relative += header.last_offset_delta + 1
            if not header.has_producer_id:
                continue
            marker = markers[index] if markers is not None else None
            if header.is_control and marker is None:
                continue
            pid = header.producer_id
            epoch = header.producer_epoch
            current = self._producers.get(pid)
            if client and current is not None and not header.is_control:
                duplicate = current.find_duplicate(epoch, header.base_sequence, header.last_sequence)
                if duplicate is not None:
                    return ProducerAppendInfo(AppendStatus.DUPLICATE, duplicate=duplicate)
            entry = working.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(pid)
                working[pid] = entry
            if epoch < entry.producer_epoch:
                message = (
                    f"epoch {epoch} of producer {pid} is smaller than the last seen epoch "
                    f"{entry.producer_epoch}"
                )
                if not replication:
                    return ProducerAppendInfo(AppendStatus.INVALID_PRODUCER_EPOCH, message)
                logger.warning(
                    "%s: %s at offset %d (replicated as is)", self._dir.name, message, header.base_offset
                )
            if marker is not None:
                if marker.coordinator_epoch < entry.coordinator_epoch:
                    message = (
                        f"{marker.kind.name} marker for producer {pid} from coordinator epoch "
                        f"{marker.coordinator_epoch}, older than the last seen {entry.coordinator_epoch}"
                    )
                    if not replication:
                        return ProducerAppendInfo(AppendStatus.TRANSACTION_COORDINATOR_FENCED, message)
                    logger.info("%s: %s (replicated as is)", self._dir.name, message)
                entry.maybe_update_epoch(epoch)
                entry.coordinator_epoch = marker.coordinator_epoch
                entry.current_txn_first_offset = -1
                pending_markers.append(
                    _PendingMarker(pid, epoch, batch_relative, marker, header.max_timestamp)
                )
                continue
            first_seq = header.base_sequence
            if not client:
                pass
            elif epoch != entry.producer_epoch:
                if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                    return ProducerAppendInfo(
                        AppendStatus.OUT_OF_ORDER_SEQUENCE,
                        f"new epoch {epoch} of producer {pid} starts at sequence {first_seq}, not 0",
                    )
            elif entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(
                entry.last_sequence, first_seq
            ):
                return ProducerAppendInfo(
                    AppendStatus.OUT_OF_ORDER_SEQUENCE,
                    f"out of order sequence from producer {pid} (epoch {epoch}): {first_seq} "
                    f"does not follow {entry.last_sequence}",
                )
            in_transaction = entry.current_txn_first_offset >= 0
            if in_transaction and not header.is_transactional:
                return ProducerAppendInfo(
                    AppendStatus.INVALID_TXN_STATE,
                    f"non-transactional batch from producer {pid} while its transaction is open",
                )
            starts = header.is_transactional and not in_transaction
            if starts:
                entry.current_txn_first_offset = batch_relative  # any value >= 0: open from here on
            item = _PendingBatch(
                pid,
                epoch,
                header.last_sequence,
                batch_relative,
                header.last_offset_delta,
                header.max_timestamp,
                starts,
            )
            entry.add_batch(epoch, BatchMetadata(item.last_sequence, -1, item.offset_delta, item.timestamp))
            pending.append(item)
        if not working:
            return _OK_EMPTY
        return ProducerAppendInfo(AppendStatus.OK, pending=tuple(pending), markers=tuple(pending_markers))

    def commit(
        self, info: ProducerAppendInfo, first_offset: int, *, log_append_time: int = -1
    ) -> list[CompletedTxn]:
        """Apply an OK ``info`` once its batches are in the log from ``first_offset`` on, batches and markers
        in their order in the log (a follower's append may hold a transaction's batches, its marker and the
        producer's next transaction). ``log_append_time`` (>= 0) replaces the batches' timestamps
        (LogAppendTime topics). Returns the transactions its markers completed (their
        ``last_stable_offset`` computed before completion)."""
        if info.status is not AppendStatus.OK:
            raise ValueError(f"cannot commit an append whose status is {info.status.name}")
        if not info.pending and not info.markers:  # batches without a producer id: nothing to apply
            return []
        completed: list[CompletedTxn] = []
        steps: list[_PendingBatch | _PendingMarker] = [*info.pending, *info.markers]
        if info.pending and info.markers:
            steps.sort(key=lambda step: step.relative_offset)
        for item in steps:
            offset = first_offset + item.relative_offset
            timestamp = log_append_time if log_append_time >= 0 else item.timestamp
            if isinstance(item, _PendingMarker):
                done = self._apply_marker(
                    item.producer_id, item.producer_epoch, item.marker, offset, timestamp
                )
                if done is not None:
                    completed.append(done)
                self._map_end_offset = max(self._map_end_offset, offset + 1)
                continue
            entry = self._producers.get(item.producer_id)
            if entry is None:
                entry = self._producers[item.producer_id] = ProducerStateEntry(item.producer_id)
            last_offset = offset + item.offset_delta
            entry.add_batch(
                item.producer_epoch,
                BatchMetadata(item.last_sequence, last_offset, item.offset_delta, timestamp),
            )
            if item.starts_transaction:
                self._start(entry, offset)
            self._map_end_offset = max(self._map_end_offset, last_offset + 1)
        return completed

    def _apply_marker(
        self, producer_id: int, producer_epoch: int, marker: EndTxnMarker, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        completed = self._complete(entry, marker, offset)
        entry.maybe_update_epoch(producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = timestamp
        return completed

    # ---- replay (loading, followers) --------------------------------------------------------------

    def replay(self, header: RecordBatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply a batch already in the log without checks (Kafka's REPLICATION origin). ``marker`` is the
        end marker of a control batch (a control batch without one changes nothing but the map end offset).
        Returns the transaction a marker completed, if any."""
        completed = None
        if header.has_producer_id:
            pid = header.producer_id
            entry = self._producers.get(pid)
            if header.is_control:
                if marker is not None:
                    completed = self._apply_marker(
                        pid, header.producer_epoch, marker, header.base_offset, header.max_timestamp
                    )
            else:
                if entry is None:
                    entry = self._producers[pid] = ProducerStateEntry(pid)
                entry.add_batch(
                    header.producer_epoch,
                    BatchMetadata(
                        header.last_sequence,
                        header.last_offset,
                        header.last_offset_delta,
                        header.max_timestamp,
                    ),
                )
                if header.is_transactional and entry.current_txn_first_offset < 0:
                    self._start(entry, header.base_offset)
        self._map_end_offset = max(self._map_end_offset, header.next_offset)
        return completed

    # ---- expiry -----------------------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int, expiration_ms: int | None = None) -> int:
        """Forget producers whose last batch is ``producer.id.expiration.ms`` or more before ``now_ms`` and
        that have no transaction open; returns how many."""
        limit = self.producer_id_expiration_ms if expiration_ms is None else expiration_ms
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= limit
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    # ---- snapshots --------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return snapshot_offsets(self._dir)

    def take_snapshot(self) -> Path:
        """Write the state as ``<map_end_offset>.snapshot`` (durably); returns the file."""
        entries = [
            SnapshotEntry(
                e.producer_id,
                e.producer_epoch,
                e.last_sequence,
                e.last_offset,
                e.batches[-1].offset_delta if e.batches else 0,
                e.last_timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for e in sorted(self._producers.values(), key=lambda e: e.producer_id)
        ]
        path = snapshot_file(self._dir, self._map_end_offset)
        atomic_write(path, encode_snapshot(entries))
        return path

    def _delete_snapshots(self, predicate: Callable[[int], bool]) -> int:
        doomed = [offset for offset in self.snapshot_offsets() if predicate(offset)]
        for offset in doomed:
            snapshot_file(self._dir, offset).unlink(missing_ok=True)
        if doomed:
            fsync_dir(self._dir)
        return len(doomed)

    def delete_snapshots_before(self, offset: int) -> int:
        """Remove the snapshots below ``offset`` (their segments are gone); returns how many."""
        return self._delete_snapshots(lambda o: o < offset)

    def delete_snapshots_after(self, offset: int) -> int:
        """Remove the snapshots above ``offset`` (truncated away); returns how many."""
        return self._delete_snapshots(lambda o: o > offset)

    def _clear(self) -> None:
        self._producers = {}
        self._ongoing = {}
        self._unreplicated = {}

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log starts over empty at ``offset``: no producers, no transactions, no snapshots."""
        self._clear()
        self._delete_snapshots(lambda _o: True)
        self._map_end_offset = offset

    def _read_snapshot(self, offset: int, now_ms: int) -> None:
        entries = decode_snapshot(snapshot_file(self._dir, offset).read_bytes())
        self._clear()
        for e in entries:
            entry = ProducerStateEntry(e.producer_id, e.producer_epoch, coordinator_epoch=e.coordinator_epoch)
            if e.last_offset >= 0:
                entry.batches.append(
                    BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)
                )
            entry.last_timestamp = e.timestamp
            if e.current_txn_first_offset >= 0:
                self._start(entry, e.current_txn_first_offset)
            elif now_ms - entry.last_timestamp >= self.producer_id_expiration_ms:
                continue
            self._producers[e.producer_id] = entry
        self._map_end_offset = offset

    def load(
        self,
        *,
        log_start_offset: int,
        log_end_offset: int,
        batches_from: Callable[[int], Iterable[tuple[RecordBatchHeader, EndTxnMarker | None]]],
        now_ms: int,
    ) -> list[CompletedTxn]:
        """Rebuild the state of the log ``[log_start_offset, log_end_offset)`` (Kafka's ``truncateAndReload``
        plus ``loadProducerState``): drop snapshots above the log end, read the latest good one at or below
        it (a corrupt one is deleted and the next older tried),
        then replay ``batches_from(offset)`` (the header and, for a control batch, the end marker of every
        batch ending at or after ``offset``, in order) up to the log end. Returns the transactions the
        replayed markers completed."""
        self.delete_snapshots_after(log_end_offset)
        self._clear()
        start = log_start_offset
        for offset in reversed(self.snapshot_offsets()):
            try:
                self._read_snapshot(offset, now_ms)
            except (CorruptSnapshotError, OSError) as exc:
                path = snapshot_file(self._dir, offset)
                logger.warning(
                    "%s: deleting %s, an unreadable producer snapshot (%s); the state comes from an older "
                    "snapshot or the log",
                    self._dir.name,
                    path.name,
                    exc,
                )
                path.unlink(missing_ok=True)
                self._clear()
                continue
            start = offset
            break
        self._map_end_offset = start
        completed: list[CompletedTxn] = []
        if start < log_end_offset:
            for header, marker in batches_from(start):
                if header.base_offset >= log_end_offset:
                    break
                if header.last_offset >= start:
                    done = self.replay(header, marker)
                    if done is not None:
                        completed.append(done)
        self._map_end_offset = log_end_offset
        self.remove_expired_producers(now_ms)
        return completed
