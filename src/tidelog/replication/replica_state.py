"""What a partition leader knows of one follower replica (Kafka's ``Replica``/``ReplicaState``): how far its
log goes, when it last fetched, and when it was last caught up.

Invariants:

- ``last_caught_up_time_ms`` never decreases. A fetch that reads up to the leader's log end offset *at the
  time of this fetch* makes the follower caught up now; one that reads up to the leader's log end offset
  *at the time of the previous fetch* makes it caught up as of that previous fetch. So a follower that
  always fetches slightly behind a busy leader still counts as caught up (ISR semantics: it lags by at
  most ``replica.lag.time.max.ms``).
- A follower is caught up when its log end offset equals the leader's, or it was last caught up within
  ``replica.lag.time.max.ms``.
- On a leader change the state is reset: a follower in the ISR counts as caught up now (so the new leader
  does not shrink the ISR before it had a chance to fetch), one outside it as never caught up (so it does
  not hold back the high watermark). Its log end offset is unknown to a new leader (-1) until it fetches.
- ``broker_epoch`` is the follower's broker epoch as its last fetch stated it (KIP-380/903): a fetch from
  an earlier life of the broker (its log may be empty now) never brings it back into the ISR.
- Pure: no clock; times come in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UNKNOWN_OFFSET", "FollowerState"]

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    """One follower of a partition this broker leads."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = -1

    def update_fetch_state(
        self,
        *,
        fetch_offset: int,
        log_start_offset: int,
        fetch_time_ms: int,
        leader_log_end_offset: int,
        broker_epoch: int,
    ) -> None:
        """Record a fetch from this follower at ``fetch_offset`` (its log end offset)."""
        if fetch_offset >= leader_log_end_offset:
            caught_up = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            caught_up = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            caught_up = self.last_caught_up_time_ms
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(
            leader_log_end_offset, self.last_fetch_leader_log_end_offset
        )
        self.last_fetch_time_ms = fetch_time_ms
        self.last_caught_up_time_ms = caught_up
        self.broker_epoch = broker_epoch

    def reset(self, *, now_ms: int, leader_log_end_offset: int, new_leader: bool, in_sync: bool) -> None:
        """A leader epoch began on this broker (``new_leader``: it was not the leader before)."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if new_leader:
            self.log_end_offset = UNKNOWN_OFFSET
            self.log_start_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
            self.broker_epoch = -1
        else:
            self.last_fetch_leader_log_end_offset = leader_log_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, *, leader_log_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (
            leader_log_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms
        )
