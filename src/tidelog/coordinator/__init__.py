"""Group coordinator: a pure state machine over ``__consumer_offsets`` (Kafka's group coordinator shards).

Requests and time go in; responses, records to append and timer requests come out
(:class:`CoordinatorResult`). Durable state changes only by replaying records: live, as the shard
emits them, and when the runtime loads a partition. Nothing here does I/O or reads a clock.

The server runtime's entry point is :class:`GroupCoordinator`; the record formats (Kafka's bytes)
are in :mod:`tidelog.coordinator.records`. Classic groups (JoinGroup/SyncGroup) and KIP-848 consumer
groups (ConsumerGroupHeartbeat, server-side assignment from the :class:`TopicsImage` the runtime
provides) live side by side, never under the same group id.
"""

from __future__ import annotations

from tidelog.coordinator.config import GroupCoordinatorConfig
from tidelog.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState
from tidelog.coordinator.group import ClassicGroup
from tidelog.coordinator.group_coordinator import GROUP_COORDINATOR_REQUESTS, GroupCoordinator
from tidelog.coordinator.group_state import ClassicGroupState
from tidelog.coordinator.group_type import GroupType
from tidelog.coordinator.partitioning import java_string_hash, partition_for
from tidelog.coordinator.records import CoordinatorRecord, CoordinatorRecordError, UnsupportedRecordTypeError
from tidelog.coordinator.responses import append_error_to_response_error, error_response
from tidelog.coordinator.result import (
    CancelTimer,
    CoordinatorResult,
    DeferredResponse,
    ScheduleTimer,
    TimerKey,
    TimerKind,
    TimerOp,
)
from tidelog.coordinator.shard import GroupCoordinatorShard
from tidelog.coordinator.topics_image import TopicImage, TopicsImage

__all__ = [
    "GROUP_COORDINATOR_REQUESTS",
    "CancelTimer",
    "ClassicGroup",
    "ClassicGroupState",
    "ConsumerGroup",
    "ConsumerGroupState",
    "CoordinatorRecord",
    "CoordinatorRecordError",
    "CoordinatorResult",
    "DeferredResponse",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupCoordinatorShard",
    "GroupType",
    "ScheduleTimer",
    "TimerKey",
    "TimerKind",
    "TimerOp",
    "TopicImage",
    "TopicsImage",
    "UnsupportedRecordTypeError",
    "append_error_to_response_error",
    "error_response",
    "java_string_hash",
    "partition_for",
]
