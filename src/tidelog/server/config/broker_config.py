"""BrokerConfig: ``server.properties`` and ``--set`` in, a frozen typed broker config out.

Invariants:

- A key given twice keeps its last value (with a warning); ``--set`` overrides the file.
- :func:`load_broker_config` either returns a fully validated :class:`BrokerConfig` plus warnings (unknown
  keys, keys tidelog ignores, duplicates), or raises :class:`~tidelog.server.config.errors.ConfigError`
  whose message names the key and where it was set. Nothing is logged here; the caller logs the warnings.
- Precedence is Kafka's: ``log.retention.ms`` > ``.minutes`` > ``.hours`` (a negative result means no
  limit, -1); ``log.roll.ms`` > ``.hours``; ``log.roll.jitter.ms`` > ``.hours``; ``log.dirs`` > ``log.dir``;
  ``node.id`` = ``broker.id`` (they must agree when both are set); ``log.flush.interval.ms`` falls back to
  ``log.flush.scheduler.interval.ms``. The head attribute of each chain holds the resolved value.
- Dynamic broker configs (KIP-226) are layers over the static config (:meth:`BrokerConfig.with_dynamic`);
  precedence is Kafka's: this broker's dynamic config > dynamic cluster default > static
  (``server.properties`` / ``--set``) > default; a dynamic key removes its synonyms from the layers below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .broker_defs import BROKER_CONFIGS
from .errors import ConfigError, located
from .listeners import Listener, client_listeners, resolve_listeners, split_listener_override
from .properties import PropertyEntry, read_properties_file
from .topic_defs import TOPIC_CONFIGS, broker_synonym_group, topic_def
from .values import ConfigValue

LISTENER_PREFIX = "listener.name."
"""Per-listener overrides (``listener.name.<listener>.<key>``), as Kafka names them."""

__all__ = ["LISTENER_PREFIX", "BrokerConfig", "load_broker_config", "parse_broker_config"]


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
    # client quotas
    quota_window_num: int
    quota_window_size_seconds: int
    controller_quota_window_num: int
    controller_quota_window_size_seconds: int
    # SASL
    sasl_enabled_mechanisms: tuple[str, ...]
    sasl_mechanism_inter_broker_protocol: str
    sasl_jaas_config: str | None
    sasl_server_max_receive_size: int
    connections_max_reauth_ms: int
    # topics
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    unclean_leader_election_enable: bool
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
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
    log_max_open_segments: int | None
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
    group_share_record_lock_duration_ms: int
    group_share_min_record_lock_duration_ms: int
    group_share_max_record_lock_duration_ms: int
    group_share_delivery_count_limit: int
    group_share_partition_max_record_locks: int
    group_share_session_timeout_ms: int
    group_share_heartbeat_interval_ms: int
    group_share_max_size: int
    share_coordinator_state_topic_num_partitions: int
    errors_deadletterqueue_auto_create_topics_enable: bool
    errors_deadletterqueue_topic_name_prefix: str
    share_coordinator_state_topic_replication_factor: int
    share_coordinator_state_topic_segment_bytes: int
    share_coordinator_load_buffer_size: int
    # transactions and producer ids
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_state_log_load_buffer_size: int
    transaction_max_timeout_ms: int
    transaction_two_phase_commit_enable: bool
    request_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    max_incremental_fetch_session_cache_slots: int
    min_incremental_fetch_session_eviction_ms: int
    # observability
    metrics_listener: str | None
    log_format: str
    # replication and purgatories
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_alter_log_dirs_io_max_bytes_per_second: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_lag_time_max_ms: int
    replica_socket_timeout_ms: int
    replica_socket_receive_buffer_bytes: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_replica_fetchers: int
    leader_replication_throttled_rate: int
    follower_replication_throttled_rate: int
    replication_quota_window_num: int
    replication_quota_window_size_seconds: int
    fetch_purgatory_purge_interval_requests: int
    producer_purgatory_purge_interval_requests: int
    delete_records_purgatory_purge_interval_requests: int
    # security: TLS (security/tls_config.py builds the contexts; listener.name.<name>.ssl.* override per listener)
    ssl_keystore_type: str
    ssl_keystore_location: str | None
    ssl_keystore_password: str | None
    ssl_key_password: str | None
    ssl_keystore_key: str | None
    ssl_keystore_certificate_chain: str | None
    ssl_truststore_type: str
    ssl_truststore_location: str | None
    ssl_truststore_password: str | None
    ssl_truststore_certificates: str | None
    ssl_client_auth: str
    ssl_protocol: str
    ssl_enabled_protocols: tuple[str, ...]
    ssl_cipher_suites: tuple[str, ...]
    ssl_endpoint_identification_algorithm: str
    ssl_principal_mapping_rules: str
    ssl_keymanager_algorithm: str | None
    ssl_trustmanager_algorithm: str | None
    ssl_secure_random_implementation: str | None
    # security: authorization
    authorizer_class_name: str
    super_users: str | None
    allow_everyone_if_no_acl_found: bool
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
                for synonym in broker_synonym_group(key):
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
        return client_listeners(self.listeners, self.controller_listener_names)

    def advertised_listener(self, listener_name: str | None = None) -> Listener:
        """How ``listener_name`` (default: the first broker listener) is advertised: its
        ``advertised.listeners`` entry, else the listener itself (see ``listeners.advertised_endpoint``
        for the host and port clients are finally told)."""
        name = (listener_name or self.broker_listeners[0].name).upper()
        for listener in self.advertised_listeners:
            if listener.name == name:
                return listener
        for listener in self.broker_listeners:
            if listener.name == name:
                return listener
        raise KeyError(name)

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


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


def _listener_override(key: str, entry: PropertyEntry) -> bool:
    """Whether ``key`` is a valid ``listener.name.<name>.ssl.*`` / ``sasl.*`` override (kept in ``originals``,
    read by the security modules); its value is checked as the base key's, the error naming ``key``."""
    split = split_listener_override(key)
    if split is None or split[1] not in BROKER_CONFIGS:
        return False
    try:
        BROKER_CONFIGS[split[1]].parse(entry.value)
    except ConfigError as exc:
        raise located(ConfigError(str(exc).replace(split[1], key, 1), key=key), entry.where) from None
    return True


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
            raise located(exc, entry.where) from None
        if definition.ignored:
            warnings.append(
                f"{definition.name} ({entry.where}) is accepted for compatibility with Kafka but has no effect in tidelog"
            )
    for key, entry in merged.items():
        if key in BROKER_CONFIGS:
            continue
        if _listener_override(key, entry):  # read by security/tls_config.py and security/sasl_config.py
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
    attrs.update(resolve_listeners(values, attrs["controller_listener_names"], where))


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
