"""Configuration definitions: every broker and topic config tidelog knows, with Kafka's names and defaults.

Invariants:

- Names, types and defaults are Apache Kafka's (``KafkaConfig`` / ``ServerLogConfigs`` / ``TopicConfig``,
  3.x line), except where the docstring of :data:`BROKER_CONFIGS` says otherwise (tidelog is single-node
  by default, so it binds loopback, uses ``node.id=1`` and replication factor 1 for internal topics).
- A definition parses a raw string into exactly one Python type (:data:`PYTHON_TYPES`) and validates it;
  any failure raises :class:`ConfigError` whose message names the key, as Kafka's ``ConfigException``
  does (``Invalid value X for configuration K: reason``).
- Each topic config lists its broker synonyms in Kafka's order (``retention.ms`` <- ``log.retention.ms``,
  ``log.retention.minutes``, ``log.retention.hours``); the first synonym that is set wins, and a synonym in
  a coarser unit carries the multiplier that converts it to the topic config's unit.
- ``ConfigType`` and ``ConfigSource`` numbers are the ones DescribeConfigs puts on the wire.

This module is pure data and parsing: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = [
    "BROKER_CONFIGS",
    "INT_MAX",
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "BrokerSynonym",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "GreaterThan",
    "OneOf",
    "Range",
    "SubsetOf",
    "TopicConfigDef",
    "Validator",
]

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
SHORT_MIN: Final = -(2**15)
SHORT_MAX: Final = 2**15 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1

_HOUR_MS: Final = 3_600_000
_MINUTE_MS: Final = 60_000


class ConfigError(KafkaProtocolError):
    """A configuration value (or name) is not acceptable; the message names the key.

    Carries ``INVALID_CONFIG`` so CreateTopics / AlterConfigs handlers can answer with it directly.
    """

    error_code = ErrorCode.INVALID_CONFIG

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ConfigType(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` (the ``ConfigType`` field, v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


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


PYTHON_TYPES: Final[dict[ConfigType, str]] = {
    ConfigType.BOOLEAN: "bool",
    ConfigType.STRING: "str",
    ConfigType.INT: "int",
    ConfigType.SHORT: "int",
    ConfigType.LONG: "int",
    ConfigType.DOUBLE: "float",
    ConfigType.LIST: "tuple[str, ...]",
    ConfigType.CLASS: "str",
    ConfigType.PASSWORD: "str",
}

ConfigValue = bool | int | float | str | tuple[str, ...] | None


def invalid_value(name: str, raw: object, problem: str) -> ConfigError:
    """Kafka's ``ConfigException(name, value, message)`` wording."""
    return ConfigError(f"Invalid value {raw} for configuration {name}: {problem}", key=name)


# -- validators --------------------------------------------------------------------------------------


class Validator:
    """Checks a parsed value; raises :class:`ConfigError` naming the key."""

    def __call__(self, name: str, value: ConfigValue) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Range(Validator):
    """Numeric bounds, inclusive; ``None`` for an open end (Kafka's ``Range.atLeast`` / ``between``)."""

    min: float | None = None
    max: float | None = None

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, int | float)
        if self.min is not None and value < self.min:
            raise invalid_value(name, value, f"Value must be at least {_num(self.min)}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, value, f"Value must be no more than {_num(self.max)}")

    def describe(self) -> str:
        if self.max is None:
            return f"[{_num(self.min)},...]"
        if self.min is None:
            return f"[...,{_num(self.max)}]"
        return f"[{_num(self.min)},...,{_num(self.max)}]"


def at_least(minimum: float) -> Range:
    return Range(min=minimum)


def between(minimum: float, maximum: float) -> Range:
    return Range(min=minimum, max=maximum)


@dataclass(frozen=True, slots=True)
class GreaterThan(Validator):
    """An exclusive numeric lower bound (a rate must be positive: zero would mean "never")."""

    bound: float

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, int | float)
        if not value > self.bound:
            raise invalid_value(name, value, f"Value must be greater than {_num(self.bound)}")

    def describe(self) -> str:
        return f"({_num(self.bound)},...]"


def _num(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True, slots=True)
class OneOf(Validator):
    """The value must be one of ``choices`` (Kafka's ``ValidString`` / case-insensitive variant)."""

    choices: tuple[str, ...]
    case_sensitive: bool = True

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, str)
        ok = (
            value in self.choices
            if self.case_sensitive
            else value.lower() in {c.lower() for c in self.choices}
        )
        if not ok:
            raise invalid_value(name, value, f"String must be one of: {', '.join(self.choices)}")

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class SubsetOf(Validator):
    """Every element of a list value must be one of ``choices`` (Kafka's ``ValidList``)."""

    choices: tuple[str, ...]
    allow_empty: bool = False

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, tuple)
        if not value and not self.allow_empty:
            raise invalid_value(name, "", f"Value must be a non-empty list of: {', '.join(self.choices)}")
        for item in value:
            if item not in self.choices:
                raise invalid_value(
                    name, ",".join(value), f"String must be one of: {', '.join(self.choices)}"
                )

    def describe(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class Matches(Validator):
    """A string value must match ``pattern`` (full match)."""

    pattern: str
    explanation: str

    def __call__(self, name: str, value: ConfigValue) -> None:
        if value is None:
            return
        assert isinstance(value, str)
        if re.fullmatch(self.pattern, value) is None:
            raise invalid_value(name, value, self.explanation)

    def describe(self) -> str:
        return self.explanation


# -- definitions ---------------------------------------------------------------------------------------


_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")
_INT_RE = re.compile(r"[+-]?\d+")


def parse_typed(name: str, config_type: ConfigType, raw: str) -> ConfigValue:
    """Parse ``raw`` as Kafka's ``ConfigDef.parseType`` does (values are trimmed first)."""
    trimmed = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        lowered = trimmed.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        raise invalid_value(name, raw, "Expected value to be either true or false")
    if config_type in (ConfigType.STRING, ConfigType.CLASS, ConfigType.PASSWORD):
        return trimmed
    if config_type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        lo, hi = {
            ConfigType.INT: (INT_MIN, INT_MAX),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
        }[config_type]
        if _INT_RE.fullmatch(trimmed) is None or not lo <= int(trimmed) <= hi:
            raise invalid_value(name, raw, f"Not a number of type {config_type.name}")
        return int(trimmed)
    if config_type is ConfigType.DOUBLE:
        try:
            number = float(trimmed)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise invalid_value(name, raw, "Not a number of type DOUBLE")
        return number
    if config_type is ConfigType.LIST:
        if not trimmed:
            return ()
        items = tuple(_COMMA_WITH_WHITESPACE.split(trimmed))
        if any(not item for item in items):
            raise invalid_value(name, raw, "List contains an empty element")
        return items
    raise invalid_value(name, raw, f"Unsupported config type {config_type.name}")  # pragma: no cover


def render(config_type: ConfigType, value: ConfigValue) -> str | None:
    """A parsed value back to Kafka's string form (``ConfigDef.convertToString``)."""
    if value is None:
        return None
    if config_type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if config_type is ConfigType.LIST:
        assert isinstance(value, tuple)
        return ",".join(value)
    if config_type is ConfigType.DOUBLE:
        assert isinstance(value, float | int)
        return repr(float(value))
    return str(value)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One configuration key: its type, default (as Kafka writes it), validator and documentation.

    ``ignored`` marks Kafka keys that tidelog accepts so a Kafka ``server.properties`` loads unchanged,
    but that have no effect here (KRaft controller settings and the like); loading one yields a warning.
    """

    name: str
    type: ConfigType
    default: str | None
    doc: str
    validator: Validator | None = None
    ignored: bool = False

    @property
    def attr(self) -> str:
        """The snake_case attribute name (``log.retention.ms`` -> ``log_retention_ms``)."""
        return self.name.replace(".", "_").replace("-", "_")

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, raw: str) -> ConfigValue:
        """Parse and validate ``raw``; raises :class:`ConfigError` naming this key."""
        value = parse_typed(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value

    def default_value(self) -> ConfigValue:
        return None if self.default is None else self.parse(self.default)


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker key that supplies a topic config's default; ``multiplier`` converts its unit (hours -> ms)."""

    name: str
    multiplier: int = 1


@dataclass(frozen=True, slots=True)
class TopicConfigDef(ConfigDef):
    """A topic-level config; its default comes from the first set broker synonym, else ``default``."""

    broker_synonyms: tuple[BrokerSynonym, ...] = field(default=())

    @property
    def read_only(self) -> bool:
        return False


def _defs(items: Sequence[ConfigDef]) -> dict[str, ConfigDef]:
    out: dict[str, ConfigDef] = {}
    for item in items:
        assert item.name not in out, item.name
        if item.default is not None:
            item.parse(item.default)  # defaults must satisfy their own validators
        out[item.name] = item
    return out


B = ConfigType.BOOLEAN
S = ConfigType.STRING
I = ConfigType.INT  # noqa: E741
SH = ConfigType.SHORT
L = ConfigType.LONG
D = ConfigType.DOUBLE
LI = ConfigType.LIST

_TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CLEANUP_POLICIES: Final = ("compact", "delete")
_DEFAULT_PROTOCOL_MAP: Final = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
_LONG_MAX_STR: Final = str(LONG_MAX)
_INT_MAX_STR: Final = str(INT_MAX)
_DOUBLE_MAX_STR: Final = "1.7976931348623157E308"
"""Java's ``Double.MAX_VALUE`` as Kafka writes it (Kafka's "unlimited" for rates)."""
_NAME_RE: Final = Matches(r"[A-Za-z0-9._-]+", "Must contain only ASCII letters, digits, '.', '_' and '-'")


# fmt: off
BROKER_CONFIGS: Final[dict[str, ConfigDef]] = _defs(
    [
        # ---- server basics ----
        ConfigDef("node.id", I, "1", "The id of this broker (synonym: broker.id). tidelog default 1 (Kafka: -1).", at_least(0)),
        ConfigDef("broker.id", I, None, "Legacy synonym of node.id; if both are set they must be equal.", at_least(0)),
        ConfigDef("cluster.id", S, None, "The cluster id; generated and kept in meta.properties when unset.", _NAME_RE),
        ConfigDef("broker.rack", S, None, "Rack of the broker, for rack-aware replica assignment."),
        ConfigDef("listeners", S, "PLAINTEXT://127.0.0.1:9092", "Comma-separated NAME://host:port URIs to listen on; empty host = all interfaces, port 0 = any free port. tidelog default binds loopback."),
        ConfigDef("advertised.listeners", S, None, "Listeners published to clients in Metadata, if different from listeners."),
        ConfigDef("listener.security.protocol.map", S, _DEFAULT_PROTOCOL_MAP, "Map between listener names and security protocols, NAME:PROTOCOL pairs."),
        ConfigDef("inter.broker.listener.name", S, None, "Name of the listener used between brokers."),
        ConfigDef("security.inter.broker.protocol", S, "PLAINTEXT", "Security protocol used between brokers.", OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
        ConfigDef("controller.listener.names", LI, "", "Listener names used by a KRaft controller; tidelog does not listen on them."),
        ConfigDef("process.roles", LI, "", "KRaft roles; accepted for compatibility, tidelog is always a broker.", ignored=True),
        ConfigDef("controller.quorum.voters", LI, "", "KRaft controller quorum; accepted for compatibility.", ignored=True),
        ConfigDef("controller.quorum.bootstrap.servers", LI, "", "KRaft controller quorum; accepted for compatibility.", ignored=True),
        ConfigDef("metadata.log.dir", S, None, "KRaft metadata log directory; accepted for compatibility.", ignored=True),
        ConfigDef("inter.broker.protocol.version", S, None, "Kafka inter-broker protocol version; accepted for compatibility.", ignored=True),
        ConfigDef("log.message.format.version", S, None, "Deprecated Kafka setting; tidelog writes message format v2 only.", ignored=True),
        ConfigDef("zookeeper.connect", S, None, "ZooKeeper connection string host:port[,host:port][/chroot] (cluster mode)."),
        ConfigDef("zookeeper.session.timeout.ms", I, "18000", "ZooKeeper session timeout.", at_least(1)),
        ConfigDef("zookeeper.connection.timeout.ms", I, None, "Maximum time to wait to connect to ZooKeeper; session timeout when unset.", at_least(1)),
        # ---- threads and sockets ----
        ConfigDef("num.network.threads", I, "3", "Threads receiving requests and sending responses.", at_least(1)),
        ConfigDef("num.io.threads", I, "8", "Threads doing disk I/O for requests.", at_least(1)),
        ConfigDef("background.threads", I, "10", "Threads for background tasks.", at_least(1)),
        ConfigDef("queued.max.requests", I, "500", "Queued requests allowed before blocking the network threads.", at_least(1)),
        ConfigDef("num.recovery.threads.per.data.dir", I, "1", "Threads per data directory for log recovery at startup and flushing at shutdown.", at_least(1)),
        ConfigDef("socket.send.buffer.bytes", I, "102400", "SO_SNDBUF of the server sockets; -1 = OS default."),
        ConfigDef("socket.receive.buffer.bytes", I, "102400", "SO_RCVBUF of the server sockets; -1 = OS default."),
        ConfigDef("socket.request.max.bytes", I, "104857600", "Maximum bytes in a socket request.", at_least(1)),
        ConfigDef("socket.listen.backlog.size", I, "50", "Maximum queued pending connections (listen backlog).", at_least(1)),
        ConfigDef("connections.max.idle.ms", L, "600000", "Idle connections are closed after this many milliseconds."),
        ConfigDef("max.connections", I, _INT_MAX_STR, "Maximum connections allowed in the broker at any time.", at_least(0)),
        ConfigDef("max.connections.per.ip", I, _INT_MAX_STR, "Maximum connections allowed from each IP address.", at_least(0)),
        # ---- topics ----
        ConfigDef("num.partitions", I, "1", "Default number of partitions per topic.", at_least(1)),
        ConfigDef("default.replication.factor", I, "1", "Default replication factor for automatically created topics.", at_least(1)),
        ConfigDef("auto.create.topics.enable", B, "true", "Create a topic on first Metadata/produce for it."),
        ConfigDef("delete.topic.enable", B, "true", "Allow DeleteTopics."),
        ConfigDef("auto.leader.rebalance.enable", B, "true", "Move leadership back to preferred replicas periodically."),
        ConfigDef("unclean.leader.election.enable", B, "false", "Allow out-of-sync replicas to become leader (data loss)."),
        ConfigDef("min.insync.replicas", I, "1", "Minimum in-sync replicas for an acks=all produce to succeed.", at_least(1)),
        ConfigDef("compression.type", S, "producer", "Final compression of a topic's data; 'producer' keeps the producer's codec.", OneOf(_COMPRESSION_TYPES)),
        ConfigDef("message.max.bytes", I, "1048588", "Largest record batch size allowed.", at_least(0)),
        ConfigDef("fetch.max.bytes", I, "57671680", "Maximum bytes returned for a fetch request.", at_least(1024)),
        # ---- log ----
        ConfigDef("log.dirs", LI, None, "Comma-separated data directories; log.dir is used when unset."),
        ConfigDef("log.dir", S, "./data", "Data directory used when log.dirs is unset. tidelog default ./data (Kafka: /tmp/kafka-logs)."),
        ConfigDef("log.segment.bytes", I, "1073741824", "Maximum size of a single log segment file.", at_least(14)),
        ConfigDef("log.roll.ms", L, None, "Roll a new segment after this time; log.roll.hours when unset.", at_least(1)),
        ConfigDef("log.roll.hours", I, "168", "Roll a new segment after this many hours.", at_least(1)),
        ConfigDef("log.roll.jitter.ms", L, None, "Maximum jitter subtracted from the roll time; log.roll.jitter.hours when unset.", at_least(0)),
        ConfigDef("log.roll.jitter.hours", I, "0", "Maximum jitter, in hours, subtracted from the roll time.", at_least(0)),
        ConfigDef("log.retention.ms", L, None, "Keep a segment this long; -1 = no time limit. Wins over minutes and hours.", at_least(-1)),
        ConfigDef("log.retention.minutes", I, None, "Retention in minutes; used when log.retention.ms is unset.", at_least(-1)),
        ConfigDef("log.retention.hours", I, "168", "Retention in hours; used when log.retention.ms and .minutes are unset.", at_least(-1)),
        ConfigDef("log.retention.bytes", L, "-1", "Maximum size of a partition's log before old segments are deleted; -1 = no limit."),
        ConfigDef("log.retention.check.interval.ms", L, "300000", "How often the retention check runs.", at_least(1)),
        ConfigDef("log.cleanup.policy", LI, "delete", "Default cleanup policy: delete and/or compact.", SubsetOf(_CLEANUP_POLICIES)),
        ConfigDef("log.cleaner.enable", B, "true", "Run the log cleaner (compaction)."),
        ConfigDef("log.cleaner.threads", I, "1", "Number of log cleaner threads.", at_least(0)),
        ConfigDef("log.cleaner.min.cleanable.ratio", D, "0.5", "Minimum dirty/total ratio for a log to be cleaned.", between(0, 1)),
        ConfigDef("log.cleaner.delete.retention.ms", L, "86400000", "How long tombstones are retained in compacted topics.", at_least(0)),
        ConfigDef("log.cleaner.min.compaction.lag.ms", L, "0", "Minimum time a record stays uncompacted.", at_least(0)),
        ConfigDef("log.cleaner.max.compaction.lag.ms", L, _LONG_MAX_STR, "Maximum time a record stays ineligible for compaction.", at_least(1)),
        ConfigDef("log.cleaner.backoff.ms", L, "15000", "Sleep time of the cleaner when there is nothing to clean.", at_least(0)),
        ConfigDef("log.cleaner.dedupe.buffer.size", L, "134217728", "Memory for log deduplication across all cleaner threads."),
        ConfigDef("log.cleaner.io.buffer.size", I, "524288", "I/O buffer memory for the cleaner.", at_least(0)),
        ConfigDef("log.cleaner.io.max.bytes.per.second", D, _DOUBLE_MAX_STR, "The cleaner's reads plus writes are throttled to this many bytes per second on average (default: unlimited).", GreaterThan(0)),
        ConfigDef("log.index.interval.bytes", I, "4096", "Bytes between offset index entries.", at_least(0)),
        ConfigDef("log.index.size.max.bytes", I, "10485760", "Maximum size of an offset or time index file.", at_least(4)),
        ConfigDef("log.preallocate", B, "false", "Preallocate segment files."),
        ConfigDef("log.flush.interval.messages", L, _LONG_MAX_STR, "Messages accumulated on a partition before an fsync.", at_least(1)),
        ConfigDef("log.flush.interval.ms", L, None, "Maximum time data sits unflushed; log.flush.scheduler.interval.ms when unset.", at_least(0)),
        ConfigDef("log.flush.scheduler.interval.ms", L, _LONG_MAX_STR, "How often the flusher checks whether any log needs flushing.", at_least(0)),
        ConfigDef("log.flush.offset.checkpoint.interval.ms", I, "60000", "How often the recovery point checkpoint is written.", at_least(0)),
        ConfigDef("log.flush.start.offset.checkpoint.interval.ms", I, "60000", "How often the log start offset checkpoint is written.", at_least(0)),
        ConfigDef("log.segment.delete.delay.ms", L, "60000", "Delay before a deleted segment's files are removed (topic: file.delete.delay.ms).", at_least(0)),
        ConfigDef("log.message.timestamp.type", S, "CreateTime", "CreateTime or LogAppendTime.", OneOf(_TIMESTAMP_TYPES)),
        ConfigDef("log.message.timestamp.difference.max.ms", L, _LONG_MAX_STR, "Deprecated: maximum difference between a record's CreateTime and the broker's time.", at_least(0)),
        ConfigDef("log.message.timestamp.before.max.ms", L, _LONG_MAX_STR, "How far in the past a CreateTime may be.", at_least(0)),
        ConfigDef("log.message.timestamp.after.max.ms", L, _LONG_MAX_STR, "How far in the future a CreateTime may be.", at_least(0)),
        # ---- consumer groups and offsets ----
        ConfigDef("offsets.topic.num.partitions", I, "50", "Partitions of __consumer_offsets (do not change after creation).", at_least(1)),
        ConfigDef("offsets.topic.replication.factor", SH, "1", "Replication factor of __consumer_offsets. tidelog default 1 (Kafka: 3).", at_least(1)),
        ConfigDef("offsets.topic.segment.bytes", I, "104857600", "Segment size of __consumer_offsets.", at_least(1)),
        ConfigDef("offsets.topic.compression.codec", I, "0", "Compression codec of __consumer_offsets (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).", between(0, 4)),
        ConfigDef("offsets.load.buffer.size", I, "5242880", "Batch size for reading offsets segments when loading a coordinator.", at_least(1)),
        ConfigDef("offsets.commit.timeout.ms", I, "5000", "Offset commit waits this long for the offsets topic append.", at_least(1)),
        ConfigDef("offsets.retention.minutes", I, "10080", "Committed offsets of an empty group are kept this long.", at_least(1)),
        ConfigDef("offsets.retention.check.interval.ms", L, "600000", "How often stale offsets are checked.", at_least(1)),
        ConfigDef("offset.metadata.max.bytes", I, "4096", "Maximum size of the metadata string of an offset commit."),
        ConfigDef("group.initial.rebalance.delay.ms", I, "3000", "Time to wait for more members before the first rebalance of a new group."),
        ConfigDef("group.min.session.timeout.ms", I, "6000", "Minimum session timeout for a classic group member."),
        ConfigDef("group.max.session.timeout.ms", I, "1800000", "Maximum session timeout for a classic group member."),
        ConfigDef("group.max.size", I, _INT_MAX_STR, "Maximum members of a single consumer group.", at_least(1)),
        ConfigDef("group.coordinator.rebalance.protocols", LI, "classic,consumer", "Enabled rebalance protocols.", SubsetOf(("classic", "consumer", "share"))),
        ConfigDef("group.consumer.session.timeout.ms", I, "45000", "Session timeout of consumer-protocol (KIP-848) members.", at_least(1)),
        ConfigDef("group.consumer.min.session.timeout.ms", I, "45000", "Minimum consumer-protocol session timeout.", at_least(1)),
        ConfigDef("group.consumer.max.session.timeout.ms", I, "60000", "Maximum consumer-protocol session timeout.", at_least(1)),
        ConfigDef("group.consumer.heartbeat.interval.ms", I, "5000", "Heartbeat interval of consumer-protocol members.", at_least(1)),
        ConfigDef("group.consumer.min.heartbeat.interval.ms", I, "5000", "Minimum consumer-protocol heartbeat interval.", at_least(1)),
        ConfigDef("group.consumer.max.heartbeat.interval.ms", I, "15000", "Maximum consumer-protocol heartbeat interval.", at_least(1)),
        ConfigDef("group.consumer.max.size", I, _INT_MAX_STR, "Maximum members of a consumer-protocol group.", at_least(1)),
        ConfigDef("group.consumer.assignors", LI, "uniform,range", "Server-side assignors, preferred first."),
        # ---- transactions and producer ids ----
        ConfigDef("transaction.state.log.num.partitions", I, "50", "Partitions of __transaction_state.", at_least(1)),
        ConfigDef("transaction.state.log.replication.factor", SH, "1", "Replication factor of __transaction_state. tidelog default 1 (Kafka: 3).", at_least(1)),
        ConfigDef("transaction.state.log.min.isr", I, "1", "min.insync.replicas of __transaction_state. tidelog default 1 (Kafka: 2).", at_least(1)),
        ConfigDef("transaction.state.log.segment.bytes", I, "104857600", "Segment size of __transaction_state.", at_least(1)),
        ConfigDef("transaction.state.log.load.buffer.size", I, "5242880", "Batch size for reading transaction log segments.", at_least(1)),
        ConfigDef("transaction.max.timeout.ms", I, "900000", "Maximum transaction timeout a producer may request.", at_least(1)),
        ConfigDef("transactional.id.expiration.ms", I, "604800000", "A transactional id without updates expires after this time.", at_least(1)),
        ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", I, "10000", "How often timed-out transactions are rolled back.", at_least(1)),
        ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", I, "3600000", "How often expired transactional ids are removed.", at_least(1)),
        ConfigDef("producer.id.expiration.ms", I, "86400000", "Producer id state expires after this time without writes.", at_least(1)),
        ConfigDef("producer.id.expiration.check.interval.ms", I, "600000", "How often expired producer ids are removed.", at_least(1)),
        ConfigDef("max.incremental.fetch.session.cache.slots", I, "1000", "Maximum incremental fetch sessions kept.", at_least(0)),
        # ---- replication and purgatories ----
        ConfigDef("replica.fetch.wait.max.ms", I, "500", "Maximum wait of a follower fetch; must be below replica.lag.time.max.ms."),
        ConfigDef("replica.fetch.min.bytes", I, "1", "Minimum bytes a follower fetch waits for."),
        ConfigDef("replica.fetch.max.bytes", I, "1048576", "Bytes per partition a follower fetches.", at_least(0)),
        ConfigDef("replica.fetch.response.max.bytes", I, "10485760", "Maximum bytes of a follower fetch response.", at_least(0)),
        ConfigDef("replica.fetch.backoff.ms", I, "1000", "Sleep after a follower fetch error.", at_least(0)),
        ConfigDef("replica.lag.time.max.ms", L, "30000", "A follower that has not caught up for this long leaves the ISR."),
        ConfigDef("replica.socket.timeout.ms", I, "30000", "Socket timeout of follower fetches."),
        ConfigDef("replica.socket.receive.buffer.bytes", I, "65536", "SO_RCVBUF of follower fetch connections."),
        ConfigDef("replica.high.watermark.checkpoint.interval.ms", L, "5000", "How often the high watermark is checkpointed."),
        ConfigDef("num.replica.fetchers", I, "1", "Follower fetcher threads per source broker."),
        ConfigDef("fetch.purgatory.purge.interval.requests", I, "1000", "Purge interval (in requests) of the fetch purgatory."),
        ConfigDef("producer.purgatory.purge.interval.requests", I, "1000", "Purge interval (in requests) of the produce purgatory."),
        ConfigDef("delete.records.purgatory.purge.interval.requests", I, "1", "Purge interval (in requests) of the delete-records purgatory."),
    ]
)
# fmt: on
"""Broker configs by Kafka name. Deliberate differences from Kafka's defaults, all for a single node that
runs without setup: ``listeners`` binds 127.0.0.1, ``node.id`` is 1, ``log.dir`` is ``./data``, and the
internal topics' replication factors (and ``transaction.state.log.min.isr``) are 1."""


def _syn(*names: str | tuple[str, int]) -> tuple[BrokerSynonym, ...]:
    return tuple(BrokerSynonym(n) if isinstance(n, str) else BrokerSynonym(n[0], n[1]) for n in names)


# fmt: off
TOPIC_CONFIGS: Final[dict[str, ConfigDef]] = _defs(
    [
        TopicConfigDef("cleanup.policy", LI, "delete", "delete and/or compact.", SubsetOf(_CLEANUP_POLICIES), broker_synonyms=_syn("log.cleanup.policy")),
        TopicConfigDef("compression.type", S, "producer", "Final compression type of the topic's data.", OneOf(_COMPRESSION_TYPES), broker_synonyms=_syn("compression.type")),
        TopicConfigDef("delete.retention.ms", L, "86400000", "How long tombstones are kept in a compacted topic.", at_least(0), broker_synonyms=_syn("log.cleaner.delete.retention.ms")),
        TopicConfigDef("file.delete.delay.ms", L, "60000", "Delay before a deleted segment's files are removed.", at_least(0), broker_synonyms=_syn("log.segment.delete.delay.ms")),
        TopicConfigDef("flush.messages", L, _LONG_MAX_STR, "Messages between forced fsyncs.", at_least(1), broker_synonyms=_syn("log.flush.interval.messages")),
        TopicConfigDef("flush.ms", L, _LONG_MAX_STR, "Milliseconds between forced fsyncs.", at_least(0), broker_synonyms=_syn("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
        TopicConfigDef("follower.replication.throttled.replicas", LI, "", "Replicas throttled on the follower side (accepted; throttling is not implemented)."),
        TopicConfigDef("leader.replication.throttled.replicas", LI, "", "Replicas throttled on the leader side (accepted; throttling is not implemented)."),
        TopicConfigDef("index.interval.bytes", I, "4096", "Bytes between offset index entries.", at_least(0), broker_synonyms=_syn("log.index.interval.bytes")),
        TopicConfigDef("max.compaction.lag.ms", L, _LONG_MAX_STR, "Maximum time a record stays ineligible for compaction.", at_least(1), broker_synonyms=_syn("log.cleaner.max.compaction.lag.ms")),
        TopicConfigDef("max.message.bytes", I, "1048588", "Largest record batch size allowed.", at_least(0), broker_synonyms=_syn("message.max.bytes")),
        TopicConfigDef("message.timestamp.type", S, "CreateTime", "CreateTime or LogAppendTime.", OneOf(_TIMESTAMP_TYPES), broker_synonyms=_syn("log.message.timestamp.type")),
        TopicConfigDef("message.timestamp.difference.max.ms", L, _LONG_MAX_STR, "Deprecated: maximum |CreateTime - broker time|.", at_least(0), broker_synonyms=_syn("log.message.timestamp.difference.max.ms")),
        TopicConfigDef("message.timestamp.before.max.ms", L, _LONG_MAX_STR, "How far in the past a CreateTime may be.", at_least(0), broker_synonyms=_syn("log.message.timestamp.before.max.ms")),
        TopicConfigDef("message.timestamp.after.max.ms", L, _LONG_MAX_STR, "How far in the future a CreateTime may be.", at_least(0), broker_synonyms=_syn("log.message.timestamp.after.max.ms")),
        TopicConfigDef("min.cleanable.dirty.ratio", D, "0.5", "Minimum dirty ratio before the cleaner compacts the log.", between(0, 1), broker_synonyms=_syn("log.cleaner.min.cleanable.ratio")),
        TopicConfigDef("min.compaction.lag.ms", L, "0", "Minimum time a record stays uncompacted.", at_least(0), broker_synonyms=_syn("log.cleaner.min.compaction.lag.ms")),
        TopicConfigDef("min.insync.replicas", I, "1", "Minimum in-sync replicas for an acks=all produce.", at_least(1), broker_synonyms=_syn("min.insync.replicas")),
        TopicConfigDef("preallocate", B, "false", "Preallocate segment files.", broker_synonyms=_syn("log.preallocate")),
        TopicConfigDef("retention.bytes", L, "-1", "Maximum partition size before old segments are deleted; -1 = no limit.", broker_synonyms=_syn("log.retention.bytes")),
        TopicConfigDef("retention.ms", L, "604800000", "How long a segment is kept; -1 = no time limit.", at_least(-1), broker_synonyms=_syn("log.retention.ms", ("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS))),
        TopicConfigDef("segment.bytes", I, "1073741824", "Segment file size.", at_least(14), broker_synonyms=_syn("log.segment.bytes")),
        TopicConfigDef("segment.index.bytes", I, "10485760", "Size of the offset/time index files.", at_least(4), broker_synonyms=_syn("log.index.size.max.bytes")),
        TopicConfigDef("segment.jitter.ms", L, "0", "Maximum random jitter subtracted from segment.ms.", at_least(0), broker_synonyms=_syn("log.roll.jitter.ms", ("log.roll.jitter.hours", _HOUR_MS))),
        TopicConfigDef("segment.ms", L, "604800000", "Roll a segment after this time even if not full.", at_least(1), broker_synonyms=_syn("log.roll.ms", ("log.roll.hours", _HOUR_MS))),
        TopicConfigDef("unclean.leader.election.enable", B, "false", "Allow out-of-sync replicas to become leader.", broker_synonyms=_syn("unclean.leader.election.enable")),
    ]
)
# fmt: on
"""Topic configs by Kafka name, each with its broker synonyms (Kafka's ``TopicConfigSynonyms``)."""


def topic_def(name: str) -> TopicConfigDef:
    """The topic config definition for ``name``; raises :class:`ConfigError` for an unknown name."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"Unknown topic config name: {name}", key=name)
    assert isinstance(definition, TopicConfigDef)
    return definition


# -- dynamic broker configs (KIP-226) ------------------------------------------------------------------

DYNAMIC_BROKER_CONFIGS: Final[frozenset[str]] = frozenset(
    {
        definition.broker_synonyms[0].name
        for definition in TOPIC_CONFIGS.values()
        if isinstance(definition, TopicConfigDef) and definition.broker_synonyms
    }
    | {"log.cleaner.backoff.ms", "producer.id.expiration.ms"}
)
"""Broker configs tidelog updates live (AlterConfigs / IncrementalAlterConfigs on a BROKER resource):
Kafka's ``DynamicLogConfig`` set (the head broker synonym of every topic config: ``log.retention.ms``,
``log.segment.bytes``, ``message.max.bytes``, ...; topics without an override take the new value at
once), plus ``log.cleaner.backoff.ms`` and ``producer.id.expiration.ms``. Every other broker config is
read-only; DescribeConfigs says so."""

KAFKA_DYNAMIC_BROKER_CONFIGS: Final[frozenset[str]] = frozenset(
    {
        "listeners",
        "listener.security.protocol.map",
        "num.io.threads",
        "num.network.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "max.connections",
        "max.connections.per.ip",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
    }
)
"""Broker configs Kafka updates dynamically but tidelog applies only at start-up (its threads, listeners
and cleaner buffers are set up once): altering one is refused with a message saying so, never ignored."""
