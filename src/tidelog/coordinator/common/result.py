"""What a coordinator call hands back to the server runtime: response, records, completions, timers, markers.

Every entry point of a coordinator (a request, a timer firing, loading, unloading, expiry, markers
written) returns a :class:`CoordinatorResult`, generic over the coordinator's timer key type (the group
coordinator's ``TimerKey``, the transaction coordinator's ``TxnTimerKey``). The runtime, in this order:

1. appends ``records`` (per partition of the coordinator's internal topic, in order, one batch each)
   and waits until they are committed; the coordinator has already applied them (as Kafka's runtime
   replays records into its timeline before the append completes);
2. only then sends ``response`` (unless it is a :class:`DeferredResponse`: the request stays parked)
   and every ``(handle, response)`` of ``completions`` to the parked request ``handle`` names;
3. applies ``timers`` in order: :class:`ScheduleTimer` replaces any timer with the same key,
   :class:`CancelTimer` removes it. When a timer fires the runtime calls the coordinator's
   ``on_timeout(key, now_ms)``;
4. only then writes ``markers``: for each :class:`WriteTxnMarkers`, a control batch (COMMIT/ABORT,
   ``producer_id``, ``producer_epoch``, ``coordinator_epoch``) on every partition it lists, reporting
   each written partition back with ``TransactionCoordinator.on_markers_written``. A marker must never
   reach a data partition before the PrepareCommit/PrepareAbort record that decided it is durable:
   otherwise a crash could leave a transaction committed in some partitions and aborted in others.

If an append fails, the coordinator's memory is ahead of its log: the runtime answers the response and
the completions with the error (mapped by the coordinator's ``append_error_to_response_error``), drops
the markers unsent, unloads the partition and loads it again from the log, which is the truth.

Who emits what: only the group coordinator parks requests (``DeferredResponse``, ``completions``); only
the transaction coordinator emits ``markers``. Both emit records and timers.

Invariants: a :class:`DeferredResponse` is completed at most once, by a later result's ``completions``
(or by unloading, with NOT_COORDINATOR); completions for a handle the runtime no longer tracks (its
connection closed) are simply dropped. Timers are advisory: the coordinator remembers the deadline it
asked for and ignores a firing whose key it has since cancelled or moved later, so a runtime that fires
late, twice, or after a cancel cannot corrupt it. Markers are idempotent to repeat (a partition
reported twice, or a marker written again after a reload, changes nothing).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeAlias, TypeVar

from tidelog.coordinator.common.records import CoordinatorRecord
from tidelog.protocol import TopicPartition
from tidelog.protocol.records import ControlRecordType
from tidelog.protocol.schema import Response

__all__ = [
    "CancelTimer",
    "CoordinatorResult",
    "DeferredResponse",
    "ScheduleTimer",
    "TimerOp",
    "WriteTxnMarkers",
]

K = TypeVar("K", bound=Hashable)
"""A coordinator's timer key type: scheduling a key again replaces its earlier deadline."""


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """Handle of a parked request (JoinGroup waiting for the rebalance, SyncGroup waiting for the leader).

    ``handle_id`` is unique within one coordinator (the group coordinator is the only one that parks).
    """

    handle_id: int
    api_key: int
    api_version: int
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ScheduleTimer(Generic[K]):
    """Fire ``key`` at ``deadline_ms`` (replacing any timer already set for ``key``)."""

    key: K
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer(Generic[K]):
    """Forget the timer set for ``key``, if any."""

    key: K


TimerOp: TypeAlias = ScheduleTimer[K] | CancelTimer[K]


@dataclass(frozen=True, slots=True)
class WriteTxnMarkers:
    """Write one transaction marker on each of ``partitions`` (Kafka's WriteTxnMarkers request entry).

    The control batch carries ``producer_id`` and ``producer_epoch`` in its header and
    ``coordinator_epoch`` in its value. Markers for ``__consumer_offsets`` partitions also settle that
    producer's pending transactional offsets in the group coordinator. A partition that no longer
    exists counts as written (Kafka drops it too). Only the transaction coordinator emits these."""

    transactional_id: str
    txn_partition: int
    """The ``__transaction_state`` partition of ``transactional_id``."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: ControlRecordType
    partitions: tuple[TopicPartition, ...]


@dataclass(slots=True)
class CoordinatorResult(Generic[K]):
    """The outcome of one coordinator call (see the module docstring for how the runtime applies it)."""

    response: Response | DeferredResponse | None = None
    """The answer to the request, a handle if it is parked, ``None`` for calls that are not requests."""
    records: dict[int, list[CoordinatorRecord]] = field(default_factory=dict)
    """Records to append, by partition of the coordinator's internal topic."""
    completions: list[tuple[DeferredResponse, Response]] = field(default_factory=list)
    """Responses for requests parked earlier (or by this very call, if it also completed them)."""
    timers: list[TimerOp[K]] = field(default_factory=list)
    markers: list[WriteTxnMarkers] = field(default_factory=list)
    """Transaction markers to write once ``records`` are committed (transaction coordinator only)."""

    def merge(self, other: CoordinatorResult[K]) -> None:
        """Append ``other``'s records, completions, timers and markers to this result (its response is
        ignored)."""
        for partition, records in other.records.items():
            self.records.setdefault(partition, []).extend(records)
        self.completions.extend(other.completions)
        self.timers.extend(other.timers)
        self.markers.extend(other.markers)

    @property
    def is_empty(self) -> bool:
        return (
            self.response is None
            and not self.records
            and not self.completions
            and not self.timers
            and not self.markers
        )
