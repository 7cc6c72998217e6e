"""The group coordinator's timers: their keys (what the runtime schedules) and their payloads (what the
shard remembers about each).

A :class:`TimerKey` is what goes out in a result's ``ScheduleTimer`` / ``CancelTimer`` and comes back to
``GroupCoordinator.on_timeout``. The payload stays in the shard (``ShardState.timers``), keyed the
same way, so a firing is checked against what the shard last asked for.

Invariants: a key names one timer of one ``__consumer_offsets`` partition (``partition`` routes a
firing to its shard); keys are immutable and hashable; payloads are immutable.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["JoinTimer", "MemberRebalanceTimer", "PendingTimer", "SyncTimer", "TimerKey", "TimerKind"]


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
class JoinTimer:
    """Payload of a group's JOIN timer: the initial rebalance delay (with what is left of the group's
    rebalance timeout) or, when ``initial`` is False, the end of the join phase."""

    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


@dataclass(frozen=True, slots=True)
class SyncTimer:
    """Payload of a group's SYNC timer: the generation whose SyncGroups it waits for."""

    generation_id: int


@dataclass(frozen=True, slots=True)
class MemberRebalanceTimer:
    """Payload of a consumer-group member's CONSUMER_REBALANCE timer: the epoch it must leave in time."""

    member_epoch: int


@dataclass(frozen=True, slots=True)
class PendingTimer:
    """A timer the shard has scheduled and not yet seen fire or cancelled."""

    deadline_ms: int
    payload: JoinTimer | SyncTimer | MemberRebalanceTimer | None = None
