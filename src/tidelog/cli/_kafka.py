"""The confluent-kafka admin names the CLI uses, gathered in one place.

Import this module lazily, inside a command (it loads librdkafka): ``tidelog --help`` stays fast.
"""

from __future__ import annotations

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

__all__ = [
    "AdminClient",
    "AlterConfigOpType",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "ResourceType",
]
