"""KIP-951: a NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) answer to Produce (v10+) or Fetch (v12+; node
endpoints from v16) names the partition's current leader and its endpoint, so the client retries at the
new leader without a Metadata round trip.

Invariants: the leader and its epoch come from the metadata cache; a partition without a leader (or whose
leader has no endpoint on the request's listener) gets no hint, and the client refreshes its metadata as
before; each leader's endpoint is listed once per response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.protocol.errors import ErrorCode
from tidelog.server.metadata_cache import MetadataCache

__all__ = ["LEADER_HINT_ERRORS", "LeaderHint", "LeaderHints"]

LEADER_HINT_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


@dataclass(frozen=True, slots=True)
class LeaderHint:
    leader_id: int
    leader_epoch: int


@dataclass(slots=True)
class LeaderHints:
    """The hints of one response and the endpoints of the leaders they name."""

    metadata: MetadataCache
    listener: str | None
    endpoints: dict[int, tuple[str, int, str | None]] = field(default_factory=dict)

    def hint(self, topic: str, index: int, error: int) -> LeaderHint | None:
        """The current leader of ``topic-index`` when ``error`` is one a client retries at the new leader."""
        if error not in LEADER_HINT_ERRORS:
            return None
        partition = self.metadata.partition(topic, index)
        if partition is None or not partition.has_leader:
            return None
        broker = self.metadata.broker(partition.leader)
        endpoint = broker.endpoint(self.listener) if broker is not None else None
        if broker is None or endpoint is None:
            return None
        self.endpoints[broker.node_id] = (endpoint.host, endpoint.port, broker.rack)
        return LeaderHint(partition.leader, partition.leader_epoch)
