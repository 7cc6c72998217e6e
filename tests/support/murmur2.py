"""Kafka's Java ``Utils.murmur2`` and the default partitioner's choice for a keyed record, in Python.

For tests: the partition a Java producer (and so Spark's ``format("kafka")``) picks for a key is
``toPositive(murmur2(key)) % partitions``. :data:`PUBLISHED` are the hash values Kafka's own
``UtilsTest.testMurmur2`` asserts (apache/kafka clients/src/test/java/org/apache/kafka/common/utils/
UtilsTest.java) and that librdkafka's ``rdmurmur2.c`` unit test checks its Java-compatible hash against.
"""

from __future__ import annotations

from tidelog.spark.murmur2 import murmur2

__all__ = ["PUBLISHED", "java_murmur2", "java_partition"]

#: key -> Java's murmur2 (a signed 32-bit int), from Kafka's UtilsTest.testMurmur2.
PUBLISHED = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


java_murmur2 = murmur2
"""``org.apache.kafka.common.utils.Utils.murmur2(data)``: the product's port (the sink's two-phase writer
partitions with it), checked against :data:`PUBLISHED` by the tests that use it."""


def java_partition(key: bytes, partitions: int) -> int:
    """The Java producer's partition for a keyed record: ``Utils.toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
