"""Group configs (Kafka 4's dynamic group configs, KIP-848 / KIP-932 / KIP-1191, plus tidelog's retry
backoff): the keys, their types, defaults and bounds, validation of a group's overrides, and the entries
DescribeConfigs reports for a GROUP resource.

Invariants:

- The keys are Kafka's ``GroupConfig`` keys that tidelog acts on (consumer and share groups, the
  dead-letter topic of KIP-1191, KIP-1206's ``share.acquire.mode``) plus ``share.release.backoff.ms``,
  ``.multiplier`` and ``.max.ms`` (tidelog only). Any other key is refused: ``Unknown group config name: <key>`` (INVALID_CONFIG), as Kafka.
- A key's default is the broker config it overrides (``share.record.lock.duration.ms`` ->
  ``group.share.record.lock.duration.ms``), read from the broker's effective config; when the broker does
  not define that key (yet), Kafka's default stands in (:func:`broker_value`).
- Validation is Kafka's ``GroupConfig.validate`` over the group's whole set of overrides, in its order:
  every value parses as its type and passes its static check (``atLeast``, the allowed strings), each
  numeric override lies within the broker's bounds (``share.record.lock.duration.ms`` within
  ``group.share.min.record.lock.duration.ms`` .. ``group.share.max.record.lock.duration.ms``:
  ``<key> must be in the range <min> to <max> inclusive.``), a session timeout exceeds its heartbeat
  interval (the broker's value standing in for the one not overridden), a dead-letter topic name does not
  start with ``__``; tidelog's backoff maximum, when set (0: none), is not below the backoff. Every refusal is a
  :class:`ConfigError` (INVALID_CONFIG) naming the key.
- Described values are the override (source ``GROUP_CONFIG``) or the broker's value (``DEFAULT_CONFIG``),
  with Kafka's synonyms: the key itself, then the broker key's chain where the broker defines it.
- Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .broker_config import BrokerConfig
from .broker_defs import BROKER_CONFIGS
from .describe import ConfigEntry, ConfigSource, ConfigSynonym, _broker_synonyms
from .errors import ConfigError, invalid_value
from .validators import OneOf, Validator, at_least
from .values import ConfigType, ConfigValue, parse_typed, render

__all__ = [
    "GROUP_CONFIGS",
    "GroupConfigDef",
    "broker_value",
    "describe_group_configs",
    "group_config_def",
    "validate_group_configs",
]

_I, _S, _B, _D = ConfigType.INT, ConfigType.STRING, ConfigType.BOOLEAN, ConfigType.DOUBLE


@dataclass(frozen=True, slots=True)
class _AutoOffsetReset(Validator):
    """Kafka's ``ShareGroupAutoOffsetResetStrategy.Validator``: ``earliest``, ``latest`` or
    ``by_duration:<ISO-8601 duration>`` (PnDTnHnMn.nS, not negative)."""

    def __call__(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, str)
        lowered = value.lower()
        if lowered in ("earliest", "latest"):
            return
        if lowered.startswith("by_duration:"):
            duration = value.split(":", 1)[1].strip()
            if _ISO_DURATION.fullmatch(duration) and any(c.isdigit() for c in duration):
                return
            raise invalid_value(
                name, value, f"Invalid ISO-8601 duration {duration!r} (PnDTnHnMn.nS, not negative)"
            )
        raise invalid_value(
            name, value, "String must be one of: earliest, latest, by_duration:<ISO-8601 duration>"
        )

    def describe(self) -> str:
        return "[earliest, latest, by_duration:PnDTnHnMn.nS]"


_ISO_DURATION = re.compile(r"P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _NotInternalTopic(Validator):
    def __call__(self, name: str, value: ConfigValue) -> None:
        assert isinstance(value, str)
        if value.startswith("__"):
            raise ConfigError(f"{name}: DLQ topic name must not start with '__'", key=name)

    def describe(self) -> str:
        return "a topic name not starting with __, or empty for none"


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One group config: its type, the broker key whose value is its default (with Kafka's default when
    the broker lacks the key), its static check, and the broker keys bounding it."""

    name: str
    type: ConfigType
    default: ConfigValue
    doc: str
    validator: Validator | None = None
    broker_key: str | None = None
    bounds: tuple[tuple[str, int], tuple[str, int]] | None = None
    """((min broker key, Kafka's min default), (max broker key, Kafka's max default))."""

    def parse(self, raw: str) -> ConfigValue:
        """Parse and check ``raw`` (Kafka's ``ConfigDef.parse``); raises :class:`ConfigError`."""
        value = parse_typed(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def default_value(self, broker: BrokerConfig) -> ConfigValue:
        if self.broker_key is None:
            return self.default
        return broker_value(broker, self.broker_key, self.default)


def broker_value(broker: BrokerConfig, key: str, fallback: ConfigValue) -> ConfigValue:
    """The broker's effective value of ``key``, or ``fallback`` (Kafka's default) if tidelog's broker
    config does not define ``key``."""
    definition = BROKER_CONFIGS.get(key)
    return fallback if definition is None else getattr(broker, definition.attr)


_DEFS = (
    GroupConfigDef(
        "consumer.session.timeout.ms", _I, 45000,
        "The timeout to detect client failures when using the consumer group protocol.",
        at_least(1), "group.consumer.session.timeout.ms",
        (("group.consumer.min.session.timeout.ms", 45000), ("group.consumer.max.session.timeout.ms", 60000)),
    ),
    GroupConfigDef(
        "consumer.heartbeat.interval.ms", _I, 5000,
        "The heartbeat interval given to the members of a consumer group.",
        at_least(1), "group.consumer.heartbeat.interval.ms",
        (("group.consumer.min.heartbeat.interval.ms", 5000), ("group.consumer.max.heartbeat.interval.ms", 15000)),
    ),
    GroupConfigDef(
        "share.session.timeout.ms", _I, 45000,
        "The timeout to detect client failures when using the share group protocol.",
        at_least(1), "group.share.session.timeout.ms",
        (("group.share.min.session.timeout.ms", 45000), ("group.share.max.session.timeout.ms", 60000)),
    ),
    GroupConfigDef(
        "share.heartbeat.interval.ms", _I, 5000,
        "The heartbeat interval given to the members of a share group.",
        at_least(1), "group.share.heartbeat.interval.ms",
        (("group.share.min.heartbeat.interval.ms", 5000), ("group.share.max.heartbeat.interval.ms", 15000)),
    ),
    GroupConfigDef(
        "share.record.lock.duration.ms", _I, 30000,
        "The record acquisition lock duration in milliseconds for share groups.",
        at_least(1000), "group.share.record.lock.duration.ms",
        (("group.share.min.record.lock.duration.ms", 15000), ("group.share.max.record.lock.duration.ms", 60000)),
    ),
    GroupConfigDef(
        "share.delivery.count.limit", _I, 5,
        "The maximum number of delivery attempts for a record delivered to a share group.",
        at_least(2), "group.share.delivery.count.limit",
        (("group.share.min.delivery.count.limit", 2), ("group.share.max.delivery.count.limit", 10)),
    ),
    GroupConfigDef(
        "share.partition.max.record.locks", _I, 2000,
        "Share-group record lock limit per share-partition.",
        at_least(100), "group.share.partition.max.record.locks",
        (
            ("group.share.min.partition.max.record.locks", 100),
            ("group.share.max.partition.max.record.locks", 4000),
        ),
    ),
    GroupConfigDef(
        "share.auto.offset.reset", _S, "latest",
        "The strategy to initialize the share-partition start offset: earliest, latest, or "
        "by_duration:<ISO-8601 duration> (that long before now).",
        _AutoOffsetReset(),
    ),
    GroupConfigDef(
        "share.isolation.level", _S, "read_uncommitted",
        "Whether a share group delivers only committed transactional records (read_committed) or all "
        "(read_uncommitted).",
        OneOf(("read_committed", "read_uncommitted")),
    ),
    GroupConfigDef(
        "share.acquire.mode", _S, "batch_optimized",
        "How a share fetch counts its record limit (KIP-1206): batch_optimized acquires whole record "
        "batches, so a fetch may hold more records than asked for; record_limit acquires at most that many.",
        OneOf(("batch_optimized", "record_limit")),
    ),
    GroupConfigDef(
        "errors.deadletterqueue.topic.name", _S, "",
        "The dead-letter topic of this share group (KIP-1191); empty: none.",
        _NotInternalTopic(),
    ),
    GroupConfigDef(
        "errors.deadletterqueue.copy.record.enable", _B, False,
        "Whether a dead-lettered record's key, value and headers are copied onto the dead-letter topic "
        "(otherwise only the context headers are written) (KIP-1191).",
    ),
    GroupConfigDef(
        "share.release.backoff.ms", _I, 0,
        "tidelog only: a released or lock-expired record becomes available again only after this long, "
        "times share.release.backoff.multiplier for each earlier delivery; 0 redelivers at once (Kafka).",
        at_least(0),
    ),
    GroupConfigDef(
        "share.release.backoff.multiplier", _D, 1.0,
        "tidelog only: the factor the release backoff grows by with each delivery (1.0: a constant backoff).",
        at_least(1.0),
    ),
    GroupConfigDef(
        "share.release.backoff.max.ms", _I, 0,
        "tidelog only: the longest release backoff; 0: no maximum.",
        at_least(0),
    ),
)  # fmt: skip

GROUP_CONFIGS: dict[str, GroupConfigDef] = {definition.name: definition for definition in _DEFS}
"""Every group config by name, in Kafka's order (tidelog's own last)."""

_SESSION_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)


def group_config_def(name: str) -> GroupConfigDef:
    """The definition of ``name``; raises Kafka's ``Unknown group config name`` (INVALID_CONFIG)."""
    definition = GROUP_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"Unknown group config name: {name}", key=name)
    return definition


def _int(value: ConfigValue) -> int:
    assert isinstance(value, int)
    return value


def validate_group_configs(overrides: Mapping[str, str], broker: BrokerConfig) -> dict[str, str]:
    """A group's complete overrides checked as Kafka's ``GroupConfig.validate`` (module invariants); returns
    them with each value as it parsed (trimmed). Raises :class:`ConfigError` naming the key."""
    for name in overrides:
        group_config_def(name)
    parsed = {name: GROUP_CONFIGS[name].parse(raw) for name, raw in overrides.items()}
    for name, value in parsed.items():
        bounds = GROUP_CONFIGS[name].bounds
        if bounds is None:
            continue
        (min_key, min_default), (max_key, max_default) = bounds
        low, high = (
            _int(broker_value(broker, min_key, min_default)),
            _int(broker_value(broker, max_key, max_default)),
        )
        if not low <= _int(value) <= high:
            raise ConfigError(f"{name} must be in the range {low} to {high} inclusive.", key=name)
    for session_key, heartbeat_key in _SESSION_HEARTBEAT:
        if session_key in parsed or heartbeat_key in parsed:
            session = parsed.get(session_key, GROUP_CONFIGS[session_key].default_value(broker))
            heartbeat = parsed.get(heartbeat_key, GROUP_CONFIGS[heartbeat_key].default_value(broker))
            if _int(session) <= _int(heartbeat):
                raise ConfigError(f"{session_key} must be greater than {heartbeat_key}", key=session_key)
    backoff_keys = ("share.release.backoff.ms", "share.release.backoff.max.ms")
    if any(key in parsed for key in backoff_keys):
        backoff, backoff_max = (_int(parsed.get(key, GROUP_CONFIGS[key].default)) for key in backoff_keys)
        if 0 < backoff_max < backoff:
            raise ConfigError(
                "share.release.backoff.max.ms must be greater than or equal to share.release.backoff.ms",
                key="share.release.backoff.max.ms",
            )
    return {name: raw.strip() for name, raw in overrides.items()}


def describe_group_configs(
    broker: BrokerConfig,
    overrides: Mapping[str, str],
    names: Iterable[str] | None = None,
    *,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """A group's configs as DescribeConfigs reports them; ``names=None`` means all, unknown names are
    skipped (as for topics)."""
    wanted = (
        list(GROUP_CONFIGS.values())
        if names is None
        else [GROUP_CONFIGS[n] for n in names if n in GROUP_CONFIGS]
    )
    entries: list[ConfigEntry] = []
    for definition in wanted:
        overridden = definition.name in overrides
        value = (
            overrides[definition.name]
            if overridden
            else render(definition.type, definition.default_value(broker))
        )
        source = ConfigSource.GROUP_CONFIG if overridden else ConfigSource.DEFAULT_CONFIG
        synonyms = [ConfigSynonym(definition.name, value, source)]
        if definition.broker_key in BROKER_CONFIGS:
            assert definition.broker_key is not None
            synonyms.extend(_broker_synonyms(broker, definition.broker_key, False))
        entries.append(
            ConfigEntry(
                name=definition.name,
                value=value,
                source=source,
                read_only=False,
                is_sensitive=False,
                config_type=definition.type,
                synonyms=tuple(synonyms) if include_synonyms else (),
                documentation=definition.doc if include_documentation else None,
            )
        )
    return entries
