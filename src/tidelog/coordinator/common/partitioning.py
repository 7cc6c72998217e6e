"""Which ``__consumer_offsets`` partition coordinates a group: Kafka's ``partitionFor``.

Invariants: :func:`java_string_hash` is ``java.lang.String.hashCode`` bit for bit (a signed 32-bit sum
over UTF-16 code units, so characters outside the BMP count as two surrogate units), and
:func:`partition_for` is ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` where
``Utils.abs(Integer.MIN_VALUE) == 0``. A group therefore lands on the same partition number as on a
Kafka broker with the same partition count, and the same committed-offset records stay readable.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]

_INT32_MIN = -(1 << 31)


def java_string_hash(value: str) -> int:
    """``value.hashCode()`` as Java computes it: ``s[0]*31^(n-1) + ... + s[n-1]`` in int32 arithmetic."""
    data = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that ``Integer.MIN_VALUE`` maps to 0."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group_id``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return _java_abs(java_string_hash(group_id)) % num_partitions
