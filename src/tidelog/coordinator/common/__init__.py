"""What every coordinator shares: its records, the partition of a key, what a call hands back, and the
entry points a server runtime drives.

Invariant: this package imports only :mod:`tidelog.protocol` (never a coordinator package), so each
coordinator, and the server runtime that drives them, can depend on it.
"""

from __future__ import annotations

from tidelog.coordinator.common.append_errors import COORDINATOR_APPEND_ERRORS
from tidelog.coordinator.common.coordinator_protocol import PartitionedCoordinator
from tidelog.coordinator.common.internal_topics import (
    GROUP_METADATA_TOPIC_NAME,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC_NAME,
)
from tidelog.coordinator.common.partitioning import java_string_hash, partition_for
from tidelog.coordinator.common.records import CoordinatorRecord, CoordinatorRecordError
from tidelog.coordinator.common.result import (
    CancelTimer,
    CoordinatorResult,
    DeferredResponse,
    ScheduleTimer,
    TimerOp,
    WriteTxnMarkers,
)

__all__ = [
    "COORDINATOR_APPEND_ERRORS",
    "GROUP_METADATA_TOPIC_NAME",
    "INTERNAL_TOPICS",
    "TRANSACTION_STATE_TOPIC_NAME",
    "CancelTimer",
    "CoordinatorRecord",
    "CoordinatorRecordError",
    "CoordinatorResult",
    "DeferredResponse",
    "PartitionedCoordinator",
    "ScheduleTimer",
    "TimerOp",
    "WriteTxnMarkers",
    "java_string_hash",
    "partition_for",
]
