"""The console's Kafka client: one AdminClient and one Producer per console, plain views of what they return.

Invariants: only public Kafka APIs (confluent-kafka's AdminClient, Producer and Consumer), so the console
works against any Kafka; every call is bounded by ``timeout`` seconds; the functions here block (the web
layer runs them in worker threads) and return frozen dataclasses, never confluent-kafka objects.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

__all__ = [
    "BadRequestError",
    "BrokerView",
    "ClusterView",
    "ConsoleError",
    "GroupMemberView",
    "GroupOffsetView",
    "GroupSummary",
    "GroupView",
    "KafkaGateway",
    "NotFoundError",
    "PartitionView",
    "TopicView",
    "error_text",
]


class ConsoleError(Exception):
    """A Kafka call failed: the message is shown to the user."""


class BadRequestError(ConsoleError):
    """The user's input cannot be used (a bad number, name or date): a 400 page."""


class NotFoundError(ConsoleError):
    """The topic (or partition) asked for does not exist: a 404 page."""


def error_text(error: object) -> str:
    """librdkafka's message for a ``KafkaError`` or a ``KafkaException`` carrying one."""
    if isinstance(error, Exception) and error.args:
        error = error.args[0]
    text = getattr(error, "str", None)
    return str(text()) if callable(text) else str(error)


@dataclass(frozen=True)
class BrokerView:
    node_id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool


@dataclass(frozen=True)
class PartitionView:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    low: int
    high: int

    @property
    def messages(self) -> int:
        return max(0, self.high - self.low)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class TopicView:
    name: str
    partitions: tuple[PartitionView, ...]
    internal: bool

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def high_watermark_sum(self) -> int:
        return sum(p.high for p in self.partitions)


@dataclass(frozen=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[BrokerView, ...]
    topics: tuple[TopicView, ...]

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for t in self.topics for p in t.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for t in self.topics for p in t.partitions)


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    state: str
    is_simple: bool


@dataclass(frozen=True)
class GroupMemberView:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupOffsetView:
    topic: str
    partition: int
    committed: int  # -1: nothing committed
    high: int

    @property
    def lag(self) -> int:
        return self.high - self.committed if self.committed >= 0 else self.high


@dataclass(frozen=True)
class GroupView:
    group_id: str
    state: str
    protocol: str
    coordinator: int | None
    members: tuple[GroupMemberView, ...]
    offsets: tuple[GroupOffsetView, ...]

    @property
    def total_lag(self) -> int:
        return sum(o.lag for o in self.offsets)


def _config_source(value: object) -> str:
    """confluent-kafka gives a config entry's source as the int of ``ConfigSource``."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return ConfigSource(value).name
        except ValueError:
            return str(value)
    return _enum_name(value)


def _enum_name(value: object) -> str:
    name = getattr(value, "name", None)
    return str(name) if name is not None else str(value)


class KafkaGateway:
    """The console's clients. ``config`` holds librdkafka settings and callbacks (``error_cb``, ``logger``)."""

    def __init__(self, config: Mapping[str, object], timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._settings = {k: v for k, v in config.items() if isinstance(v, str | int | float | bool)}
        self._callbacks = {k: v for k, v in config.items() if k not in self._settings}
        try:
            self.admin = AdminClient(dict(self._settings), **self._callbacks)
        except KafkaException as exc:  # a property librdkafka does not know, or a bad value
            raise ConsoleError(error_text(exc)) from exc
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    @property
    def settings(self) -> dict[str, str | int | float | bool]:
        """The librdkafka settings (no callbacks): what the console's own wire connections secure with."""
        return dict(self._settings)

    @property
    def security_protocol(self) -> str:
        return str(self._settings.get("security.protocol", "PLAINTEXT"))

    @property
    def bootstrap_servers(self) -> str:
        return str(self._settings.get("bootstrap.servers", ""))

    def consumer(self) -> Consumer:
        """A consumer for reading by assignment only: no group membership, never commits."""
        config: dict[str, Any] = dict(self._settings)
        config.update(
            {
                "group.id": "tidelog-console-browser",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,
                "fetch.max.bytes": 4 * 1024 * 1024,
                "max.partition.fetch.bytes": 1024 * 1024,
            }
        )
        return Consumer(config, **self._callbacks)

    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(dict(self._settings), **self._callbacks)
            return self._producer

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(self.timeout)

    # -- reading ------------------------------------------------------------------------------------------

    def cluster(self, with_offsets: bool = True) -> ClusterView:
        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise ConsoleError(f"cannot reach {self.bootstrap_servers}: {error_text(exc)}") from exc
        cluster_id: str | None = metadata.cluster_id
        controller: int | None = metadata.controller_id if metadata.controller_id >= 0 else None
        try:
            described = self.admin.describe_cluster(request_timeout=self.timeout).result(self.timeout)
            cluster_id = described.cluster_id or cluster_id
            if described.controller is not None:
                controller = described.controller.id
        except (KafkaException, TimeoutError):
            pass  # older brokers: metadata's values stand
        brokers = tuple(
            BrokerView(b.id, str(b.host), b.port, None, b.id == controller)
            for b in sorted(metadata.brokers.values(), key=lambda b: b.id)
        )
        names = sorted(metadata.topics)
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        if with_offsets:
            pairs = [(t, p) for t in names for p in metadata.topics[t].partitions]
            offsets = self.watermarks(pairs)
        topics = []
        for name in names:
            t = metadata.topics[name]
            parts = tuple(
                PartitionView(
                    p.id,
                    p.leader,
                    tuple(p.replicas),
                    tuple(p.isrs),
                    *offsets.get((name, p.id), (-1, -1)),
                )
                for p in sorted(t.partitions.values(), key=lambda p: p.id)
            )
            topics.append(TopicView(name, parts, name.startswith("__")))
        return ClusterView(cluster_id, controller, brokers, tuple(topics))

    def topic(self, name: str) -> TopicView:
        for t in self.cluster().topics:
            if t.name == name:
                return t
        raise NotFoundError(f"no topic {name!r}")

    def watermarks(self, pairs: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) per partition, from two ListOffsets calls; (-1, -1) where the broker failed."""
        pairs = list(pairs)
        if not pairs:
            return {}
        result: dict[tuple[str, int], list[int]] = {pair: [-1, -1] for pair in pairs}
        for index, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
            request = {TopicPartition(t, p): spec for t, p in pairs}
            futures = self.admin.list_offsets(request, request_timeout=self.timeout)
            for tp, future in futures.items():
                with contextlib.suppress(KafkaException, TimeoutError):
                    result[(tp.topic, tp.partition)][index] = future.result(self.timeout).offset
        return {pair: (v[0], v[1]) for pair, v in result.items()}

    def topic_configs(self, name: str) -> list[tuple[str, str, str, bool]]:
        """(name, value, source, is_default) per config entry, sorted by name."""
        resource = ConfigResource(ResourceType.TOPIC, name)
        try:
            entries = self.admin.describe_configs([resource], request_timeout=self.timeout)[resource].result(
                self.timeout
            )
        except KafkaException as exc:
            raise ConsoleError(error_text(exc)) from exc
        rows = []
        for key in sorted(entries):
            entry = entries[key]
            value = "(sensitive)" if entry.is_sensitive else ("" if entry.value is None else str(entry.value))
            rows.append((key, value, _config_source(entry.source), bool(entry.is_default)))
        return rows

    def groups(self) -> list[GroupSummary]:
        try:
            listed = self.admin.list_consumer_groups(request_timeout=self.timeout).result(self.timeout)
        except KafkaException as exc:
            raise ConsoleError(error_text(exc)) from exc
        return sorted(
            (
                GroupSummary(g.group_id, _enum_name(g.state), bool(g.is_simple_consumer_group))
                for g in listed.valid
            ),
            key=lambda g: g.group_id,
        )

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(group_id)]
        try:
            result = self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout)[
                group_id
            ].result(self.timeout)
        except KafkaException as exc:
            raise ConsoleError(error_text(exc)) from exc
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}

    def group_offsets(self, group_id: str) -> list[GroupOffsetView]:
        committed = self.committed(group_id)
        marks = self.watermarks(committed)
        return [
            GroupOffsetView(t, p, committed[(t, p)], marks.get((t, p), (-1, -1))[1])
            for t, p in sorted(committed)
        ]

    def group(self, group_id: str) -> GroupView:
        try:
            described = self.admin.describe_consumer_groups([group_id], request_timeout=self.timeout)[
                group_id
            ].result(self.timeout)
        except KafkaException as exc:
            raise ConsoleError(error_text(exc)) from exc
        members = tuple(
            GroupMemberView(
                m.member_id,
                m.client_id,
                m.host,
                tuple(
                    sorted(
                        (tp.topic, tp.partition)
                        for tp in (m.assignment.topic_partitions if m.assignment else [])
                    )
                ),
            )
            for m in described.members
        )
        coordinator = described.coordinator.id if described.coordinator is not None else None
        return GroupView(
            group_id,
            _enum_name(described.state),
            described.partition_assignor or "",
            coordinator,
            members,
            tuple(self.group_offsets(group_id)),
        )

    def offsets_for_time(
        self, pairs: Iterable[tuple[str, int]], timestamp_ms: int
    ) -> dict[tuple[str, int], int]:
        """The first offset at or after ``timestamp_ms`` per partition (the high watermark when none is)."""
        request = {TopicPartition(t, p): OffsetSpec.for_timestamp(timestamp_ms) for t, p in pairs}
        result = {}
        for tp, future in self.admin.list_offsets(request, request_timeout=self.timeout).items():
            try:
                result[(tp.topic, tp.partition)] = future.result(self.timeout).offset
            except KafkaException as exc:
                raise ConsoleError(error_text(exc)) from exc
        return result

    # -- writing ------------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication: int, configs: Mapping[str, str]) -> None:
        topic = NewTopic(name, partitions, replication, config=dict(configs))
        self._wait(self.admin.create_topics([topic], request_timeout=self.timeout)[name])

    def delete_topic(self, name: str) -> None:
        self._wait(self.admin.delete_topics([name], request_timeout=self.timeout)[name])

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        """Set ``key`` to ``value`` (incrementally), or restore its default when ``value`` is None."""
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        entry = ConfigEntry(key, value if value is not None else "", incremental_operation=op)
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
        self._wait(self.admin.incremental_alter_configs([resource], request_timeout=self.timeout)[resource])

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None,
    ) -> tuple[int, int]:
        """Produce one record and wait for its acknowledgement: (partition, offset)."""
        outcome: list[tuple[Any, Any]] = []
        producer = self.producer()
        kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers or None}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, on_delivery=lambda err, msg: outcome.append((err, msg)), **kwargs)
        producer.flush(self.timeout)
        if not outcome:
            raise ConsoleError(f"no acknowledgement within {self.timeout:g} s")
        err, msg = outcome[0]
        if err is not None:
            raise ConsoleError(error_text(err))
        return int(msg.partition()), int(msg.offset())

    def alter_group_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        request = [
            ConsumerGroupTopicPartitions(
                group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            )
        ]
        result = self._wait(
            self.admin.alter_consumer_group_offsets(request, request_timeout=self.timeout)[group_id]
        )
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise ConsoleError(f"{tp.topic}[{tp.partition}]: {error_text(tp.error)}")

    def _wait(self, future: Any) -> Any:
        try:
            return future.result(self.timeout)
        except KafkaException as exc:
            raise ConsoleError(error_text(exc)) from exc
        except TimeoutError as exc:
            raise ConsoleError(f"no answer within {self.timeout:g} s") from exc
