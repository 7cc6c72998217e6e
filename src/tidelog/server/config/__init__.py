"""Broker and topic configuration: ``server.properties`` and ``--set`` in, a frozen typed config out.

One concept per module (each states its own invariants):

- ``errors``: :class:`ConfigError`, which every refusal raises, naming the key.
- ``values``: Kafka's config types; a raw string parsed into one, rendered back.
- ``validators``, ``config_def``: what one key is (type, default, validator, documentation, synonyms).
- ``broker_defs``, ``topic_defs``: every broker and topic config tidelog knows, with Kafka's names and
  defaults, the topic configs' broker synonyms, and which broker configs change live.
- ``properties``: Kafka's ``.properties`` syntax and ``--set key=value``.
- ``listeners``: ``listeners`` / ``advertised.listeners`` against ``listener.security.protocol.map``.
- ``broker_config``: :class:`BrokerConfig`, its precedence chains and dynamic layers.
- ``topic_config``: a topic's effective configs, validation of overrides, its storage ``LogConfig``.
- ``alter``: IncrementalAlterConfigs operations.
- ``describe``: DescribeConfigs entries, sources and synonyms, as Kafka's ``ConfigHelper`` reports them.
- ``group_config``: group configs (GROUP resources): keys, defaults from the broker, bounds, describe.

Everything here is pure parsing and data: no I/O beyond reading a properties file, no sockets. Import
from this package; the modules are its layout, not its interface.
"""

from __future__ import annotations

from .alter import AlterConfigOp, apply_config_operations, parse_list
from .broker_config import BrokerConfig, load_broker_config, parse_broker_config
from .broker_defs import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, KAFKA_DYNAMIC_BROKER_CONFIGS
from .config_def import BrokerSynonym, ConfigDef, TopicConfigDef
from .describe import (
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    describe_broker_configs,
    describe_topic_configs,
)
from .errors import ConfigError
from .group_config import GROUP_CONFIGS, describe_group_configs, group_config_def, validate_group_configs
from .listeners import Listener
from .properties import PropertyEntry, parse_properties, parse_set_option, read_properties_file
from .topic_config import (
    apply_incremental_alter,
    effective_topic_configs,
    log_config_for_topic,
    validate_topic_configs,
)
from .topic_defs import TOPIC_CONFIGS, topic_def
from .values import INT_MAX, LONG_MAX, ConfigType, ConfigValue, render

__all__ = [
    "BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "GROUP_CONFIGS",
    "INT_MAX",
    "KAFKA_DYNAMIC_BROKER_CONFIGS",
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "AlterConfigOp",
    "BrokerConfig",
    "BrokerSynonym",
    "ConfigDef",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ConfigValue",
    "Listener",
    "PropertyEntry",
    "TopicConfigDef",
    "apply_config_operations",
    "apply_incremental_alter",
    "describe_broker_configs",
    "describe_group_configs",
    "describe_topic_configs",
    "effective_topic_configs",
    "group_config_def",
    "load_broker_config",
    "log_config_for_topic",
    "parse_broker_config",
    "parse_list",
    "parse_properties",
    "parse_set_option",
    "read_properties_file",
    "render",
    "topic_def",
    "validate_group_configs",
    "validate_topic_configs",
]
