"""What the driver asks the broker: partitions of a subscription, offsets per partition, offsets by time.

Invariants:

- One confluent-kafka ``AdminClient`` per :class:`ClusterView`, with the query's client settings. Every
  question is one batched request for all partitions of the query (a ListOffsets per partition leader,
  not per partition): a trigger of a streaming query costs one Metadata and one ListOffsets round trip
  however many partitions it reads. ``latest`` is the high watermark, or the last stable offset with
  ``read_committed``, so a read never waits for an open transaction.
- :meth:`ClusterView.partitions` is the sorted list of topic-partitions the subscription covers now
  (internal topics, those starting with ``__``, never match a pattern). A subscribed topic the broker
  reports with an error other than "unknown topic" raises :class:`MetadataUnavailableError`: a topic
  that is only unavailable is never taken for a deleted one.
- A failed metadata or list-offsets request is retried as Spark's connector does:
  ``fetchOffset.numRetries`` attempts in all, ``fetchOffset.retryIntervalMs`` apart; the last error is
  raised. Within one attempt, an error of a leader moving or a broker going away (NOT_LEADER_OR_FOLLOWER,
  LEADER_NOT_AVAILABLE, a lost connection, a topic's metadata unavailable: :func:`leader_moving`) is
  retried with :mod:`tidelog.spark.retry`'s policy (backoff 0.1 s doubling to 1 s, for up to 60 s, the
  Java admin client's ``default.api.timeout.ms``, which Spark's connector relies on to ride through a
  failover); each retry asks afresh, so librdkafka refreshes its metadata. ``round_trips`` counts the requests made
  (one per call that reached the client).
- :meth:`ClusterView.resolve` turns an :class:`~tidelog.spark.options.OffsetBound` into concrete offsets,
  each within ``[log_start_offset, high_watermark]`` of its partition except explicit JSON offsets, which
  are kept as given (the reader reports them per ``failOnDataLoss`` if retention removed them). JSON
  offsets must name exactly the partitions read (Spark's rule), else :class:`OffsetsJsonError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tidelog.spark.offsets import OffsetsJsonError, Position, check_json_covers
from tidelog.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    OffsetBound,
    ReaderOptions,
    Subscribe,
    SubscribePattern,
)
from tidelog.spark.retry import ride_through

__all__ = [
    "ClusterView",
    "MetadataUnavailableError",
    "NoOffsetForTimestampError",
    "OffsetsJsonError",
    "UnknownPartitionError",
]

log = logging.getLogger("tidelog.spark")

_TIMEOUT_S = 30.0
_T = TypeVar("_T")


class MetadataUnavailableError(RuntimeError):
    """The broker could not describe a subscribed topic now (it may be restarting); retry later."""


class UnknownPartitionError(RuntimeError):
    """A topic-partition named in the options does not exist on the broker."""


class NoOffsetForTimestampError(RuntimeError):
    """No record at or after the requested timestamp (startingOffsetsByTimestampStrategy=error)."""


_LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,  # NOT_LEADER_OR_FOLLOWER
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError._NODE_UPDATE,
    }
)


def leader_moving(exc: BaseException) -> bool:
    """The error of a leader moving or a broker going away: asking again shortly is expected to work."""
    if isinstance(exc, MetadataUnavailableError):
        return True
    cause = exc.__cause__ if isinstance(exc, UnknownPartitionError) else exc
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
        return cause.args[0].code() in _LEADER_MOVING
    return False


def _through_leader_moves(what: str, attempt: Callable[[], _T]) -> _T:
    """``attempt()``, again while it fails with :func:`leader_moving` errors (:func:`~tidelog.spark.retry.ride_through`:
    with backoff, for up to ``API_TIMEOUT_S``)."""
    return ride_through(f"fetching {what}", lambda _left: attempt(), leader_moving)


class ClusterView:
    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        config: dict[str, str | int | float | bool] = {
            **options.client_config,
            "bootstrap.servers": options.bootstrap_servers,
        }
        self._admin = AdminClient(config)
        self._isolation = (
            IsolationLevel.READ_COMMITTED if options.read_committed else IsolationLevel.READ_UNCOMMITTED
        )
        self.round_trips = 0

    def close(self) -> None:
        """Nothing to release: the admin client's threads end with the object."""

    def __enter__(self) -> ClusterView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def retrying(self, what: str, attempt: Callable[[], _T]) -> _T:
        """``attempt()``, again after a failure, up to ``fetchOffset.numRetries`` attempts in all (each
        riding through a leader move, see the module's invariants)."""
        attempts = max(1, self.options.fetch_offset_retries)
        for number in range(1, attempts + 1):
            try:
                return _through_leader_moves(what, attempt)
            except (KafkaException, MetadataUnavailableError, UnknownPartitionError) as exc:
                if number == attempts:
                    raise
                log.warning("attempt %d of %d to fetch %s failed: %s", number, attempts, what, exc)
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def partitions(self) -> list[tuple[str, int]]:
        subscription = self.options.subscription
        if isinstance(subscription, Assign):
            return sorted(subscription.partitions)
        return self.retrying("metadata", self._partitions_once)

    def _partitions_once(self) -> list[tuple[str, int]]:
        subscription = self.options.subscription
        self.round_trips += 1
        metadata = self._admin.list_topics(timeout=_TIMEOUT_S)
        found: list[tuple[str, int]] = []
        for name, topic in metadata.topics.items():
            if isinstance(subscription, Subscribe):
                wanted = name in subscription.topics
            else:
                assert isinstance(subscription, SubscribePattern)
                wanted = not name.startswith("__") and subscription.matches(name)
            if not wanted:
                continue
            if topic.error is not None:
                if topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted: the reader reports it per failOnDataLoss
                # a broker restarting or a leader moving: never mistake it for deleted data
                raise MetadataUnavailableError(f"metadata of topic {name} is unavailable now: {topic.error}")
            found.extend((name, p) for p in topic.partitions)
        return sorted(found)

    def _list_offsets(self, specs: dict[tuple[str, int], OffsetSpec]) -> dict[tuple[str, int], int]:
        """One batched ListOffsets (per leader) for every partition in ``specs``; -1 where none."""
        if not specs:
            return {}

        def once() -> dict[tuple[str, int], int]:
            self.round_trips += 1
            futures = self._admin.list_offsets(
                {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=self._isolation,
                request_timeout=_TIMEOUT_S,
            )
            result: dict[tuple[str, int], int] = {}
            for tp, future in futures.items():
                try:
                    result[(tp.topic, tp.partition)] = int(future.result().offset)
                except KafkaException as exc:
                    raise UnknownPartitionError(f"{tp.topic}:{tp.partition}: {exc}") from exc
            return result

        return self.retrying("offsets", once)

    def latest(self, partitions: Iterable[tuple[str, int]]) -> Position:
        """The high watermark (last stable offset with read_committed) of every partition."""
        return self._list_offsets(dict.fromkeys(partitions, OffsetSpec.latest()))

    def earliest(self, partitions: Iterable[tuple[str, int]]) -> Position:
        """The log start offset of every partition."""
        return self._list_offsets(dict.fromkeys(partitions, OffsetSpec.earliest()))

    def watermarks(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(log_start_offset, high_watermark or last stable offset) per partition."""
        tps = list(partitions)
        low, high = self.earliest(tps), self.latest(tps)
        return {tp: (low[tp], high[tp]) for tp in tps}

    def offsets_for_times(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
        """First offset with timestamp >= the given ms per partition; None when there is none."""
        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in sorted(wanted.items())})
        return {tp: offset if offset >= 0 else None for tp, offset in found.items()}

    def resolve(
        self,
        bound: OffsetBound,
        partitions: list[tuple[str, int]],
        watermarks: dict[tuple[str, int], tuple[int, int]],
        *,
        option: str,
    ) -> Position:
        """Concrete offsets for ``bound`` over ``partitions`` (``watermarks`` covers all of them)."""
        if bound.kind == "earliest":
            return {tp: watermarks[tp][0] for tp in partitions}
        if bound.kind == "latest":
            return {tp: watermarks[tp][1] for tp in partitions}
        if bound.kind == "offsets":
            named = {(t, p) for t, ps in bound.offsets.items() for p in ps}
            check_json_covers(option, named, set(partitions))
            result: Position = {}
            for tp in partitions:
                given = bound.offsets[tp[0]][tp[1]]
                if given == EARLIEST:
                    result[tp] = watermarks[tp][0]
                elif given == LATEST:
                    result[tp] = watermarks[tp][1]
                else:
                    result[tp] = given
            return result
        if bound.kind == "timestamp":
            wanted = dict.fromkeys(partitions, bound.timestamp)
        else:
            wanted = {}
            for tp in partitions:
                ts = bound.offsets.get(tp[0], {}).get(tp[1])
                if ts is None:
                    raise UnknownPartitionError(f"option {option} gives no timestamp for {tp[0]}:{tp[1]}")
                wanted[tp] = ts
        found = self.offsets_for_times(wanted)
        result = {}
        for tp in partitions:
            offset = found.get(tp)
            if offset is None:
                if option.startswith("starting") and not self.options.timestamp_strategy_latest:
                    raise NoOffsetForTimestampError(
                        f"option {option}: no record at or after timestamp {wanted[tp]} in {tp[0]}:{tp[1]} "
                        "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)"
                    )
                offset = watermarks[tp][1]
            result[tp] = offset
        return result
