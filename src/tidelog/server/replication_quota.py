"""Replication throttles (Kafka's ``ReplicationQuotaManager``, KIP-73): a byte-rate limit on the data a
leader sends to, or a follower fetches for, the replicas named by a topic's ``*.replication.throttled.replicas``.

Invariants:

- Two managers per broker, one per side: the leader's is bounded by ``leader.replication.throttled.rate``
  and marks the partitions whose ``leader.replication.throttled.replicas`` name this broker (or are ``*``);
  the follower's by ``follower.replication.throttled.rate`` and ``follower.replication.throttled.replicas``.
  Rates and topic configs are read at each call, so a dynamic change takes effect at the next fetch.
- The rate is Kafka's: a :class:`~tidelog.server.security.quota_rate.WindowedRate` over
  ``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``; the quota is exceeded
  while the measured rate is above the bound (Kafka's ``Quota.upperBound``: equal is acceptable). The
  default bound (``Long.MAX_VALUE``) is never exceeded. A fresh meter spreads its first bytes over
  ``num - 1`` windows, so a move may copy that many windows' worth at full speed first (as in Kafka).
- Only bytes of throttled partitions are recorded, and only throttled partitions whose replica is out of
  the ISR are held back (:meth:`ReplicationQuotaManager.should_throttle`): an in-sync follower is never
  slowed, so acks=all produce is not.
- Pure: time comes in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.server.config import BrokerConfig
from tidelog.server.security.quota_rate import QuotaWindow, WindowedRate

__all__ = [
    "ALL_PARTITIONS",
    "FOLLOWER_THROTTLED_REPLICAS",
    "LEADER_THROTTLED_REPLICAS",
    "ReplicationQuotaManager",
    "ThrottledPartitions",
    "format_throttled_replicas",
    "parse_throttled_partitions",
]

LEADER_THROTTLED_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS: Final = "follower.replication.throttled.replicas"


@dataclass(frozen=True, slots=True)
class ThrottledPartitions:
    """The partitions of one topic a broker throttles: every one (``*``) or those listed."""

    all: bool = False
    partitions: frozenset[int] = frozenset()

    def __contains__(self, partition: object) -> bool:
        return self.all or partition in self.partitions


ALL_PARTITIONS: Final = ThrottledPartitions(all=True)
_NONE: Final = ThrottledPartitions()


def parse_throttled_partitions(value: str | None, broker_id: int) -> ThrottledPartitions:
    """Kafka's ``TopicConfigHandler.parseThrottledPartitions``: ``*`` is every partition; otherwise the
    partitions of the ``partition:broker`` entries naming ``broker_id``. Raises ValueError on a malformed
    list (the topic config validator refuses those before they are stored)."""
    text = (value or "").strip()
    if not text:
        return _NONE
    if text == "*":
        return ALL_PARTITIONS
    partitions = set()
    for entry in text.split(","):
        partition, sep, broker = entry.strip().partition(":")
        if not sep or not partition.isdigit() or not broker.isdigit():
            raise ValueError(f"not a partition:broker entry: {entry!r}")
        if int(broker) == broker_id:
            partitions.add(int(partition))
    return ThrottledPartitions(partitions=frozenset(partitions))


def format_throttled_replicas(replicas: Mapping[int, list[int]]) -> str:
    """``{partition: [broker, ...]}`` as Kafka writes it: ``0:1,0:2,1:3`` (partitions, then brokers, in order)."""
    return ",".join(
        f"{partition}:{broker}" for partition in sorted(replicas) for broker in replicas[partition]
    )


class ReplicationQuotaManager:
    """One side's replication throttle on this broker; see the module docstring."""

    def __init__(
        self,
        *,
        broker_id: int,
        config_key: str,
        rate: Callable[[], int],
        topic_configs: Callable[[str], Mapping[str, str] | None],
        window: QuotaWindow,
    ) -> None:
        self.broker_id = broker_id
        self.config_key = config_key
        self._rate = rate
        self._topic_configs = topic_configs
        self._meter = WindowedRate(window)
        self._parsed: dict[str, tuple[str | None, ThrottledPartitions]] = {}

    @classmethod
    def for_side(
        cls,
        side: str,
        *,
        broker_id: int,
        config: Callable[[], BrokerConfig],
        topic_configs: Callable[[str], Mapping[str, str] | None],
    ) -> ReplicationQuotaManager:
        """The ``"leader"`` or ``"follower"`` manager of broker ``broker_id`` (its window from ``config()``)."""
        current = config()
        window = QuotaWindow(
            samples=current.replication_quota_window_num,
            window_ms=current.replication_quota_window_size_seconds * 1000,
        )
        if side == "leader":
            return cls(
                broker_id=broker_id,
                config_key=LEADER_THROTTLED_REPLICAS,
                rate=lambda: config().leader_replication_throttled_rate,
                topic_configs=topic_configs,
                window=window,
            )
        if side == "follower":
            return cls(
                broker_id=broker_id,
                config_key=FOLLOWER_THROTTLED_REPLICAS,
                rate=lambda: config().follower_replication_throttled_rate,
                topic_configs=topic_configs,
                window=window,
            )
        raise ValueError(f"no replication quota side {side!r}")

    @property
    def bound(self) -> int:
        """The configured rate in bytes per second."""
        return self._rate()

    def is_throttled(self, topic: str, partition: int) -> bool:
        """``topic``'s throttled-replicas config names this broker for ``partition`` (or is ``*``)."""
        configs = self._topic_configs(topic)
        value = None if configs is None else configs.get(self.config_key)
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != value:
            try:
                parsed = parse_throttled_partitions(value, self.broker_id)
            except ValueError:
                parsed = _NONE
            cached = self._parsed[topic] = (value, parsed)
        return partition in cached[1]

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """The measured rate is above the bound (never with the default, unlimited one)."""
        return self._meter.measure(now_ms) > self._rate()

    def throttle_time_ms(self, now_ms: int) -> int:
        """How long until the measured rate is back at the bound (0 when within it)."""
        rate = self._rate()
        if rate <= 0:  # a zero rate is never met again: wait a window at a time
            return self._meter.window.window_ms
        return self._meter.throttle_time_ms(rate, now_ms)

    def should_throttle(self, topic: str, partition: int, *, in_sync: bool, now_ms: int) -> bool:
        """Kafka's ``shouldLeaderThrottle`` / ``shouldFollowerThrottle``: a throttled replica out of the
        ISR while the quota is exceeded."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_quota_exceeded(now_ms)

    def record(self, nbytes: int, now_ms: int) -> None:
        """Count ``nbytes`` of throttled partitions' data sent or fetched."""
        if nbytes > 0:
            self._meter.record(nbytes, now_ms)

    def measured_rate(self, now_ms: int) -> float:
        return self._meter.measure(now_ms)
