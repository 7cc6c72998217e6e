"""DescribeConfigs: each config's value, source and synonyms, as Kafka's ``ConfigHelper`` reports them.

Invariants:

- Values, sources and synonyms are reported exactly as Kafka's ``ConfigHelper`` does, so
  ``kafka-configs --describe`` output reads the same: a config's source is that of its first synonym;
  synonyms run from the highest layer (topic override, this broker's dynamic config, dynamic cluster
  default, static config, default) down, starting at the config itself.
- A sensitive (PASSWORD) value is never reported, in an entry or a synonym.
- Only ``DYNAMIC_BROKER_CONFIGS`` are reported writable; every topic config is writable.
- ``ConfigSource`` numbers are the ones DescribeConfigs puts on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from .broker_config import BrokerConfig
from .broker_defs import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS
from .config_def import ConfigDef
from .topic_config import effective_topic_configs
from .topic_defs import TOPIC_CONFIGS, broker_synonym_group
from .values import ConfigType, render

__all__ = [
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "describe_broker_configs",
    "describe_topic_configs",
]

Def = TypeVar("Def", bound=ConfigDef)


class ConfigSource(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` (the ``ConfigSource`` / synonym ``Source`` fields)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of a DescribeConfigs result (v1+ fields; ``is_default`` for v0)."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    config_type: ConfigType
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


def _broker_synonyms(
    broker: BrokerConfig, head: str, sensitive: bool, *, per_broker: bool = True
) -> list[ConfigSynonym]:
    """Kafka's ``ConfigHelper.configSynonyms``: dynamic per-broker values, dynamic cluster defaults, static
    values, then defaults, from ``head`` on (without the per-broker values when ``per_broker`` is false)."""
    chain = broker_synonym_group(head)
    found: list[ConfigSynonym] = []
    layers = (
        (broker.dynamic_broker_configs if per_broker else {}, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (broker.dynamic_default_configs, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )
    for layer, layer_source in layers:
        found.extend(
            ConfigSynonym(synonym, None if sensitive else layer[synonym], layer_source)
            for synonym in chain
            if synonym in layer
        )
    for synonym in chain:
        if synonym in broker.originals:
            value = None if sensitive else broker.originals[synonym]
            found.append(ConfigSynonym(synonym, value, ConfigSource.STATIC_BROKER_CONFIG))
    for synonym in chain:
        default = BROKER_CONFIGS[synonym].default
        if default is not None:
            found.append(ConfigSynonym(synonym, None if sensitive else default, ConfigSource.DEFAULT_CONFIG))
    while found and found[0].name != head:
        found.pop(0)
    return found


def _wanted(definitions: Iterable[Def], names: Iterable[str] | None) -> list[Def]:
    if names is None:
        return list(definitions)
    by_name = {definition.name: definition for definition in definitions}
    return [by_name[name] for name in names if name in by_name]


def describe_topic_configs(
    broker: BrokerConfig,
    overrides: Mapping[str, str],
    names: Iterable[str] | None = None,
    *,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """A topic's configs as DescribeConfigs reports them; ``names=None`` means all, unknown names are skipped."""
    effective = effective_topic_configs(broker, overrides)
    entries: list[ConfigEntry] = []
    for definition in _wanted(TOPIC_CONFIGS.values(), names):
        value = None if definition.sensitive else render(definition.type, effective[definition.name])
        synonyms: list[ConfigSynonym] = []
        if definition.name in overrides:
            synonyms.append(ConfigSynonym(definition.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if definition.broker_synonyms:
            synonyms.extend(
                _broker_synonyms(broker, definition.broker_synonyms[0].name, definition.sensitive)
            )
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=definition.name,
                value=value,
                source=source,
                read_only=False,
                is_sensitive=definition.sensitive,
                config_type=definition.type,
                synonyms=tuple(synonyms) if include_synonyms else (),
                documentation=definition.doc if include_documentation else None,
            )
        )
    return entries


def describe_broker_configs(
    broker: BrokerConfig,
    names: Iterable[str] | None = None,
    *,
    include_synonyms: bool = False,
    include_documentation: bool = False,
    cluster_default: bool = False,
) -> list[ConfigEntry]:
    """The broker's configs as DescribeConfigs reports them for its id: every config, with the value of
    the highest layer that sets it; writable only if in ``DYNAMIC_BROKER_CONFIGS``.

    With ``cluster_default`` (the resource name ``""``), as Kafka: only the configs set as dynamic cluster
    defaults, with those values, and no per-broker synonyms.
    """
    entries: list[ConfigEntry] = []
    definitions = _wanted(BROKER_CONFIGS.values(), names)
    if cluster_default:
        definitions = [d for d in definitions if d.name in broker.dynamic_default_configs]
    for definition in definitions:
        layers = (
            [broker.dynamic_default_configs]
            if cluster_default
            else [broker.dynamic_broker_configs, broker.dynamic_default_configs, broker.originals]
        )
        raw = next(
            (layer[definition.name] for layer in layers if definition.name in layer), definition.default
        )
        value = None if definition.sensitive else raw
        synonyms = _broker_synonyms(
            broker, definition.name, definition.sensitive, per_broker=not cluster_default
        )
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=definition.name,
                value=value,
                source=source,
                read_only=definition.name not in DYNAMIC_BROKER_CONFIGS,
                is_sensitive=definition.sensitive,
                config_type=definition.type,
                synonyms=tuple(synonyms) if include_synonyms else (),
                documentation=definition.doc if include_documentation else None,
            )
        )
    return entries
