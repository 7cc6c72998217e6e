"""The confluent-kafka admin names the CLI uses, gathered in one place and typed as ``Any``.

``confluent_kafka.admin`` has no ``__all__``, so mypy sees none of its names as exported; reading them
here once keeps the commands clean. Import this module lazily (it loads librdkafka).
"""

from __future__ import annotations

from typing import Any

import confluent_kafka.admin as _admin

_names: dict[str, Any] = vars(_admin)

AdminClient: Any = _names["AdminClient"]
AlterConfigOpType: Any = _names["AlterConfigOpType"]
ConfigEntry: Any = _names["ConfigEntry"]
ConfigResource: Any = _names["ConfigResource"]
ConfigSource: Any = _names["ConfigSource"]
NewPartitions: Any = _names["NewPartitions"]
NewTopic: Any = _names["NewTopic"]
OffsetSpec: Any = _names["OffsetSpec"]
ResourceType: Any = _names["ResourceType"]

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
