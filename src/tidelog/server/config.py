"""Broker and topic configuration: ``server.properties`` and ``--set`` in, a frozen typed config out.

Invariants:

- ``server.properties`` is read as Java's ``Properties.load`` reads it (``#``/``!`` comments, ``key=value``,
  ``key: value`` or ``key value``, backslash line continuations, ``\\t \\n \\r \\f \\uXXXX`` escapes), in
  UTF-8. A key given twice keeps its last value (with a warning); ``--set`` overrides the file.
- :func:`load_broker_config` either returns a fully validated :class:`BrokerConfig` plus warnings (unknown
  keys, keys tidelog ignores, duplicates), or raises :class:`ConfigError` whose message names the key and
  where it was set. Nothing is logged here; the caller logs the warnings.
- Precedence is Kafka's: ``log.retention.ms`` > ``.minutes`` > ``.hours`` (a negative result means no
  limit, -1); ``log.roll.ms`` > ``.hours``; ``log.roll.jitter.ms`` > ``.hours``; ``log.dirs`` > ``log.dir``;
  ``node.id`` = ``broker.id`` (they must agree when both are set); ``log.flush.interval.ms`` falls back to
  ``log.flush.scheduler.interval.ms``. The head attribute of each chain holds the resolved value.
- A topic's effective config is its override if set, else its first broker synonym's resolved value, else
  the topic default. :func:`describe_topic_configs` / :func:`describe_broker_configs` report values,
  sources and synonyms exactly as Kafka's ``ConfigHelper`` does, so ``kafka-configs --describe`` output
  reads the same.
- Dynamic broker configs (KIP-226) are layers over the static config (:meth:`BrokerConfig.with_dynamic`);
  precedence is Kafka's: topic override > this broker's dynamic config > dynamic cluster default > static
  (``server.properties`` / ``--set``) > default. Only ``DYNAMIC_BROKER_CONFIGS`` are reported writable.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.server.config_defs import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigType,
    ConfigValue,
    TopicConfigDef,
    invalid_value,
    render,
    topic_def,
)

if TYPE_CHECKING:
    from tidelog.storage.config import LogConfig

__all__ = [
    "AlterConfigOp",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Listener",
    "PropertyEntry",
    "apply_config_operations",
    "apply_incremental_alter",
    "describe_broker_configs",
    "describe_topic_configs",
    "effective_topic_configs",
    "load_broker_config",
    "log_config_for_topic",
    "parse_broker_config",
    "parse_properties",
    "parse_set_option",
    "read_properties_file",
    "validate_topic_configs",
]


# -- Java properties -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PropertyEntry:
    """One ``key=value`` with where it came from (``server.properties:12`` or ``--set``)."""

    key: str
    value: str
    where: str


_NATURAL_LINES = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str, *, source: str = "<properties>") -> list[PropertyEntry]:
    """Parse Java ``.properties`` text into entries in file order (duplicates kept; the caller decides)."""
    lines = _NATURAL_LINES.split(text)
    entries: list[PropertyEntry] = []
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue  # blank or comment line (a comment never continues onto the next line)
        while _ends_with_escaped_newline(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WHITESPACE)
            i += 1
        where = f"{source}:{lineno}"
        key, value = _split_key_value(line)
        entries.append(PropertyEntry(_unescape(key, where), _unescape(value, where), where))
    return entries


def _ends_with_escaped_newline(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    while pos < len(line):
        ch = line[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        pos += 1
    key = line[:pos]
    rest = line[pos:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\":
            out.append(ch)
            pos += 1
            continue
        if pos + 1 >= len(text):  # a lone trailing backslash (continuation at end of file): dropped
            break
        nxt = text[pos + 1]
        if nxt == "u":
            digits = text[pos + 2 : pos + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"{where}: malformed \\uxxxx encoding")
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


def read_properties_file(path: Path) -> list[PropertyEntry]:
    """Read and parse a properties file; an unreadable or non-UTF-8 file raises :class:`ConfigError`."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid UTF-8 (byte offset {exc.start})") from exc
    return parse_properties(text, source=str(path))


def parse_set_option(option: str) -> tuple[str, str]:
    """``"key=value"`` (as given to ``--set``) -> ``(key, value)``; the key must be non-empty."""
    key, sep, value = option.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {option!r}")
    return key, value


# -- listeners -----------------------------------------------------------------------------------------

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[0-9A-Za-z\-._]*):(-?[0-9]+)$")
_SUPPORTED_PROTOCOLS = ("PLAINTEXT",)
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint. ``host`` is bare (no IPv6 brackets); ``""`` means all interfaces."""

    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _parse_protocol_map(raw: str) -> dict[str, str]:
    name = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        listener, sep, protocol = item.partition(":")
        if not sep or not listener.strip() or not protocol.strip():
            raise invalid_value(name, raw, f"Expected NAME:PROTOCOL pairs, got {item!r}")
        out[listener.strip().upper()] = protocol.strip().upper()
    return out


def _parse_listeners(name: str, raw: str, protocol_map: Mapping[str, str]) -> tuple[Listener, ...]:
    listeners: list[Listener] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        match = _LISTENER_RE.match(item)
        if match is None:
            raise invalid_value(name, raw, f"Unable to parse {item!r} as NAME://host:port")
        listener_name, host, port_text = match.group(1).upper(), match.group(2), match.group(3)
        host = host[1:-1] if host.startswith("[") else host
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise invalid_value(name, raw, f"Port {port} of {item!r} is not in [0, 65535]")
        protocol = protocol_map.get(listener_name)
        if protocol is None:
            raise invalid_value(
                name,
                raw,
                f"No security protocol defined for listener {listener_name} (see listener.security.protocol.map)",
            )
        if any(existing.name == listener_name for existing in listeners):
            raise invalid_value(
                name, raw, f"Each listener must have a different name, {listener_name} is repeated"
            )
        listeners.append(Listener(listener_name, host, port, protocol))
    return tuple(listeners)


# -- BrokerConfig ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's static configuration; one attribute per Kafka key (dots become underscores).

    Attributes at the head of a precedence chain hold the resolved value (``log_retention_ms``,
    ``log_roll_ms``, ``log_roll_jitter_ms``, ``log_flush_interval_ms``, ``node_id``, ``log_dirs``); the other
    members of a chain keep what was configured. ``originals`` holds every key as given (file, then
    ``--set``), which is what DescribeConfigs reports as ``STATIC_BROKER_CONFIG``.
    """

    # server basics
    node_id: int
    broker_id: int | None
    cluster_id: str | None
    broker_rack: str | None
    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...]
    listener_security_protocol_map: Mapping[str, str]
    inter_broker_listener_name: str | None
    security_inter_broker_protocol: str
    controller_listener_names: tuple[str, ...]
    process_roles: tuple[str, ...]
    controller_quorum_voters: tuple[str, ...]
    controller_quorum_bootstrap_servers: tuple[str, ...]
    metadata_log_dir: str | None
    inter_broker_protocol_version: str | None
    log_message_format_version: str | None
    zookeeper_connect: str | None
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int | None
    # threads and sockets
    num_network_threads: int
    num_io_threads: int
    background_threads: int
    queued_max_requests: int
    num_recovery_threads_per_data_dir: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    socket_request_max_bytes: int
    socket_listen_backlog_size: int
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    # topics
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    auto_leader_rebalance_enable: bool
    unclean_leader_election_enable: bool
    min_insync_replicas: int
    compression_type: str
    message_max_bytes: int
    fetch_max_bytes: int
    # log
    log_dirs: tuple[Path, ...]
    log_dir: str
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_hours: int
    log_roll_jitter_ms: int
    log_roll_jitter_hours: int
    log_retention_ms: int
    log_retention_minutes: int | None
    log_retention_hours: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_cleanup_policy: tuple[str, ...]
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_delete_retention_ms: int
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_cleaner_io_max_bytes_per_second: float
    log_index_interval_bytes: int
    log_index_size_max_bytes: int
    log_preallocate: bool
    log_flush_interval_messages: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    log_segment_delete_delay_ms: int
    log_message_timestamp_type: str
    log_message_timestamp_difference_max_ms: int
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    # consumer groups and offsets
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_topic_segment_bytes: int
    offsets_topic_compression_codec: int
    offsets_load_buffer_size: int
    offsets_commit_timeout_ms: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offset_metadata_max_bytes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    group_coordinator_rebalance_protocols: tuple[str, ...]
    group_consumer_session_timeout_ms: int
    group_consumer_min_session_timeout_ms: int
    group_consumer_max_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    group_consumer_min_heartbeat_interval_ms: int
    group_consumer_max_heartbeat_interval_ms: int
    group_consumer_max_size: int
    group_consumer_assignors: tuple[str, ...]
    # transactions and producer ids
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_state_log_load_buffer_size: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    max_incremental_fetch_session_cache_slots: int
    # replication and purgatories
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_lag_time_max_ms: int
    replica_socket_timeout_ms: int
    replica_socket_receive_buffer_bytes: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_replica_fetchers: int
    fetch_purgatory_purge_interval_requests: int
    producer_purgatory_purge_interval_requests: int
    delete_records_purgatory_purge_interval_requests: int
    # every key as configured (file then --set), for DescribeConfigs
    originals: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    # dynamic broker configs laid over the originals (see with_dynamic), for DescribeConfigs
    dynamic_default_configs: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    dynamic_broker_configs: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    # ---- construction ----

    @classmethod
    def from_mapping(cls, props: Mapping[str, str]) -> BrokerConfig:
        """A config from Kafka-named string properties (warnings dropped); for tests and embedding."""
        return parse_broker_config(props)[0]

    def with_overrides(self, props: Mapping[str, str]) -> BrokerConfig:
        """This config re-parsed with ``props`` laid over its originals."""
        return parse_broker_config({**self.originals, **props})[0]

    def with_dynamic(self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> BrokerConfig:
        """The effective config: the originals (static), then ``cluster_default``, then ``per_broker``.

        As Kafka's ``DynamicBrokerConfig.overrideProps``, a dynamic key first removes its synonyms from the
        layers below (a dynamic ``log.retention.ms`` wins over a static ``log.retention.hours``). Any
        dynamic layers this config already has are replaced. Raises :class:`ConfigError` naming the key.
        """
        entries = {key: PropertyEntry(key, value, "static config") for key, value in self.originals.items()}
        layers = ((cluster_default, "dynamic cluster default"), (per_broker, "dynamic broker config"))
        for layer, where in layers:
            for key, value in layer.items():
                for synonym in _broker_synonym_group(key):
                    entries.pop(synonym, None)
                entries[key] = PropertyEntry(key, value, where)
        config, _warnings = parse_broker_config(list(entries.values()))
        return replace(
            config,
            originals=self.originals,
            dynamic_default_configs=dict(cluster_default),
            dynamic_broker_configs=dict(per_broker),
        )

    # ---- derived values ----

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        """The listeners this broker serves clients on (``controller.listener.names`` excluded)."""
        controllers = {name.upper() for name in self.controller_listener_names}
        return tuple(listener for listener in self.listeners if listener.name not in controllers)

    @property
    def listener_host_port(self) -> tuple[str, int]:
        """``(host, port)`` to bind for the first broker listener; an empty host becomes ``0.0.0.0``."""
        listener = self.broker_listeners[0]
        return (listener.host or "0.0.0.0", listener.port)

    def advertised_listener(self, listener_name: str | None = None) -> Listener:
        """The advertised endpoint of ``listener_name`` (default: the first broker listener)."""
        name = (listener_name or self.broker_listeners[0].name).upper()
        for listener in self.advertised_listeners:
            if listener.name == name:
                return listener
        for listener in self.broker_listeners:
            if listener.name == name:
                return listener
        raise KeyError(name)

    def advertised_host_port(
        self, bound_port: int | None = None, listener_name: str | None = None
    ) -> tuple[str, int]:
        """``(host, port)`` clients are told to connect to (Metadata's broker endpoint).

        A wildcard host (empty, ``0.0.0.0``, ``::``) in a listener that is not explicitly advertised
        becomes this machine's host name, as in Kafka; a port of 0 becomes ``bound_port`` (the port
        the listener actually got).
        """
        listener = self.advertised_listener(listener_name)
        host = listener.host
        if host in _WILDCARD_HOSTS:
            host = socket.gethostname()
        port = listener.port
        if port == 0 and bound_port is not None:
            port = bound_port
        return (host, port)

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


_RESOLVED_ATTRS = frozenset(
    {"node_id", "listeners", "advertised_listeners", "listener_security_protocol_map", "log_dirs"}
    | {"log_roll_ms", "log_roll_jitter_ms", "log_retention_ms", "log_flush_interval_ms"}
)


def _merge(entries: Iterable[PropertyEntry], warnings: list[str]) -> dict[str, PropertyEntry]:
    merged: dict[str, PropertyEntry] = {}
    for entry in entries:
        previous = merged.get(entry.key)
        if previous is not None and previous.where != "--set" and entry.where != "--set":
            warnings.append(
                f"{entry.key} is set twice ({previous.where} and {entry.where}); the last value wins"
            )
        merged[entry.key] = entry
    return merged


def _located(exc: ConfigError, where: str) -> ConfigError:
    return ConfigError(f"{exc} ({where})", key=exc.key)


def parse_broker_config(
    props: Mapping[str, str] | Sequence[PropertyEntry],
) -> tuple[BrokerConfig, list[str]]:
    """Validate Kafka-named properties into a :class:`BrokerConfig`; returns it with warnings."""
    warnings: list[str] = []
    if isinstance(props, Mapping):
        entries: Sequence[PropertyEntry] = [PropertyEntry(k, v, "properties") for k, v in props.items()]
    else:
        entries = props
    merged = _merge(entries, warnings)

    values: dict[str, ConfigValue] = {}
    for definition in BROKER_CONFIGS.values():
        entry = merged.get(definition.name)
        if entry is None:
            values[definition.name] = definition.default_value()
            continue
        try:
            values[definition.name] = definition.parse(entry.value)
        except ConfigError as exc:
            raise _located(exc, entry.where) from None
        if definition.ignored:
            warnings.append(
                f"{definition.name} ({entry.where}) is accepted for compatibility with Kafka but has no effect in tidelog"
            )
    for key, entry in merged.items():
        if key in BROKER_CONFIGS:
            continue
        if key in TOPIC_CONFIGS:
            synonyms = topic_def(key).broker_synonyms
            hint = f"; set the broker default with {synonyms[0].name}" if synonyms else ""
            warnings.append(f"{key} ({entry.where}) is a topic-level config and is ignored here{hint}")
        else:
            warnings.append(f"unknown configuration {key!r} ({entry.where}) is ignored")

    def where(key: str) -> str:
        entry = merged.get(key)
        return entry.where if entry is not None else "default"

    attrs: dict[str, Any] = {BROKER_CONFIGS[name].attr: value for name, value in values.items()}
    _resolve(values, attrs, where)
    _check_constraints(attrs, where)
    config = BrokerConfig(**attrs, originals={key: entry.value.strip() for key, entry in merged.items()})
    return config, warnings


def _resolve(values: Mapping[str, ConfigValue], attrs: dict[str, Any], where: Callable[[str], str]) -> None:
    """Apply Kafka's precedence chains and parse structured values (listeners, protocol map, dirs)."""
    # node.id / broker.id
    node_id, broker_id = values["node.id"], values["broker.id"]
    if broker_id is not None:
        if where("node.id") != "default" and node_id != broker_id:
            raise ConfigError(
                f"node.id ({node_id}, {where('node.id')}) and broker.id ({broker_id}, {where('broker.id')}) "
                "must be equal when both are set",
                key="node.id",
            )
        attrs["node_id"] = broker_id

    # retention, roll, jitter, flush
    def chain(*links: tuple[str, int]) -> int | None:
        for name, multiplier in links:
            value = values[name]
            if value is not None:
                assert isinstance(value, int)
                return value * multiplier
        return None

    retention = chain(
        ("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)
    )
    assert retention is not None
    attrs["log_retention_ms"] = -1 if retention < 0 else retention
    attrs["log_roll_ms"] = chain(("log.roll.ms", 1), ("log.roll.hours", 3_600_000))
    attrs["log_roll_jitter_ms"] = chain(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000))
    attrs["log_flush_interval_ms"] = chain(
        ("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)
    )

    # log.dirs / log.dir
    log_dirs = values["log.dirs"]
    if log_dirs is None:
        log_dir = values["log.dir"]
        assert isinstance(log_dir, str)
        if not log_dir:
            raise ConfigError(f"log.dir must not be empty ({where('log.dir')})", key="log.dir")
        log_dirs = (log_dir,)
    assert isinstance(log_dirs, tuple)
    if not log_dirs:
        raise ConfigError(f"log.dirs must name at least one directory ({where('log.dirs')})", key="log.dirs")
    if len(set(log_dirs)) != len(log_dirs):
        raise ConfigError(f"log.dirs names a directory twice ({where('log.dirs')})", key="log.dirs")
    attrs["log_dirs"] = tuple(Path(d) for d in log_dirs)
    _resolve_listeners(values, attrs, where)


def _resolve_listeners(
    values: Mapping[str, ConfigValue], attrs: dict[str, Any], where: Callable[[str], str]
) -> None:
    """Parse listeners / advertised.listeners against the protocol map; only PLAINTEXT is served yet."""
    try:
        protocol_map = _parse_protocol_map(str(values["listener.security.protocol.map"]))
    except ConfigError as exc:
        raise _located(exc, where("listener.security.protocol.map")) from None
    attrs["listener_security_protocol_map"] = protocol_map
    try:
        listeners = _parse_listeners("listeners", str(values["listeners"]), protocol_map)
    except ConfigError as exc:
        raise _located(exc, where("listeners")) from None
    attrs["listeners"] = listeners
    controllers = {name.upper() for name in attrs["controller_listener_names"]}
    broker_listeners = [listener for listener in listeners if listener.name not in controllers]
    if not broker_listeners:
        raise ConfigError(
            f"listeners must contain at least one broker (non-controller) listener ({where('listeners')})",
            key="listeners",
        )
    ports = [listener.port for listener in listeners if listener.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"listeners use the same port twice ({where('listeners')})", key="listeners")
    for listener in broker_listeners:
        if listener.security_protocol not in _SUPPORTED_PROTOCOLS:
            raise ConfigError(
                f"listeners: listener {listener.name} uses security protocol {listener.security_protocol}, "
                f"which tidelog does not support yet (only {', '.join(_SUPPORTED_PROTOCOLS)}) ({where('listeners')})",
                key="listeners",
            )

    advertised_raw = values["advertised.listeners"]
    advertised: tuple[Listener, ...] = ()
    if advertised_raw is not None:
        try:
            advertised = _parse_listeners("advertised.listeners", str(advertised_raw), protocol_map)
        except ConfigError as exc:
            raise _located(exc, where("advertised.listeners")) from None
        names = {listener.name for listener in listeners}
        for listener in advertised:
            if listener.name not in names:
                raise ConfigError(
                    f"advertised.listeners: listener {listener.name} is not one of listeners "
                    f"({', '.join(sorted(names))}) ({where('advertised.listeners')})",
                    key="advertised.listeners",
                )
            if listener.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"advertised.listeners cannot use the nonroutable meta-address {listener.host}; use a "
                    f"routable IP address or host name ({where('advertised.listeners')})",
                    key="advertised.listeners",
                )
    attrs["advertised_listeners"] = advertised

    inter_broker = values["inter.broker.listener.name"]
    if inter_broker is not None and str(inter_broker).upper() not in {
        listener.name for listener in listeners
    }:
        raise ConfigError(
            f"inter.broker.listener.name {inter_broker} must be one of the listener names "
            f"({where('inter.broker.listener.name')})",
            key="inter.broker.listener.name",
        )


_ORDERED_PAIRS = (
    # (smaller, larger): Kafka's cross-checks
    ("group.min.session.timeout.ms", "group.max.session.timeout.ms"),
    ("log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("replica.fetch.wait.max.ms", "replica.lag.time.max.ms"),
    ("group.consumer.min.session.timeout.ms", "group.consumer.session.timeout.ms"),
    ("group.consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("group.consumer.min.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms"),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms"),
)


def _check_constraints(attrs: Mapping[str, Any], where: Callable[[str], str]) -> None:
    for small, large in _ORDERED_PAIRS:
        small_value = attrs[BROKER_CONFIGS[small].attr]
        large_value = attrs[BROKER_CONFIGS[large].attr]
        if small_value > large_value:
            blamed = small if where(small) != "default" else large
            raise ConfigError(
                f"{small} ({small_value}, {where(small)}) must not be greater than "
                f"{large} ({large_value}, {where(large)})",
                key=blamed,
            )


def load_broker_config(
    path: Path | None = None, overrides: Mapping[str, str] | Sequence[tuple[str, str]] = ()
) -> tuple[BrokerConfig, list[str]]:
    """Read ``path`` (a ``server.properties``, optional), lay ``--set`` overrides over it, validate.

    Returns the config and warnings (unknown keys, ignored keys, duplicates) for the caller to log;
    raises :class:`ConfigError` naming the key (and file:line or ``--set``) for any bad value.
    """
    entries: list[PropertyEntry] = []
    if path is not None:
        entries.extend(read_properties_file(path))
    pairs = overrides.items() if isinstance(overrides, Mapping) else overrides
    entries.extend(PropertyEntry(key, value, "--set") for key, value in pairs)
    return parse_broker_config(entries)


# -- topic configs ---------------------------------------------------------------------------------------


def _topic_defs() -> Iterable[TopicConfigDef]:
    for definition in TOPIC_CONFIGS.values():
        assert isinstance(definition, TopicConfigDef)
        yield definition


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
    for definition in _topic_defs():
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


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' ``ConfigOperation`` (Kafka's ``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_config_operations(
    current: Mapping[str, str],
    operations: Sequence[tuple[str, AlterConfigOp | int, str | None]],
    *,
    definition_of: Callable[[str], ConfigDef],
    list_base: Callable[[str, Mapping[str, str | None]], tuple[str, ...]],
    null_set: str | None = None,
) -> dict[str, str | None]:
    """IncrementalAlterConfigs ``operations`` applied to a level's ``current`` configs (not validated).

    Duplicate keys and unknown operations are refused as Kafka does; SET of a null value too when
    ``null_set`` names the level ("topic"). APPEND / SUBTRACT apply only to list configs and start from
    ``list_base(name, updated_so_far)``; every other kind of config refuses them.
    """
    names = [name for name, _, _ in operations]
    if len(set(names)) != len(names):
        raise ConfigError("Error due to duplicate config keys")
    updated: dict[str, str | None] = dict(current)
    for name, op_code, value in operations:
        definition = definition_of(name)
        try:
            op = AlterConfigOp(op_code)
        except ValueError:
            raise ConfigError(
                f"Unknown config operation {op_code} for config key: {name}", key=name
            ) from None
        if op is AlterConfigOp.SET:
            if value is None and null_set is not None:
                raise ConfigError(f"Null value not supported for {null_set} configs: {name}", key=name)
            updated[name] = value
        elif op is AlterConfigOp.DELETE:
            updated.pop(name, None)
        else:
            if definition.type is not ConfigType.LIST:
                verb = "append" if op is AlterConfigOp.APPEND else "subtract"
                raise ConfigError(f"Config value {verb} is not allowed for config key: {name}", key=name)
            items = list(list_base(name, updated))
            given = parse_list(definition, value or "")
            if op is AlterConfigOp.APPEND:
                items.extend(item for item in given if item not in items)
            else:
                items = [item for item in items if item not in given]
            updated[name] = ",".join(items)
    return updated


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


def parse_list(definition: ConfigDef, raw: str) -> tuple[str, ...]:
    """A list config's items (none for a blank value)."""
    value = definition.parse(raw) if raw.strip() else ()
    assert isinstance(value, tuple)
    return value


# -- DescribeConfigs -----------------------------------------------------------------------------------


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


def _broker_synonym_group(name: str) -> tuple[str, ...]:
    """Kafka's ``DynamicBrokerConfig.brokerConfigSynonyms``: the chain ``name`` belongs to."""
    for definition in _topic_defs():
        group = tuple(s.name for s in definition.broker_synonyms)
        if len(group) > 1 and name in group:
            return group
    return (name,)


def _broker_synonyms(
    broker: BrokerConfig, head: str, sensitive: bool, *, per_broker: bool = True
) -> list[ConfigSynonym]:
    """Kafka's ``ConfigHelper.configSynonyms``: dynamic per-broker values, dynamic cluster defaults, static
    values, then defaults, from ``head`` on (without the per-broker values when ``per_broker`` is false)."""
    chain = _broker_synonym_group(head)
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


def _wanted(definitions: Iterable[ConfigDef], names: Iterable[str] | None) -> list[ConfigDef]:
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
        assert isinstance(definition, TopicConfigDef)
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


# -- storage -----------------------------------------------------------------------------------------------


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
