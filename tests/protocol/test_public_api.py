"""The public surface of tidelog.protocol's package, pinned."""

from __future__ import annotations

import tidelog.protocol
import tidelog.storage
from tidelog.protocol import TopicPartition


def test_exports() -> None:
    assert tidelog.protocol.__all__ == ["TopicPartition"]


def test_topic_partition_is_one_type_for_every_layer() -> None:
    tp = TopicPartition("orders", 3)
    assert str(tp) == "orders-3"
    assert tidelog.storage.TopicPartition is TopicPartition
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]) == [
        ("a", 1),
        ("a", 2),
        ("b", 0),
    ]
