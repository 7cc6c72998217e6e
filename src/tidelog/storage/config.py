"""Topic-level log configuration: Kafka's names (``segment.bytes`` -> ``segment_bytes``), Kafka's defaults.

Invariants:

* A :class:`LogConfig` is immutable and always valid: every constructor path runs :meth:`LogConfig.validate`.
* Field names are the Kafka topic config keys with '.' replaced by '_'; :meth:`LogConfig.to_properties`
  and :meth:`LogConfig.from_properties` round-trip.
* Broker-level keys (``log.segment.bytes``, ``log.retention.hours`` ...) map onto the same fields through
  :meth:`LogConfig.from_broker_properties`, with Kafka's precedence (ms over minutes over hours).
* Topic keys Kafka knows but tidelog does not act on (throttled replicas, tiered storage ...) are accepted
  and ignored; any other key is :class:`InvalidConfigError`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.storage.errors import InvalidConfigError

__all__ = ["LONG_MAX", "LogConfig"]

LONG_MAX: Final = 2**63 - 1
"""Java's Long.MAX_VALUE, Kafka's "never" for flush.messages / flush.ms and friends."""

_TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
_CLEANUP_POLICIES: Final = frozenset({"delete", "compact"})
_COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# Kafka topic configs accepted and ignored (replication throttles, tiered storage, legacy format knobs).
_IGNORED_TOPIC_KEYS: Final = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "remote.storage.enable",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "local.retention.ms",
        "local.retention.bytes",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
    }
)

# Lower bounds (inclusive) per field, as Kafka's ConfigDef validators (segment.index.bytes: Kafka says 4).
_MINIMUM: Final[Mapping[str, int | float]] = {
    "segment_bytes": 14,
    "segment_ms": 1,
    "segment_jitter_ms": 0,
    "segment_index_bytes": 4,
    "index_interval_bytes": 0,
    "retention_ms": -1,
    "flush_messages": 1,
    "flush_ms": 0,
    "file_delete_delay_ms": 0,
    "message_timestamp_before_max_ms": 0,
    "message_timestamp_after_max_ms": 0,
    "max_message_bytes": 0,
    "min_cleanable_dirty_ratio": 0.0,
    "delete_retention_ms": 0,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": 1,
    "min_insync_replicas": 1,
}
_INT32_FIELDS: Final = frozenset(
    {
        "segment_bytes",
        "segment_index_bytes",
        "index_interval_bytes",
        "max_message_bytes",
        "min_insync_replicas",
    }
)

# Broker key -> topic field; for fields with several broker keys, the first present wins (Kafka's order).
_BROKER_KEYS: Final[Mapping[str, tuple[tuple[str, int], ...]]] = {
    "segment_bytes": (("log.segment.bytes", 1),),
    "segment_ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "segment_jitter_ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "segment_index_bytes": (("log.index.size.max.bytes", 1),),
    "index_interval_bytes": (("log.index.interval.bytes", 1),),
    "retention_ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "retention_bytes": (("log.retention.bytes", 1),),
    "flush_messages": (("log.flush.interval.messages", 1),),
    "flush_ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "file_delete_delay_ms": (("log.segment.delete.delay.ms", 1),),
    "message_timestamp_type": (("log.message.timestamp.type", 1),),
    "message_timestamp_before_max_ms": (("log.message.timestamp.before.max.ms", 1),),
    "message_timestamp_after_max_ms": (("log.message.timestamp.after.max.ms", 1),),
    "max_message_bytes": (("message.max.bytes", 1),),
    "cleanup_policy": (("log.cleanup.policy", 1),),
    "compression_type": (("compression.type", 1),),
    "min_cleanable_dirty_ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "delete_retention_ms": (("log.cleaner.delete.retention.ms", 1),),
    "min_compaction_lag_ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max_compaction_lag_ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "min_insync_replicas": (("min.insync.replicas", 1),),
    "unclean_leader_election_enable": (("unclean.leader.election.enable", 1),),
    "preallocate": (("log.preallocate", 1),),
}


@functools.lru_cache(maxsize=64)
def _parse_cleanup_policy(value: str) -> frozenset[str]:
    """``cleanup.policy``'s set (parsed once per distinct value: every append asks whether its log is
    compacted)."""
    return frozenset(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The configs of one topic's logs. Defaults are Kafka's."""

    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10_485_760
    index_interval_bytes: int = 4096
    retention_ms: int = 604_800_000
    """-1: no time limit."""
    retention_bytes: int = -1
    """-1 (any negative): no size limit."""
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    cleanup_policy: str = "delete"
    """Comma-separated subset of {delete, compact}."""
    compression_type: str = "producer"
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    preallocate: bool = False

    def __post_init__(self) -> None:
        self.validate()

    # ---- derived ----------------------------------------------------------------------------------

    @property
    def cleanup_policies(self) -> frozenset[str]:
        return _parse_cleanup_policy(self.cleanup_policy)

    @property
    def delete_enabled(self) -> bool:
        """Retention by time and size applies (``cleanup.policy`` contains ``delete``)."""
        return "delete" in self.cleanup_policy  # validated: the only words are delete and compact

    @property
    def compact_enabled(self) -> bool:
        """Asked of every append: a substring test, exact because :meth:`validate` admits no other word
        than ``delete`` and ``compact`` (neither holds the other)."""
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        """``message.timestamp.type=LogAppendTime``: the broker stamps every batch with its append time."""
        return self.message_timestamp_type == "LogAppendTime"

    # ---- construction -----------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`InvalidConfigError` naming the Kafka key of the first bad value."""
        for name, minimum in _MINIMUM.items():
            value = getattr(self, name)
            if value < minimum:
                raise InvalidConfigError(f"{_key(name)}={value}: must be at least {minimum}")
            if name in _INT32_FIELDS and value > 2**31 - 1:
                raise InvalidConfigError(f"{_key(name)}={value}: must fit in an int32")
        if self.min_cleanable_dirty_ratio > 1.0:
            raise InvalidConfigError(
                f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio}: must be <= 1"
            )
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise InvalidConfigError(
                f"message.timestamp.type={self.message_timestamp_type!r}: must be one of {_TIMESTAMP_TYPES}"
            )
        policies = self.cleanup_policies
        if not policies or not policies <= _CLEANUP_POLICIES:
            raise InvalidConfigError(
                f"cleanup.policy={self.cleanup_policy!r}: must be a list of delete, compact"
            )
        if self.compression_type not in _COMPRESSION_TYPES:
            raise InvalidConfigError(
                f"compression.type={self.compression_type!r}: must be one of {_COMPRESSION_TYPES}"
            )

    def with_overrides(self, props: Mapping[str, str]) -> LogConfig:
        """This config with the topic-level ``props`` (Kafka key names, string values) applied."""
        changes: dict[str, object] = {}
        for key, raw in props.items():
            name = key.replace(".", "_")
            if name not in _FIELD_TYPES:
                if key in _IGNORED_TOPIC_KEYS:
                    continue
                raise InvalidConfigError(f"unknown topic config {key!r}")
            changes[name] = _parse(key, str(raw), _FIELD_TYPES[name])
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_properties(cls, props: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """A config from topic-level keys (``segment.bytes`` ...) over ``defaults`` (Kafka's if None)."""
        return (defaults if defaults is not None else cls()).with_overrides(props)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """The broker-wide default topic config from ``server.properties`` keys (``log.segment.bytes`` ...).

        Keys without a log meaning are ignored (the broker has many).
        """
        changes: dict[str, object] = {}
        for name, candidates in _BROKER_KEYS.items():
            for key, scale in candidates:
                if key in props:
                    value = _parse(key, str(props[key]), _FIELD_TYPES[name])
                    if scale != 1 and isinstance(value, int):
                        value = value * scale if value >= 0 else -1  # Kafka: a negative duration means "none"
                    changes[name] = value
                    break
        return dataclasses.replace(cls(), **changes)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """Every config as Kafka topic key -> string value (DescribeConfigs' view)."""
        out: dict[str, str] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[_key(field.name)] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out


def _key(field_name: str) -> str:
    return field_name.replace("_", ".")


def _parse(key: str, raw: str, kind: type) -> object:
    text = raw.strip()
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError(text)
            return lowered == "true"
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise InvalidConfigError(f"{key}={raw!r}: not a valid {kind.__name__}") from None
    return text


_FIELD_TYPES: Final[Mapping[str, type]] = {
    f.name: {"int": int, "str": str, "bool": bool, "float": float}[str(f.type)]
    for f in dataclasses.fields(LogConfig)
}
