"""Settings of the group coordinator: Kafka's broker keys, snake_cased, with Kafka's defaults.

Invariants: attribute names equal the ``BrokerConfig`` attributes of the same Kafka keys
(``group.initial.rebalance.delay.ms`` -> ``group_initial_rebalance_delay_ms``), so the runtime builds
this from its broker config field by field; the coordinator reads nothing else, except a group's own
configs (Kafka 4's ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms``) through
``group_configs``, a pure lookup of the keys set for a group (already validated against the broker's
bounds when they were set).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["GroupCoordinatorConfig"]

_INT32_MAX = 2**31 - 1


def _no_group_configs(_group_id: str) -> Mapping[str, str]:
    return {}


def _override(configs: Mapping[str, str], key: str, default: int) -> int:
    raw = configs.get(key)
    try:
        return default if raw is None else int(raw)
    except ValueError:
        return default


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

    group_configs: Callable[[str], Mapping[str, str]] = field(default=_no_group_configs, compare=False)
    """A group's own configs (the keys set for it: ``GroupConfigStore.configs_of``)."""

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    def consumer_session_timeout_ms(self, group_id: str) -> int:
        """The group's ``consumer.session.timeout.ms``, else ``group.consumer.session.timeout.ms``."""
        configs = self.group_configs(group_id)
        return _override(configs, "consumer.session.timeout.ms", self.group_consumer_session_timeout_ms)

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's ``consumer.heartbeat.interval.ms``, else ``group.consumer.heartbeat.interval.ms``."""
        configs = self.group_configs(group_id)
        return _override(configs, "consumer.heartbeat.interval.ms", self.group_consumer_heartbeat_interval_ms)
