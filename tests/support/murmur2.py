"""Kafka's Java ``Utils.murmur2`` and the default partitioner's choice for a keyed record, in Python.

A port for tests: the partition a Java producer (and so Spark's ``format("kafka")``) picks for a key is
``toPositive(murmur2(key)) % partitions``. :data:`PUBLISHED` are the hash values Kafka's own
``UtilsTest.testMurmur2`` asserts (apache/kafka clients/src/test/java/org/apache/kafka/common/utils/
UtilsTest.java) and that librdkafka's ``rdmurmur2.c`` unit test checks its Java-compatible hash against.
"""

from __future__ import annotations

__all__ = ["PUBLISHED", "java_murmur2", "java_partition"]

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995

#: key -> Java's murmur2 (a signed 32-bit int), from Kafka's UtilsTest.testMurmur2.
PUBLISHED = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def java_murmur2(data: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2(data)``: 32-bit arithmetic, signed result."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """The Java producer's partition for a keyed record: ``Utils.toPositive(murmur2(key)) % partitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions
