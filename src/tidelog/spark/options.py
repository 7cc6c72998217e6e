"""Spark's Kafka source and sink options, parsed once into typed values (pure: no Spark, no client).

Invariants:

- Option names are Spark's Kafka connector's, matched case-insensitively (Spark lower-cases data source
  option keys): ``kafka.bootstrap.servers``, exactly one of ``subscribe`` / ``subscribePattern`` /
  ``assign`` for a reader, ``startingOffsets`` / ``endingOffsets`` / ``startingTimestamp`` /
  ``startingOffsetsByTimestamp`` / ``endingTimestamp`` / ``endingOffsetsByTimestamp``,
  ``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``, ``includeHeaders``, ``topic`` (sink),
  and tidelog's own ``arrowDecode`` (reader: false by default).
- Every other ``kafka.<name>`` option is handed to the confluent-kafka client as ``<name>`` after
  :func:`tidelog.spark.client_config.translate` turned the Java client's keys into librdkafka's, except
  the keys Spark refuses (no group management: offsets are Spark's), which raise :class:`OptionError`
  naming the key: ``enable.auto.commit``, ``auto.offset.reset``, ``key.deserializer`` ... Keys the reader
  needs set its way (``enable.partition.eof``, ``enable.auto.offset.store``, ``bootstrap.servers``) are
  ignored with a warning naming them; :meth:`ReaderOptions.consumer_config` always sets them last.
- The consumer group id is never joined (readers assign partitions) and is, as in Spark, ``kafka.group.id``
  when given, else ``<groupIdPrefix>-<uuid>`` new for every parsed reader (prefix ``spark-kafka-source``
  for streaming, ``spark-kafka-relation`` for batch reads) with ``-driver-0`` / ``-executor`` appended.
  A writer drops ``kafka.group.id``: the exactly-once sink's progress groups are its own.
- ``fetchOffset.numRetries`` (3) and ``fetchOffset.retryIntervalMs`` (10) are Spark's: how often the driver
  asks again when a metadata or list-offsets request fails or answers offsets that went backwards.
- The sink's producer hashes keys with murmur2 as the Java client does (``partitioner=murmur2_random``)
  and is idempotent (``enable.idempotence=true``, as Java clients >= 3.0) unless the user's settings
  conflict with idempotence (``acks`` other than all, ``retries=0``, more than 5 requests in flight) and
  do not ask for it, as the Java client decides.
- ``twoPhaseCommit`` (``auto`` by default, ``true``, ``false``) chooses how ``deliveryGuarantee=exactly-once``
  commits (:mod:`tidelog.spark.two_phase`); any other value raises.
- ``kafka.isolation.level`` is ``read_uncommitted`` (default, like Spark) or ``read_committed``.
- A bad value raises :class:`OptionError` whose message names the option; nothing is validated later.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from tidelog.spark.client_config import Translation, TranslationError, translate

__all__ = [
    "Assign",
    "OffsetBound",
    "OptionError",
    "ReaderOptions",
    "Subscribe",
    "SubscribePattern",
    "Subscription",
    "WriterOptions",
    "parse_reader_options",
    "parse_writer_options",
]

#: Spark's sentinels inside JSON offsets: -2 earliest, -1 latest.
EARLIEST = -2
LATEST = -1

_REFUSED_CLIENT_KEYS = {
    "enable.auto.commit": "offsets are kept in Spark's checkpoint, never committed to the broker",
    "auto.offset.reset": "use startingOffsets (and failOnDataLoss for data deleted by retention)",
    "key.deserializer": "keys are always binary; cast them in the query",
    "value.deserializer": "values are always binary; cast them in the query",
    "key.serializer": "keys are written as binary or string columns",
    "value.serializer": "values are written as binary or string columns",
    "interceptor.classes": "Java client interceptors do not exist in confluent-kafka",
}

#: librdkafka keys the reader sets its own way (a user's value would break reads); ignored with a warning.
_READER_OWNED_KEYS = ("enable.partition.eof", "enable.auto.offset.store", "bootstrap.servers", "group.id")


class OptionError(ValueError):
    """An option is missing, unknown in this position, or has a bad value; the message names it."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class Assign:
    partitions: tuple[tuple[str, int], ...]


Subscription = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """Where a read starts or ends.

    ``kind`` "earliest" / "latest": for every partition; "offsets": ``offsets`` maps topic -> partition ->
    offset (or -2 earliest / -1 latest) and must name every partition read; "timestamp": one
    ``timestamp`` ms for all partitions; "timestamps": topic -> partition -> ms.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    read_committed: bool
    timestamp_strategy_latest: bool  # startingOffsetsByTimestampStrategy=latest: no match -> latest
    poll_timeout_ms: int
    client_config: Mapping[str, str]
    group_id: str = "spark-kafka-source"
    group_id_given: bool = False  # kafka.group.id: used as it is by the driver and the executors
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    max_poll_records: int | None = None
    warnings: tuple[str, ...] = ()
    arrow_decode: bool = (
        False  # arrowDecode: raw record batches decoded into Arrow (tidelog.spark.fetch_arrow)
    )

    def consumer_config(
        self, role: Literal["driver", "executor"] = "executor"
    ) -> dict[str, str | bool | int]:
        """confluent-kafka consumer settings: no group management, offsets never committed."""
        config: dict[str, str | bool | int] = dict(self.client_config)
        config.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                # required by librdkafka, never joined (assign, no subscribe)
                "group.id": self.group_id
                if self.group_id_given
                else f"{self.group_id}-{role}" + ("-0" if role == "driver" else ""),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                "isolation.level": "read_committed" if self.read_committed else "read_uncommitted",
            }
        )
        return config


@dataclass(frozen=True, slots=True)
class WriterOptions:
    bootstrap_servers: str
    topic: str | None
    exactly_once: bool
    client_config: Mapping[str, str]
    warnings: tuple[str, ...] = ()
    checkpoint_location: str | None = None  # the query's, when given as an option (finds its id)
    two_phase_commit: Literal["auto", "true", "false"] = "auto"  # twoPhaseCommit (exactly-once only)

    def producer_config(self) -> dict[str, str | bool | int]:
        config: dict[str, str | bool | int] = {
            "bootstrap.servers": self.bootstrap_servers,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "partitioner": "murmur2_random",  # the Java client's hash of keys: same key, same partition
        }
        if "enable.idempotence" not in self.client_config and _idempotence_fits(self.client_config):
            config["enable.idempotence"] = True
        config.update(self.client_config)
        return config


def _idempotence_fits(config: Mapping[str, str]) -> bool:
    """The Java client (>= 3.0) turns idempotence on by default unless the user's settings conflict."""
    acks = config.get("acks", config.get("request.required.acks", "all")).strip().lower()
    retries = config.get("retries", config.get("message.send.max.retries"))
    in_flight = config.get("max.in.flight.requests.per.connection", config.get("max.in.flight", "5"))
    try:
        return acks in ("all", "-1") and (retries is None or int(retries) > 0) and int(in_flight) <= 5
    except ValueError:
        return False


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {key} must be true or false, got {raw!r}")
    return value == "true"


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {key} must be a positive integer, got {raw!r}")
    return value


def _non_negative_int(options: Mapping[str, str], key: str, default: int) -> int:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key} must be a non-negative integer, got {raw!r}") from None
    if value < 0:
        raise OptionError(f"option {key} must be a non-negative integer, got {raw!r}")
    return value


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(options: Mapping[str, str], key: str, default: str) -> int:
    """Spark's duration strings: ``500ms``, ``30s``, ``15m``, ``1h``, ``2d`` (a bare number is ms)."""
    raw = options.get(key.lower(), default).strip().lower()
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", raw)
    if match is None or match.group(2) not in {"", *_DURATION_UNITS_MS}:
        raise OptionError(f"option {key} must be a duration like 500ms, 30s, 15m, 1h; got {raw!r}")
    return int(match.group(1)) * _DURATION_UNITS_MS.get(match.group(2), 1)


def _sniff(path: str) -> bytes | None:
    """The first bytes of a key or trust store file (None when it cannot be read here)."""
    try:
        with open(path, "rb") as file:
            return file.read(64)
    except OSError:
        return None


def _client_config(
    options: Mapping[str, str], *, producer: bool, sniff: Callable[[str], bytes | None] = _sniff
) -> Translation:
    """The ``kafka.*`` options (lower-cased, as Spark hands them) translated for librdkafka."""
    given: dict[str, str] = {}
    for key, value in options.items():
        if not key.startswith("kafka.") or key in ("kafka.bootstrap.servers", "kafka.isolation.level"):
            continue
        name = key[len("kafka.") :]
        if name in _REFUSED_CLIENT_KEYS:
            raise OptionError(f"option kafka.{name} is not supported: {_REFUSED_CLIENT_KEYS[name]}")
        given[name] = value
    try:
        translation = translate(given, producer=producer, sniff=sniff)
    except TranslationError as exc:
        raise OptionError(str(exc)) from None
    owned = _READER_OWNED_KEYS if not producer else ("bootstrap.servers", "group.id")
    for name in owned:
        if name in translation.config:
            del translation.config[name]
            if name != "group.id":
                translation.warnings.append(
                    f"option kafka.{name} is ignored: the tidelog {'sink' if producer else 'source'} sets it"
                )
    return translation


def _bootstrap(options: Mapping[str, str]) -> str:
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise OptionError("option kafka.bootstrap.servers is required")
    return servers


def _json_object(key: str, raw: str) -> dict[str, object]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {key} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option {key} must be a JSON object, got {raw!r}")
    return value


def _partition_map(key: str, raw: str) -> dict[str, dict[int, int]]:
    """``{"topicA":{"0":23,"1":-1}}`` -> {"topicA": {0: 23, 1: -1}}."""
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in _json_object(key, raw).items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option {key}: topic {topic!r} must map partitions to numbers")
        inner: dict[int, int] = {}
        for partition, number in partitions.items():
            try:
                inner[int(partition)] = int(number)
            except (TypeError, ValueError):
                raise OptionError(f"option {key}: bad entry {topic}:{partition} = {number!r}") from None
        result[topic] = inner
    return result


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign must be set")
    kind = given[0]
    raw = options[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option subscribe names no topic")
        return Subscribe(topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regular expression: {exc}") from None
        return SubscribePattern(raw)
    partitions: list[tuple[str, int]] = []
    for topic, numbers in _json_object("assign", raw).items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) for n in numbers):
            raise OptionError(f"option assign: topic {topic!r} must map to a list of partition numbers")
        partitions.extend((topic, n) for n in numbers)
    if not partitions:
        raise OptionError("option assign names no partition")
    return Assign(tuple(sorted(set(partitions))))


def _bound(options: Mapping[str, str], which: Literal["starting", "ending"], default: str) -> OffsetBound:
    offsets_key = f"{which}Offsets"
    ts_key = f"{which}Timestamp"
    by_ts_key = f"{which}OffsetsByTimestamp"
    if options.get(ts_key.lower()) is not None:
        raw = options[ts_key.lower()]
        try:
            return OffsetBound("timestamp", timestamp=int(raw))
        except ValueError:
            raise OptionError(f"option {ts_key} must be milliseconds since the epoch, got {raw!r}") from None
    if options.get(by_ts_key.lower()) is not None:
        return OffsetBound("timestamps", offsets=_partition_map(by_ts_key, options[by_ts_key.lower()]))
    raw = options.get(offsets_key.lower(), default).strip()
    if raw == "earliest":
        return OffsetBound("earliest")
    if raw == "latest":
        return OffsetBound("latest")
    offsets = _partition_map(offsets_key, raw)
    for topic, partitions in offsets.items():
        for partition, offset in partitions.items():
            if offset < EARLIEST:
                raise OptionError(f"option {offsets_key}: offset {offset} for {topic}:{partition} is invalid")
            if which == "ending" and offset == EARLIEST:
                raise OptionError(f"option {offsets_key}: earliest (-2) is not allowed as an ending offset")
    return OffsetBound("offsets", offsets=offsets)


def parse_reader_options(raw: Mapping[str, str], *, streaming: bool) -> ReaderOptions:
    """Spark's Kafka source options -> :class:`ReaderOptions` (startingOffsets default: latest when
    streaming, earliest for a batch read)."""
    options = _lower(raw)
    isolation = options.get("kafka.isolation.level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(
            f"option kafka.isolation.level must be read_uncommitted or read_committed, got {isolation!r}"
        )
    starting = _bound(options, "starting", "latest" if streaming else "earliest")
    ending = _bound(options, "ending", "latest")
    if streaming and any(
        k in options for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    ):
        raise OptionError("options endingOffsets/endingTimestamp are for batch reads, not streaming queries")
    if not streaming and starting.kind == "latest":
        raise OptionError("option startingOffsets=latest is not allowed for a batch read")
    if not streaming and ending.kind == "earliest":
        raise OptionError("option endingOffsets=earliest is not allowed for a batch read")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    poll_timeout = _positive_int(options, "kafkaConsumer.pollTimeoutMs") or 120_000
    client = _client_config(options, producer=False)
    group_id = options.get("kafka.group.id")
    if group_id is None:
        prefix = options.get("groupidprefix", "spark-kafka-source" if streaming else "spark-kafka-relation")
        group_id = f"{prefix}-{uuid.uuid4()}"
    retries = _non_negative_int(options, "fetchOffset.numRetries", 3)
    retry_interval = _non_negative_int(options, "fetchOffset.retryIntervalMs", 10)
    return ReaderOptions(
        bootstrap_servers=_bootstrap(options),
        subscription=_subscription(options),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", "15m"),
        min_partitions=_positive_int(options, "minPartitions"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        read_committed=isolation == "read_committed",
        timestamp_strategy_latest=strategy == "latest",
        poll_timeout_ms=poll_timeout,
        client_config=client.config,
        group_id=group_id,
        group_id_given="kafka.group.id" in options,
        fetch_offset_retries=retries,
        fetch_offset_retry_interval_ms=retry_interval,
        max_poll_records=client.max_poll_records,
        warnings=tuple(client.warnings),
        arrow_decode=_bool(options, "arrowDecode", False),
    )


def parse_writer_options(raw: Mapping[str, str]) -> WriterOptions:
    """Spark's Kafka sink options, plus tidelog's ``deliveryGuarantee`` (at-least-once | exactly-once)."""
    options = _lower(raw)
    guarantee = options.get("deliveryguarantee", "at-least-once").lower()
    if guarantee not in ("at-least-once", "exactly-once"):
        raise OptionError(
            f"option deliveryGuarantee must be at-least-once or exactly-once, got {guarantee!r}"
        )
    two_phase = options.get("twophasecommit", "auto").strip().lower()
    if two_phase not in ("auto", "true", "false"):
        raise OptionError(f"option twoPhaseCommit must be auto, true or false, got {two_phase!r}")
    topic = options.get("topic") or None
    client = _client_config(options, producer=True)
    return WriterOptions(
        bootstrap_servers=_bootstrap(options),
        topic=topic,
        exactly_once=guarantee == "exactly-once",
        client_config=client.config,
        warnings=tuple(client.warnings),
        checkpoint_location=options.get("checkpointlocation") or None,
        two_phase_commit=two_phase,  # type: ignore[arg-type]  # checked above
    )
