"""Topic configs: a topic's effective configs, validation of its overrides, its storage ``LogConfig``.

Invariants:

- A topic's effective config is its override if set, else its first broker synonym's resolved value
  (which already carries the broker's dynamic layers), else the topic default.
- :func:`validate_topic_configs` either returns overrides in normalised form or raises
  :class:`~tidelog.server.config.errors.ConfigError` (INVALID_CONFIG) with Kafka's message: an unknown
  name, a null or bad value, or a conflict (``min.compaction.lag.ms`` > ``max.compaction.lag.ms``).
- :func:`log_config_for_topic` fills every ``LogConfig`` field named after a topic config from the
  effective value: storage sees a topic's configs only as that ``LogConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from .alter import AlterConfigOp, apply_config_operations
from .broker_config import BrokerConfig
from .broker_defs import BROKER_CONFIGS
from .config_def import TopicConfigDef
from .errors import ConfigError
from .topic_defs import TOPIC_CONFIGS, topic_def
from .values import ConfigValue, render

if TYPE_CHECKING:
    from tidelog.storage.config import LogConfig

__all__ = [
    "apply_incremental_alter",
    "effective_topic_configs",
    "log_config_for_topic",
    "validate_topic_configs",
]


def _topic_default(broker: BrokerConfig, definition: TopicConfigDef) -> ConfigValue:
    if definition.broker_synonyms:
        head = BROKER_CONFIGS[definition.broker_synonyms[0].name]
        value: ConfigValue = getattr(broker, head.attr)
        return value
    return definition.default_value()


def effective_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, ConfigValue]:
    """Every topic config's typed effective value: override, else broker synonym, else default.

    ``overrides`` must already be valid (see :func:`validate_topic_configs`).
    """
    out: dict[str, ConfigValue] = {}
    for definition in TOPIC_CONFIGS.values():
        raw = overrides.get(definition.name)
        out[definition.name] = _topic_default(broker, definition) if raw is None else definition.parse(raw)
    return out


def validate_topic_configs(
    configs: Mapping[str, str | None], broker: BrokerConfig | None = None
) -> dict[str, str]:
    """Check topic config overrides (CreateTopics / AlterConfigs); returns them in normalised form.

    Raises :class:`ConfigError` (``error_code`` INVALID_CONFIG) with Kafka's message for an unknown name,
    a null or bad value, or a conflict between settings (``min.compaction.lag.ms`` > ``max.compaction.lag.ms``).
    """
    normalised: dict[str, str] = {}
    for name, raw in configs.items():
        definition = topic_def(name)
        if raw is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}", key=name)
        rendered = render(definition.type, definition.parse(raw))
        assert rendered is not None
        normalised[name] = rendered
    if "min.compaction.lag.ms" in normalised or "max.compaction.lag.ms" in normalised:
        defaults = broker or BrokerConfig.from_mapping({})
        effective = effective_topic_configs(defaults, normalised)
        low, high = effective["min.compaction.lag.ms"], effective["max.compaction.lag.ms"]
        assert isinstance(low, int)
        assert isinstance(high, int)
        if low > high:
            raise ConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})",
                key="min.compaction.lag.ms",
            )
    return normalised


def apply_incremental_alter(
    broker: BrokerConfig,
    current: Mapping[str, str],
    operations: Sequence[tuple[str, AlterConfigOp | int, str | None]],
) -> dict[str, str]:
    """A topic's new overrides after IncrementalAlterConfigs ``operations``; validated, not yet stored.

    APPEND / SUBTRACT apply only to list configs (``cleanup.policy``), starting from the effective value.
    """

    def effective(name: str, updated: Mapping[str, str | None]) -> tuple[str, ...]:
        overrides = {key: value for key, value in updated.items() if value is not None}
        base = effective_topic_configs(broker, validate_topic_configs(overrides, broker))[name]
        assert isinstance(base, tuple)
        return base

    updated = apply_config_operations(
        current, operations, definition_of=topic_def, list_base=effective, null_set="topic"
    )
    return validate_topic_configs({key: value for key, value in updated.items() if value is not None}, broker)


def log_config_for_topic(broker: BrokerConfig, topic_overrides: Mapping[str, str]) -> LogConfig:
    """The storage ``LogConfig`` for a topic: its overrides over the broker's defaults.

    Every ``LogConfig`` field named after a topic config (``segment.bytes`` -> ``segment_bytes``) is filled
    from the effective value; list values (``cleanup.policy``) are passed in the field's own shape.
    """
    from tidelog.storage.config import LogConfig

    effective = effective_topic_configs(broker, topic_overrides)
    kwargs: dict[str, object] = {}
    for log_field in fields(LogConfig):
        name = log_field.name.replace("_", ".")
        if name not in effective:
            continue
        value = effective[name]
        if isinstance(value, tuple) and isinstance(log_field.default, str):
            value = ",".join(value)
        kwargs[log_field.name] = value
    return LogConfig(**kwargs)  # type: ignore[arg-type]  # values typed per field by TOPIC_CONFIGS
