"""Where a request must go: a group's or transactional id's coordinator (FindCoordinator), each partition's
leader (Metadata), over one :class:`~tidelog.client.wire.WireClient` connection.

Invariants: retriable coordinator errors (COORDINATOR_NOT_AVAILABLE while ``__consumer_offsets`` is made,
COORDINATOR_LOAD_IN_PROGRESS) are retried every 0.1 s until the connection's timeout, anything else (or a retriable one
past the timeout, then marked ``retriable``) raises :class:`~tidelog.client.wire.WireError` naming the id
and the error; Metadata never creates a topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tidelog.client.wire import WireClient, WireError
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

__all__ = ["GROUP_KEY_TYPE", "TRANSACTION_KEY_TYPE", "find_coordinator", "partition_leaders"]

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


def find_coordinator(wire: WireClient, key: str, *, key_type: int = TRANSACTION_KEY_TYPE) -> tuple[int, str]:
    """(node id, host:port) of the coordinator of ``key`` (a transactional id; a group id with
    ``key_type=GROUP_KEY_TYPE``)."""
    version = wire.version_for(FindCoordinatorRequest, 6)
    if version < 1 and key_type != GROUP_KEY_TYPE:
        raise WireError(f"broker at {wire.address} cannot look up transaction coordinators")
    deadline = time.monotonic() + wire.timeout
    while True:
        if version >= 4:
            found: FindCoordinatorResponse | FindCoordinatorResponse.Coordinator = wire.call(
                FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]),
                version,
                expect=FindCoordinatorResponse,
            ).coordinators[0]
        else:
            found = wire.call(
                FindCoordinatorRequest(key=key, key_type=key_type), version, expect=FindCoordinatorResponse
            )
        error = found.error_code
        if error == ErrorCode.NONE:
            return found.node_id, f"{found.host}:{found.port}"
        retriable = ErrorCode.of(error).retriable
        if not retriable or time.monotonic() > deadline:
            raise WireError(
                f"cannot find the coordinator of {key!r}: {ErrorCode.name_of(error)}", retriable=retriable
            )
        time.sleep(0.1)


def partition_leaders(
    wire: WireClient, topics: Iterable[str] | None
) -> tuple[dict[int, str], dict[str, MetadataResponse.MetadataResponseTopic]]:
    """Metadata (never creating a topic): ``({node id: host:port}, {topic name: its metadata})`` for
    ``topics``, or for every topic when None (internal ones included; callers filter ``is_internal``)."""
    version = wire.version_for(MetadataRequest, 12)
    requested = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    if requested is None and version == 0:
        requested = []  # v0 lists every topic with an empty array
    metadata = wire.call(
        MetadataRequest(topics=requested, allow_auto_topic_creation=False), version, expect=MetadataResponse
    )
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    return brokers, {t.name: t for t in metadata.topics if t.name is not None}
