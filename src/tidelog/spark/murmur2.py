"""Kafka's default partitioner for a keyed record, in Python: the partition a Java producer (and so Spark's
``format("kafka")``, and the sink's librdkafka producer with ``partitioner=murmur2_random``) picks.

Used by the two-phase exactly-once writer (:mod:`tidelog.spark.two_phase`), which writes through tidelog's
own protocol client and so chooses partitions itself.

Invariants: :func:`murmur2` is ``org.apache.kafka.common.utils.Utils.murmur2`` (32-bit arithmetic, signed
result); :func:`partition_for` is ``Utils.toPositive(murmur2(key)) % partitions`` for a key, and a partition
drawn at random for a null key (librdkafka's ``murmur2_random``).
"""

from __future__ import annotations

import random

__all__ = ["murmur2", "partition_for"]

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Java's ``Utils.murmur2(data)``."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
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


def partition_for(key: bytes | None, partitions: int, rng: random.Random | None = None) -> int:
    """The partition of a record with ``key`` in a topic of ``partitions`` partitions."""
    if key is None:
        return (rng or random).randrange(partitions)
    return (murmur2(key) & 0x7FFFFFFF) % partitions
