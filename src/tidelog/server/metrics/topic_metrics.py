"""Kafka's ``BrokerTopicMetrics``: messages and bytes in, bytes out, per topic and in total.

Invariants: counted once per partition of a produce request (messages = the appended batch's offset span,
bytes = its size) and once per partition of a consumer fetch response (bytes of the record data sent);
replica fetches are not bytes out (Kafka counts them as replication bytes). The all-topics totals are the
sums of the per-topic counts. Counters only grow, also for a topic that was deleted.
"""

from __future__ import annotations

__all__ = ["BrokerTopicMetrics", "TopicCounts"]


class TopicCounts:
    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0


class BrokerTopicMetrics:
    """Per-topic counters; the hot path adds to plain ints."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounts] = {}

    def _counts(self, topic: str) -> TopicCounts:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = TopicCounts()
        return counts

    def appended(self, topic: str, messages: int, nbytes: int) -> None:
        counts = self._counts(topic)
        counts.messages_in += messages
        counts.bytes_in += nbytes

    def sent(self, topic: str, nbytes: int) -> None:
        self._counts(topic).bytes_out += nbytes
