"""What a client is told when a coordinator's records could not be appended to its internal topic.

Both of Kafka's coordinators translate the error of a failed append of their own records into an
error the client acts on (retry with this coordinator, find another one, or give up); most of the
translation is the same for both, and :data:`COORDINATOR_APPEND_ERRORS` holds that common part. Each
coordinator adds its own few entries (``group.responses`` and ``txn.responses``) where Kafka's two
translations differ.

Invariant: an error neither table names reaches the client unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from tidelog.protocol.errors import ErrorCode

__all__ = ["COORDINATOR_APPEND_ERRORS"]

COORDINATOR_APPEND_ERRORS: Final[Mapping[ErrorCode, ErrorCode]] = MappingProxyType(
    {
        # The internal topic's partition cannot take the write now: find the coordinator again later.
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
        # This broker no longer leads the partition (or its log dir failed): another one coordinates.
        ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
        ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
        # The coordinator's own batch was refused: a broker bug or misconfiguration, not the client's.
        ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)
"""The failed-append errors both coordinators translate alike."""
