"""What every coordinator shares: its records, the partition of a key, what a call hands back.

Invariant: this package imports only :mod:`tidelog.protocol` (never a coordinator package), so each
coordinator, and the server runtime that drives them, can depend on it.
"""

from __future__ import annotations

from tidelog.coordinator.common.partitioning import java_string_hash, partition_for
from tidelog.coordinator.common.records import CoordinatorRecord, CoordinatorRecordError

__all__ = ["CoordinatorRecord", "CoordinatorRecordError", "java_string_hash", "partition_for"]
