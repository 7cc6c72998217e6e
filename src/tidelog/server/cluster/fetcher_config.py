"""The replica fetchers' settings (Kafka's ``replica.fetch.*`` and ``num.replica.fetchers`` keys).

Invariants: every value is validated once, here (a fetch that can never return data, or a wait longer than
the request may take, is refused at construction); the fetchers read them and never the broker config.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.server.config import BrokerConfig

__all__ = ["ReplicaFetcherConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaFetcherConfig:
    """What every replica fetcher of this broker asks for and how it waits."""

    fetch_max_bytes: int = 1_048_576
    """``replica.fetch.max.bytes``: per partition (a larger first batch still comes whole, KIP-74)."""
    response_max_bytes: int = 10_485_760
    """``replica.fetch.response.max.bytes``: the whole response."""
    wait_max_ms: int = 500
    """``replica.fetch.wait.max.ms``: how long the leader may park a fetch waiting for data."""
    min_bytes: int = 1
    """``replica.fetch.min.bytes``: what the leader waits for before answering."""
    backoff_ms: int = 1_000
    """``replica.fetch.backoff.ms``: the pause of a partition after an error (or of all of a fetcher's
    partitions when its leader cannot be reached)."""
    num_fetchers: int = 1
    """``num.replica.fetchers``: fetcher tasks per source broker; a partition always goes to the same one."""
    request_timeout_ms: int = 30_000
    """``replica.socket.timeout.ms``: how long a request may take beyond the leader's wait."""

    def __post_init__(self) -> None:
        if self.fetch_max_bytes <= 0 or self.response_max_bytes <= 0:
            raise ValueError("replica.fetch.max.bytes and replica.fetch.response.max.bytes must be positive")
        if self.wait_max_ms < 0 or self.min_bytes < 0 or self.backoff_ms < 0:
            raise ValueError("replica.fetch.wait.max.ms, .min.bytes and .backoff.ms must not be negative")
        if self.num_fetchers < 1:
            raise ValueError("num.replica.fetchers must be at least 1")
        if self.request_timeout_ms <= 0:
            raise ValueError("replica.socket.timeout.ms must be positive")

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ReplicaFetcherConfig:
        return cls(
            fetch_max_bytes=config.replica_fetch_max_bytes,
            response_max_bytes=config.replica_fetch_response_max_bytes,
            wait_max_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes,
            backoff_ms=config.replica_fetch_backoff_ms,
            num_fetchers=config.num_replica_fetchers,
            request_timeout_ms=config.replica_socket_timeout_ms,
        )

    @property
    def fetch_timeout_ms(self) -> int:
        """The deadline of one Fetch: the leader's wait plus the request timeout."""
        return self.wait_max_ms + self.request_timeout_ms
