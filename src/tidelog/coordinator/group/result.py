"""What a coordinator call hands back to the server runtime: responses, records, timers.

Every entry point of the coordinator (a request, a timer firing, loading, unloading, expiry) returns a
:class:`CoordinatorResult`. The runtime, in this order:

1. appends ``records`` (per ``__consumer_offsets`` partition, in order, one batch each) and waits until
   they are committed; the coordinator has already applied them (as Kafka's runtime replays records
   into its timeline before the append completes);
2. only then sends ``response`` (unless it is a :class:`DeferredResponse`: the request stays parked)
   and every ``(handle, response)`` of ``completions`` to the parked request ``handle`` names;
3. applies ``timers`` in order: :class:`ScheduleTimer` replaces any timer with the same key,
   :class:`CancelTimer` removes it. When a timer fires the runtime calls
   ``GroupCoordinator.on_timeout(key, now_ms)``.

If an append fails, the shard's memory is ahead of its log: the runtime answers the response and the
completions with the error (:func:`tidelog.coordinator.group.responses.append_error_to_response_error`),
then unloads the partition and loads it again from the log, which is the truth.

Invariants: a :class:`DeferredResponse` is completed at most once, by a later result's
``completions`` (or by unloading, with NOT_COORDINATOR); completions for a handle the runtime no
longer tracks (its connection closed) are simply dropped. Timers are advisory: the coordinator
remembers the deadline it asked for and ignores a firing whose key it has since cancelled or moved
later, so a runtime that fires late, twice, or after a cancel cannot corrupt it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TypeAlias

from tidelog.coordinator.common.records import CoordinatorRecord
from tidelog.protocol.schema import Response

__all__ = [
    "CancelTimer",
    "CoordinatorResult",
    "DeferredResponse",
    "ScheduleTimer",
    "TimerKey",
    "TimerKind",
    "TimerOp",
]


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """Handle of a parked request (JoinGroup waiting for the rebalance, SyncGroup waiting for the leader).

    ``handle_id`` is unique within one :class:`~tidelog.coordinator.group.coordinator.GroupCoordinator`.
    """

    handle_id: int
    api_key: int
    api_version: int
    group_id: str
    member_id: str


class TimerKind(Enum):
    """What a timer is for (Kafka's ``heartbeat-``, ``join-``, ``sync-`` keys and the expiration job)."""

    HEARTBEAT = "heartbeat"
    """A member's session: it expires unless the member heartbeats (or joins/syncs) in time."""
    JOIN = "join"
    """A group's join phase: the initial rebalance delay, then the rebalance timeout."""
    SYNC = "sync"
    """A group's sync phase: members that have not sent SyncGroup by the rebalance timeout are removed."""
    GROUP_EXPIRATION = "group-expiration"
    """A partition's periodic expiry of old offsets and empty groups (``offsets.retention.check.interval.ms``)."""
    CONSUMER_SESSION = "consumer-session"
    """A consumer-group (KIP-848) member's session: it is fenced unless it heartbeats in time."""
    CONSUMER_REBALANCE = "consumer-rebalance"
    """A consumer-group member revoking partitions: it is fenced unless it revokes within its rebalance
    timeout."""


@dataclass(frozen=True, slots=True)
class TimerKey:
    """Identity of a timer: scheduling a key again replaces the earlier deadline."""

    kind: TimerKind
    partition: int
    """The ``__consumer_offsets`` partition whose shard owns the timer."""
    group_id: str = ""
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: TimerKey


TimerOp: TypeAlias = ScheduleTimer | CancelTimer


@dataclass(slots=True)
class CoordinatorResult:
    """The outcome of one coordinator call (see the module docstring for how the runtime applies it)."""

    response: Response | DeferredResponse | None = None
    """The answer to the request, a handle if it is parked, ``None`` for calls that are not requests."""
    records: dict[int, list[CoordinatorRecord]] = field(default_factory=dict)
    """Records to append, by ``__consumer_offsets`` partition."""
    completions: list[tuple[DeferredResponse, Response]] = field(default_factory=list)
    """Responses for requests parked earlier (or by this very call, if it also completed them)."""
    timers: list[TimerOp] = field(default_factory=list)

    def merge(self, other: CoordinatorResult) -> None:
        """Append ``other``'s records, completions and timers to this result (its response is ignored)."""
        for partition, records in other.records.items():
            self.records.setdefault(partition, []).extend(records)
        self.completions.extend(other.completions)
        self.timers.extend(other.timers)

    @property
    def is_empty(self) -> bool:
        return self.response is None and not self.records and not self.completions and not self.timers
