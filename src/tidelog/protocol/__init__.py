"""Sans-I/O Kafka wire protocol: primitives, generated message schemas, codec, framing, record batches."""

from tidelog.protocol.topic_partition import TopicPartition

__all__ = ["TopicPartition"]
