"""A member of a classic group (Kafka's ``ClassicGroupMember``).

Invariants: ``supported_protocols`` keeps the member's preference order (first is preferred) and is
never empty once the member is in a group; ``awaiting_join`` / ``awaiting_sync`` hold the handle of the
member's parked JoinGroup / SyncGroup, if any (the group keeps its count of awaiting joins in step);
``assignment`` is what the leader last gave the member (empty until then).
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass

from tidelog.coordinator.common.result import DeferredResponse
from tidelog.protocol.messages import DescribeGroupsResponse, JoinGroupRequest

__all__ = ["ClassicGroupMember", "Protocols", "protocols_from_request"]

Protocols = tuple[tuple[str, bytes], ...]
"""A member's supported protocols: ``(name, metadata)`` pairs, preferred first."""


def protocols_from_request(protocols: Iterable[JoinGroupRequest.JoinGroupRequestProtocol]) -> Protocols:
    return tuple((p.name, bytes(p.metadata)) for p in protocols)


@dataclass(slots=True, eq=False)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: Protocols
    assignment: bytes = b""
    awaiting_join: DeferredResponse | None = None
    awaiting_sync: DeferredResponse | None = None
    is_new: bool = False
    """Set when the member is added, cleared when its first join phase completes: a new member's
    session may expire even while its JoinGroup is parked."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a session expiry should spare the member: one parked in a rebalance is alive."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocol_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.supported_protocols)

    def metadata(self, protocol: str | None) -> bytes:
        """The member's metadata for ``protocol`` (empty if it does not support it)."""
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: Protocols) -> bool:
        """Whether ``protocols`` is exactly what the member already declared (names, metadata, order)."""
        return protocols == self.supported_protocols

    def vote(self, candidates: Set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (which all members support)."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def describe(self, protocol: str | None) -> DescribeGroupsResponse.DescribedGroupMember:
        return DescribeGroupsResponse.DescribedGroupMember(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            member_metadata=self.metadata(protocol),
            member_assignment=self.assignment,
        )

    def describe_no_metadata(self) -> DescribeGroupsResponse.DescribedGroupMember:
        """What DescribeGroups shows of a member while the group is not Stable."""
        return DescribeGroupsResponse.DescribedGroupMember(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
        )
