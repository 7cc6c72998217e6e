"""Settings of the group coordinator: Kafka's broker keys, snake_cased, with Kafka's defaults.

Invariants: attribute names equal the ``BrokerConfig`` attributes of the same Kafka keys
(``group.initial.rebalance.delay.ms`` -> ``group_initial_rebalance_delay_ms``), so the runtime builds
this from its broker config field by field; the coordinator reads nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupCoordinatorConfig"]

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    offsets_topic_num_partitions: int = 50
    """``offsets.topic.num.partitions``: a group lives on ``partition_for(group_id, this)``."""
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    """How long a new group's first rebalance waits for more members (repeatedly, up to the rebalance timeout)."""
    group_max_size: int = _INT32_MAX
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    group_consumer_session_timeout_ms: int = 45_000
    """``group.consumer.session.timeout.ms``: a KIP-848 member that does not heartbeat this long is fenced."""
    group_consumer_heartbeat_interval_ms: int = 5_000
    """``group.consumer.heartbeat.interval.ms``: how often KIP-848 members are told to heartbeat."""
    group_consumer_max_size: int = _INT32_MAX
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    """``group.consumer.assignors``: server assignors by name (or Kafka class name), the first the default."""
    group_new_member_join_timeout_ms: int = 300_000
    """Kafka's internal ``GROUP_COORDINATOR_NEW_MEMBER_JOIN_TIMEOUT_MS``: a new member's parked JoinGroup
    is dropped after this long (it cannot heartbeat yet, and a client that gave up would linger)."""

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
