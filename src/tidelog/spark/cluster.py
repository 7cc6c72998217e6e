"""What the driver asks the broker: partitions of a subscription, watermarks, offsets by timestamp.

Invariants:

- One confluent-kafka ``Consumer`` (assign-only, never subscribed, never committing) per
  :class:`ClusterView`; its isolation level is the query's, so with ``read_committed`` the high watermark
  it reports is the last stable offset, and a read never waits for an open transaction.
- :meth:`ClusterView.partitions` is the sorted list of topic-partitions the subscription covers now
  (internal topics, those starting with ``__``, never match a pattern). A subscribed topic the broker
  reports with an error other than "unknown topic" raises :class:`MetadataUnavailableError`: a topic
  that is only unavailable is never taken for a deleted one.
- :meth:`ClusterView.resolve` turns an :class:`~tidelog.spark.options.OffsetBound` into concrete offsets,
  each within ``[log_start_offset, high_watermark]`` of its partition except explicit JSON offsets, which
  are kept as given (the reader reports them per ``failOnDataLoss`` if retention removed them).
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tidelog.spark.offsets import Position
from tidelog.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    OffsetBound,
    ReaderOptions,
    Subscribe,
    SubscribePattern,
)

__all__ = ["ClusterView", "MetadataUnavailableError", "NoOffsetForTimestampError", "UnknownPartitionError"]

_TIMEOUT_S = 30.0


class MetadataUnavailableError(RuntimeError):
    """The broker could not describe a subscribed topic now (it may be restarting); retry later."""


class UnknownPartitionError(RuntimeError):
    """A topic-partition named in the options does not exist on the broker."""


class NoOffsetForTimestampError(RuntimeError):
    """No record at or after the requested timestamp (startingOffsetsByTimestampStrategy=error)."""


class ClusterView:
    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self._consumer = Consumer(options.consumer_config("driver"))

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> ClusterView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self) -> list[tuple[str, int]]:
        subscription = self.options.subscription
        if isinstance(subscription, Assign):
            return sorted(subscription.partitions)
        metadata = self._consumer.list_topics(timeout=_TIMEOUT_S)
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

    def watermarks(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(log_start_offset, high_watermark or last stable offset) per partition."""
        result: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, partition in partitions:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=_TIMEOUT_S, cached=False
                )
            except KafkaException as exc:
                raise UnknownPartitionError(f"{topic}:{partition}: {exc}") from exc
            result[(topic, partition)] = (int(low), int(high))
        return result

    def offsets_for_times(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
        """First offset with timestamp >= the given ms per partition; None when there is none."""
        if not wanted:
            return {}
        query = [TopicPartition(t, p, ts) for (t, p), ts in sorted(wanted.items())]
        answers = self._consumer.offsets_for_times(query, timeout=_TIMEOUT_S)
        result: dict[tuple[str, int], int | None] = {}
        for tp in answers:
            if tp.error is not None:
                raise UnknownPartitionError(f"{tp.topic}:{tp.partition}: {tp.error}")
            result[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return result

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
            missing = sorted(named - set(partitions))
            if missing:
                raise UnknownPartitionError(
                    f"option {option} names partitions the query does not read: "
                    + ", ".join(f"{t}:{p}" for t, p in missing)
                )
            result: Position = {}
            for tp in partitions:
                given = bound.offsets.get(tp[0], {}).get(tp[1])
                if given is None:
                    given = EARLIEST if bound.default == "earliest" else LATEST
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
