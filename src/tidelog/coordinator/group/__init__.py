"""Group coordinator: a pure state machine over ``__consumer_offsets`` (Kafka's group coordinator shards).

Requests and time go in; responses, records to append and timer requests come out
(:class:`~tidelog.coordinator.common.result.CoordinatorResult`). Durable state changes only by replaying records: live, as the shard
emits them, and when the runtime loads a partition. Nothing here does I/O or reads a clock.

The server runtime's entry point is :class:`GroupCoordinator`; the record formats (Kafka's bytes)
are in :mod:`tidelog.coordinator.group.records`. Classic groups (JoinGroup/SyncGroup; the
``classic_*`` modules) and KIP-848 consumer groups (ConsumerGroupHeartbeat, server-side assignment
from the :class:`TopicsImage` the runtime provides; the ``consumer_*`` modules) live side by side,
never under the same group id; committed offsets (``offset*``, ``txn_offset*``) belong to both.
"""

from __future__ import annotations

from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.config import GroupCoordinatorConfig
from tidelog.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupState
from tidelog.coordinator.group.coordinator import GROUP_COORDINATOR_REQUESTS, GroupCoordinator
from tidelog.coordinator.group.group_type import GroupType
from tidelog.coordinator.group.records import UnsupportedRecordTypeError
from tidelog.coordinator.group.responses import group_append_error_to_response_error, group_error_response
from tidelog.coordinator.group.shard import GroupCoordinatorShard
from tidelog.coordinator.group.timers import TimerKey, TimerKind
from tidelog.coordinator.group.topics_image import TopicImage, TopicsImage

__all__ = [
    "GROUP_COORDINATOR_REQUESTS",
    "ClassicGroup",
    "ClassicGroupState",
    "ConsumerGroup",
    "ConsumerGroupState",
    "GroupCoordinator",
    "GroupCoordinatorConfig",
    "GroupCoordinatorShard",
    "GroupType",
    "TimerKey",
    "TimerKind",
    "TopicImage",
    "TopicsImage",
    "UnsupportedRecordTypeError",
    "group_append_error_to_response_error",
    "group_error_response",
]
