"""What a replica fetcher keeps for each partition it fetches (Kafka's ``PartitionFetchState``), and the
read-only views of it that tests, logs and metrics get.

Invariants:

- Where the next fetch starts is never stored here: it is the replica's log end offset, and its
  ``LastFetchedEpoch`` the log's latest epoch, read when the request is built. An append, a truncation or a
  restart of the log moves them, and the next request follows (so KIP-279's second round, asking again
  with the lower epoch after an incomplete truncation, needs no state of its own).
- A partition is *fetching* (in the next request) unless it is *delayed* (after an error, until
  ``delay_until`` on the monotonic clock) or *failed* (the leader fenced this replica's leader epoch:
  only a newer state of the partition, which adds it again, brings it back).
- ``current_leader_epoch`` is the epoch the partition was added at; adding the same replica at the same
  epoch keeps the state (a repeated state neither resets a delay nor revives a failed partition), another
  epoch or replica object starts afresh.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from tidelog.protocol import TopicPartition
from tidelog.replication.partition import Partition

__all__ = ["FetchStatus", "FetcherView", "PartitionFetchState", "PartitionFetchView"]


class FetchStatus(Enum):
    """Where a partition stands in its fetcher."""

    FETCHING = "fetching"
    """In the next Fetch request."""
    DELAYED = "delayed"
    """Backing off after an error, until its delay has passed."""
    FAILED = "failed"
    """Out of the requests until a newer state of the partition adds it again (Kafka's failed partitions)."""


@dataclass(slots=True)
class PartitionFetchState:
    """One partition in one fetcher."""

    partition: Partition
    current_leader_epoch: int
    failed: bool = False
    delay_until: float = 0.0
    """``time.monotonic()`` before which the partition is not fetched."""
    lag: int | None = None
    """The leader's high watermark minus this replica's log end offset at the last answer."""
    error: str | None = None
    """Why the partition is delayed or failed."""

    def status(self, now: float) -> FetchStatus:
        if self.failed:
            return FetchStatus.FAILED
        return FetchStatus.DELAYED if self.delay_until > now else FetchStatus.FETCHING

    def is_ready(self, now: float) -> bool:
        return not self.failed and self.delay_until <= now

    def delay(self, until: float, reason: str) -> None:
        self.delay_until = until
        self.error = reason

    def fail(self, reason: str) -> None:
        self.failed = True
        self.error = reason

    def fetched(self, lag: int) -> None:
        """An answer without error: whatever delayed the partition is over."""
        self.lag = lag
        self.error = None

    def view(self, now: float, topic_id: uuid.UUID | None) -> PartitionFetchView:
        partition = self.partition
        latest_epoch = partition.latest_epoch
        return PartitionFetchView(
            topic_id=topic_id,
            fetch_offset=partition.log_end_offset,
            log_start_offset=partition.log_start_offset,
            high_watermark=partition.high_watermark,
            current_leader_epoch=self.current_leader_epoch,
            last_fetched_epoch=-1 if latest_epoch is None else latest_epoch,
            status=self.status(now),
            lag=self.lag,
            error=self.error,
        )


@dataclass(frozen=True, slots=True)
class PartitionFetchView:
    """A partition as its fetcher sees it at one moment."""

    topic_id: uuid.UUID | None
    fetch_offset: int
    """Where the next fetch starts: the replica's log end offset."""
    log_start_offset: int
    high_watermark: int
    current_leader_epoch: int
    last_fetched_epoch: int
    """The log's latest leader epoch (-1: none), the next fetch's ``LastFetchedEpoch``."""
    status: FetchStatus
    lag: int | None
    error: str | None


@dataclass(frozen=True, slots=True)
class FetcherView:
    """The fetcher(s) of one source broker at one moment."""

    leader_id: int
    partitions: Mapping[TopicPartition, PartitionFetchView]
    requests: int
    """Fetch requests sent so far (answered or not)."""
    fetch_in_flight: bool
    """A Fetch is out (parked at the leader, typically)."""
    fetch_version: int | None
    """The Fetch version of the last request (None before the first)."""
