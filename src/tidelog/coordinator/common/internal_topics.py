"""The names of the coordinators' internal topics (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME`` and
``Topic.TRANSACTION_STATE_TOPIC_NAME``).

Invariant: these spellings are Kafka's, so operators, tools and clients that look for them (and refuse
to produce to them) recognise them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["GROUP_METADATA_TOPIC_NAME", "INTERNAL_TOPICS", "TRANSACTION_STATE_TOPIC_NAME"]

GROUP_METADATA_TOPIC_NAME: Final = "__consumer_offsets"
"""The group coordinator's topic: groups and committed offsets."""
TRANSACTION_STATE_TOPIC_NAME: Final = "__transaction_state"
"""The transaction coordinator's topic: each transactional id's latest metadata."""
INTERNAL_TOPICS: Final = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})
