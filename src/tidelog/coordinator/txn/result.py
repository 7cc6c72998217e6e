"""What a transaction coordinator call hands back to the server runtime: response, records, markers, timers.

Every entry point of :class:`~tidelog.coordinator.txn.coordinator.TransactionCoordinator` (a request,
a timer firing, markers written, loading, unloading) returns a :class:`TxnCoordinatorResult`. The
runtime, in this order:

1. appends ``records`` (per ``__transaction_state`` partition, in order, one batch each) and waits
   until they are committed; the coordinator has already applied them;
2. only then sends ``response``;
3. only then writes ``markers``: for each :class:`WriteTxnMarkers`, a control batch (COMMIT/ABORT,
   ``producer_id``, ``producer_epoch``, ``coordinator_epoch``) on every partition it lists, and reports
   each written partition back with ``TransactionCoordinator.on_markers_written``. A marker must never
   reach a data partition before the PrepareCommit/PrepareAbort record that decided it is durable:
   otherwise a crash could leave a transaction committed in some partitions and aborted in others;
4. applies ``timers`` in order: :class:`ScheduleTxnTimer` replaces any timer with the same key,
   :class:`CancelTxnTimer` removes it; when one fires, ``TransactionCoordinator.on_timeout(key, now_ms)``.

If an append fails, the coordinator's memory is ahead of its log: the runtime answers ``response`` with
the error (``txn_responses.append_error_to_response_error``), drops ``markers`` unsent, unloads the
partition and loads it again from the log, which is the truth.

Invariants: markers are idempotent to repeat (a partition reported twice, or a marker written again
after a reload, changes nothing); timers are advisory (the coordinator remembers the deadline it asked
for and ignores a firing whose key it has since cancelled or moved later).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TypeAlias

from tidelog.coordinator.common.records import CoordinatorRecord
from tidelog.protocol import TopicPartition
from tidelog.protocol.records import ControlRecordType
from tidelog.protocol.schema import Response

__all__ = [
    "CancelTxnTimer",
    "ScheduleTxnTimer",
    "TxnCoordinatorResult",
    "TxnTimerKey",
    "TxnTimerKind",
    "TxnTimerOp",
    "WriteTxnMarkers",
]


class TxnTimerKind(Enum):
    TRANSACTION_TIMEOUT = "transaction-timeout"
    """An Ongoing transaction's ``transaction.timeout.ms``: when it fires the transaction is aborted."""
    TRANSACTIONAL_ID_EXPIRATION = "transactional-id-expiration"
    """A partition's periodic removal of idle transactional ids (``transactional.id.expiration.ms``)."""


@dataclass(frozen=True, slots=True)
class TxnTimerKey:
    """Identity of a timer: scheduling a key again replaces the earlier deadline."""

    kind: TxnTimerKind
    partition: int
    """The ``__transaction_state`` partition that owns the timer."""
    transactional_id: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleTxnTimer:
    key: TxnTimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTxnTimer:
    key: TxnTimerKey


TxnTimerOp: TypeAlias = ScheduleTxnTimer | CancelTxnTimer


@dataclass(frozen=True, slots=True)
class WriteTxnMarkers:
    """Write one transaction marker on each of ``partitions`` (Kafka's WriteTxnMarkers request entry).

    The control batch carries ``producer_id`` and ``producer_epoch`` in its header and
    ``coordinator_epoch`` in its value (``records.encode_control_batch(result, ...)``). Markers for
    ``__consumer_offsets`` partitions also settle that producer's pending transactional offsets in the
    group coordinator. A partition that no longer exists counts as written (Kafka drops it too)."""

    transactional_id: str
    txn_partition: int
    """The ``__transaction_state`` partition of ``transactional_id``."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: ControlRecordType
    partitions: tuple[TopicPartition, ...]


@dataclass(slots=True)
class TxnCoordinatorResult:
    """The outcome of one coordinator call (see the module docstring for how the runtime applies it)."""

    response: Response | None = None
    """The answer to the request, ``None`` for calls that are not requests."""
    records: dict[int, list[CoordinatorRecord]] = field(default_factory=dict)
    """Records to append, by ``__transaction_state`` partition."""
    markers: list[WriteTxnMarkers] = field(default_factory=list)
    timers: list[TxnTimerOp] = field(default_factory=list)

    def merge(self, other: TxnCoordinatorResult) -> None:
        """Append ``other``'s records, markers and timers to this result (its response is ignored)."""
        for partition, records in other.records.items():
            self.records.setdefault(partition, []).extend(records)
        self.markers.extend(other.markers)
        self.timers.extend(other.timers)

    @property
    def is_empty(self) -> bool:
        return self.response is None and not self.records and not self.markers and not self.timers
