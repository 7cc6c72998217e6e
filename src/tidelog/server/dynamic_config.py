"""Dynamic broker configs (Kafka's KIP-226): the two layers, how an alteration is checked, where it is kept.

Invariants:

- Two layers, as in Kafka: the cluster-wide default (BROKER resource ``""``) and this broker's own
  (resource ``"<node.id>"``). The effective config is the static one with both laid over it
  (:meth:`BrokerConfig.with_dynamic`): topic override > per-broker > cluster default > static > default.
- Only ``DYNAMIC_BROKER_CONFIGS`` can be set or deleted. A read-only key is refused with INVALID_REQUEST
  (:class:`ReadOnlyConfigError`, naming the key and saying when Kafka could change it live but tidelog
  cannot); an unknown key or a bad value is refused with INVALID_CONFIG naming the key. An alteration is
  checked whole (every key and value, then the effective config it would make) before anything is stored,
  so a refused request, like a ``validate_only`` one, changes nothing.
- Both layers live in ``<first log dir>/tidelog-broker-configs.json``, replaced crash-safely (temp file,
  fsync, rename, directory fsync) before a change is applied or answered, and are read at start-up. A stored
  key that is no longer dynamic or valid is left out with a warning (Kafka ignores such configs too); a
  stored set that does not make a valid config together is not applied at all (warning, static config).
  The file carries a CRC32C of its layers (format version 2; a version-1 file has none). A damaged file
  (unreadable, not UTF-8 or JSON, not layers of string configs, a checksum that does not match: one flipped
  digit would change a retention silently) or of an unknown format version (a newer tidelog's) is warned
  about, naming it, and ignored: the broker starts on its static config and the next alteration replaces
  the file. It never stops the broker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from tidelog.protocol.errors import ErrorCode
from tidelog.server.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    KAFKA_DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    AlterConfigOp,
    BrokerConfig,
    ConfigDef,
    ConfigError,
    apply_config_operations,
    parse_list,
    render,
)
from tidelog.server.json_checksum import json_crc32c
from tidelog.storage.checkpoint import atomic_write

__all__ = [
    "FILE_NAME",
    "DynamicBrokerConfigs",
    "ReadOnlyConfigError",
    "apply_incremental_broker_alter",
    "validate_broker_configs",
]

log = logging.getLogger("tidelog.dynamic_config")

FILE_NAME: Final = "tidelog-broker-configs.json"
_FORMAT_VERSION: Final = 2
_FORMAT_VERSIONS: Final = (1, 2)
"""Version 1 has no checksum."""
CLUSTER_DEFAULT: Final = ""
"""The entity (resource name) of the cluster-wide default layer."""


class ReadOnlyConfigError(ConfigError):
    """A broker config that cannot be updated dynamically: answered with INVALID_REQUEST, as Kafka does."""

    error_code = ErrorCode.INVALID_REQUEST


def _checksum(document: Mapping[str, Any]) -> int:
    """CRC32C of the layers' canonical JSON (sorted keys, no spaces), the same written and read back."""
    layers = {"brokers": document.get("brokers", {}), "cluster_default": document.get("cluster_default", {})}
    return json_crc32c(layers)


def _check_dynamic(name: str) -> None:
    if name in DYNAMIC_BROKER_CONFIGS:
        return
    if name not in BROKER_CONFIGS:
        definition = TOPIC_CONFIGS.get(name)
        synonyms = getattr(definition, "broker_synonyms", ())
        hint = f" ({name} is a topic config; its broker default is {synonyms[0].name})" if synonyms else ""
        raise ConfigError(f"Unknown broker config name: {name}{hint}", key=name)
    if name in KAFKA_DYNAMIC_BROKER_CONFIGS:
        raise ReadOnlyConfigError(
            f"Cannot update these configs dynamically: {name} (Kafka can change it live; tidelog reads it "
            "only at start-up, from server.properties)",
            key=name,
        )
    raise ReadOnlyConfigError(
        f"Cannot update these configs dynamically: {name} (a read-only config)", key=name
    )


def validate_broker_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check one dynamic layer's configs (every key dynamic, every value valid); returns them normalised."""
    for name in configs:
        _check_dynamic(name)
    normalised: dict[str, str] = {}
    for name, raw in configs.items():
        if raw is None:
            raise ConfigError(f"Null value not supported for broker configs: {name}", key=name)
        definition = BROKER_CONFIGS[name]
        rendered = render(definition.type, definition.parse(raw))
        assert rendered is not None
        normalised[name] = rendered
    return normalised


def apply_incremental_broker_alter(
    current: Mapping[str, str],
    operations: Sequence[tuple[str, AlterConfigOp | int, str | None]],
    effective: BrokerConfig,
) -> dict[str, str]:
    """A layer's new configs after IncrementalAlterConfigs ``operations``; validated, not yet stored.

    APPEND / SUBTRACT apply only to list configs and start from the layer's value, else from the value the
    layer would override (``effective``).
    """

    def definition_of(name: str) -> ConfigDef:
        _check_dynamic(name)
        return BROKER_CONFIGS[name]

    def base(name: str, updated: Mapping[str, str | None]) -> tuple[str, ...]:
        definition = BROKER_CONFIGS[name]
        raw = updated.get(name)
        if raw is None:
            raw = render(definition.type, getattr(effective, definition.attr)) or ""
        return parse_list(definition, raw)

    updated = apply_config_operations(current, operations, definition_of=definition_of, list_base=base)
    return validate_broker_configs(updated)


class DynamicBrokerConfigs:
    """The static config, the stored dynamic layers, and the effective config they make (``config``)."""

    def __init__(self, static: BrokerConfig, directory: Path) -> None:
        self.static = static
        self.node = str(static.node_id)
        self._path = directory / FILE_NAME
        self._layers: dict[str, dict[str, str]] = self._load()
        try:
            self.config = self._compose(self._layers)
        except ConfigError as exc:
            log.warning("dynamic broker configs in %s are not applied: %s", self._path, exc)
            self._layers = {entity: {} for entity in self._layers}
            self.config = self._compose({})

    def entity(self, resource_name: str) -> str | None:
        """The layer a BROKER resource name addresses (``""`` or this node's id), else None."""
        return resource_name if resource_name in (CLUSTER_DEFAULT, self.node) else None

    def layer(self, entity: str) -> dict[str, str]:
        return dict(self._layers.get(entity, {}))

    def propose(self, entity: str, configs: Mapping[str, str]) -> BrokerConfig:
        """The effective config if ``entity``'s layer became ``configs`` (already validated); nothing changes.

        Raises :class:`ConfigError` when the layers together break a constraint between configs.
        """
        return self._compose({**self._layers, entity: dict(configs)})

    def commit(self, entity: str, configs: Mapping[str, str], config: BrokerConfig) -> None:
        """Store ``entity``'s new layer durably, then make ``config`` (from :meth:`propose`) current."""
        layers = {**self._layers, entity: dict(configs)}
        document: dict[str, Any] = {
            "version": _FORMAT_VERSION,
            "cluster_default": layers.get(CLUSTER_DEFAULT, {}),
            "brokers": {name: layer for name, layer in layers.items() if name != CLUSTER_DEFAULT and layer},
        }
        document["crc32c"] = _checksum(document)
        atomic_write(self._path, json.dumps(document, indent=1, sort_keys=True).encode("utf-8"))
        self._layers = layers
        self.config = config

    def replace_layers(
        self, cluster_default: Mapping[str, str], this_broker: Mapping[str, str]
    ) -> BrokerConfig:
        """Cluster mode: the layers as ZooKeeper stores them (``/config/brokers/<default>`` and this broker's),
        each key validated (an invalid one is warned about and left out); nothing is written here, ZooKeeper
        is the store. Returns the new effective config."""
        layers: dict[str, dict[str, str]] = {}
        for entity, configs in ((CLUSTER_DEFAULT, cluster_default), (self.node, this_broker)):
            layers[entity] = {}
            for name, value in configs.items():
                try:
                    layers[entity].update(validate_broker_configs({name: value}))
                except ConfigError as exc:
                    log.warning("ignoring dynamic broker config %s=%s from ZooKeeper: %s", name, value, exc)
        try:
            config = self._compose(layers)
        except ConfigError as exc:
            log.warning("dynamic broker configs from ZooKeeper are not applied: %s", exc)
            return self.config
        self._layers = layers
        self.config = config
        return config

    def _compose(self, layers: Mapping[str, Mapping[str, str]]) -> BrokerConfig:
        return self.static.with_dynamic(layers.get(CLUSTER_DEFAULT, {}), layers.get(self.node, {}))

    def _unreadable(self, exc: Exception) -> dict[str, dict[str, str]]:
        log.warning(
            "dynamic broker configs in %s are unreadable and not applied (%s: %s); the broker runs on its "
            "static configs and the next dynamic config change replaces the file",
            self._path,
            type(exc).__name__,
            exc,
        )
        return {}

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            document: Any = json.loads(self._path.read_text(encoding="utf-8"))
            if not isinstance(document, dict):
                raise TypeError(f"a JSON {type(document).__name__}, not an object")
            version = document.get("version")
            if version not in _FORMAT_VERSIONS:
                raise ValueError(f"unsupported format version {version!r}")
            if version >= 2 and document.get("crc32c") != _checksum(document):
                raise ValueError(
                    f"CRC32C {_checksum(document)} of the layers, {document.get('crc32c')} stored"
                )
            stored = {CLUSTER_DEFAULT: document.get("cluster_default", {}), **document.get("brokers", {})}
            if not all(
                isinstance(configs, dict) and all(isinstance(v, str) for v in configs.values())
                for configs in stored.values()
            ):
                raise TypeError("a layer is not a map of config names to strings")
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            return self._unreadable(exc)
        layers: dict[str, dict[str, str]] = {}
        for entity, configs in stored.items():
            layers[entity] = {}
            for name, value in configs.items():
                try:
                    layers[entity].update(validate_broker_configs({name: value}))
                except ConfigError as exc:
                    log.warning("ignoring stored dynamic broker config %s=%s: %s", name, value, exc)
        return layers
