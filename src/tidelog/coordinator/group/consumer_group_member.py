"""A member of a KIP-848 consumer group (Kafka's ``ConsumerGroupMember``) and its partition sets.

A member is an immutable value: every change builds a new one (:func:`dataclasses.replace`), and the
group replaces it only when a record is replayed. Its fields split the way its records do:
``ConsumerGroupMemberMetadataValue`` carries what the client declared (ids, subscription, rebalance
timeout, preferred server assignor), ``ConsumerGroupCurrentMemberAssignmentValue`` its reconciliation
(epochs, :class:`MemberState`, owned partitions and those it must still revoke).

Invariants: an :data:`Assignment` maps topic ids to non-empty frozensets of partition numbers (a
topic without partitions has no entry); ``assigned_partitions`` and ``partitions_pending_revocation``
never share a partition; a member epoch is >= 0 while the member is in the group, -1
(``LEAVE_GROUP_MEMBER_EPOCH``) only between its current-assignment tombstone and its removal, -2
(``LEAVE_GROUP_STATIC_MEMBER_EPOCH``) for a static member that left to come back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeAlias
from uuid import UUID

from tidelog.coordinator.group.records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
)
from tidelog.coordinator.group.topics_image import TopicsImage
from tidelog.protocol.messages import ConsumerGroupDescribeResponse

__all__ = [
    "EMPTY_ASSIGNMENT",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Assignment",
    "ConsumerGroupMember",
    "MemberState",
    "assignment_from_pairs",
    "assignment_size",
    "assignment_to_pairs",
    "is_subset",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
"""The epoch a member heartbeats with to leave (and the epoch of a member being removed)."""
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
"""The epoch a static member heartbeats with to leave temporarily, keeping its partitions."""

Assignment: TypeAlias = Mapping[UUID, frozenset[int]]
"""Partitions by topic id; never holds an empty set."""

EMPTY_ASSIGNMENT: Assignment = {}


def assignment_from_pairs(pairs: Iterable[tuple[UUID, Iterable[int]]]) -> dict[UUID, frozenset[int]]:
    """Build an :data:`Assignment` from (topic id, partitions) pairs; repeated topics are merged."""
    merged: dict[UUID, set[int]] = {}
    for topic_id, partitions in pairs:
        merged.setdefault(topic_id, set()).update(partitions)
    return {topic_id: frozenset(ps) for topic_id, ps in merged.items() if ps}


def assignment_to_pairs(assignment: Assignment) -> list[tuple[UUID, list[int]]]:
    """(topic id, sorted partitions) pairs in topic id order: the deterministic wire/record order."""
    return [(topic_id, sorted(assignment[topic_id])) for topic_id in sorted(assignment)]


def assignment_size(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


def is_subset(owned: Iterable[tuple[UUID, Iterable[int]]] | None, assignment: Assignment) -> bool:
    """Kafka's ``isSubset``: every owned partition is in ``assignment`` (``None`` is never a subset)."""
    if owned is None:
        return False
    return all(p in assignment.get(topic_id, ()) for topic_id, partitions in owned for p in partitions)


class MemberState(IntEnum):
    """Where a member is in its reconciliation; the value is the byte Kafka's records carry."""

    STABLE = 0
    """Reconciled with the target assignment of its epoch."""
    UNREVOKED_PARTITIONS = 1
    """Must revoke ``partitions_pending_revocation`` before it may move to the next epoch."""
    UNRELEASED_PARTITIONS = 2
    """At the target epoch, but waits for partitions their previous owners have not revoked yet."""
    UNKNOWN = 127
    """A state a newer Kafka wrote: the member is fenced and reconciled from scratch."""

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor_name: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = dataclasses.field(default_factory=dict)
    partitions_pending_revocation: Assignment = dataclasses.field(default_factory=dict)

    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    def with_epoch(
        self,
        member_epoch: int,
        state: MemberState,
        assigned_partitions: Assignment,
        partitions_pending_revocation: Assignment,
    ) -> ConsumerGroupMember:
        """The member moved to ``member_epoch`` (Kafka's ``Builder.updateMemberEpoch``: the epoch it
        had becomes its previous epoch, even when the epoch stays) with this reconciliation."""
        return dataclasses.replace(
            self,
            member_epoch=member_epoch,
            previous_member_epoch=self.member_epoch,
            state=state,
            assigned_partitions=assigned_partitions,
            partitions_pending_revocation=partitions_pending_revocation,
        )

    # -- records -------------------------------------------------------------------------------------

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=sorted(self.subscribed_topic_names),
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor_name,
        )

    def with_metadata(self, value: ConsumerGroupMemberMetadataValue) -> ConsumerGroupMember:
        return dataclasses.replace(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=frozenset(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor_name=value.server_assignor,
        )

    def current_assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        tps = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned_partitions=[
                tps(topic_id=t, partitions=ps) for t, ps in assignment_to_pairs(self.assigned_partitions)
            ],
            partitions_pending_revocation=[
                tps(topic_id=t, partitions=ps)
                for t, ps in assignment_to_pairs(self.partitions_pending_revocation)
            ],
        )

    def with_current_assignment(
        self, value: ConsumerGroupCurrentMemberAssignmentValue
    ) -> ConsumerGroupMember:
        return dataclasses.replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.of(value.state),
            assigned_partitions=assignment_from_pairs(
                (tp.topic_id, tp.partitions) for tp in value.assigned_partitions
            ),
            partitions_pending_revocation=assignment_from_pairs(
                (tp.topic_id, tp.partitions) for tp in value.partitions_pending_revocation
            ),
        )

    # -- ConsumerGroupDescribe -----------------------------------------------------------------------

    def describe(self, target: Assignment, topics: TopicsImage) -> ConsumerGroupDescribeResponse.Member:
        return ConsumerGroupDescribeResponse.Member(
            member_id=self.member_id,
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            member_epoch=self.member_epoch,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=sorted(self.subscribed_topic_names),
            subscribed_topic_regex=self.subscribed_topic_regex,
            assignment=_described_assignment(self.assigned_partitions, topics),
            target_assignment=_described_assignment(target, topics),
        )


def _described_assignment(
    assignment: Assignment, topics: TopicsImage
) -> ConsumerGroupDescribeResponse.Assignment:
    """Kafka's ``topicPartitionsFromMap``: topics the image no longer knows are left out."""
    described = ConsumerGroupDescribeResponse.Assignment()
    for topic_id, partitions in assignment_to_pairs(assignment):
        topic = topics.by_id.get(topic_id)
        if topic is not None:
            described.topic_partitions.append(
                ConsumerGroupDescribeResponse.TopicPartitions(
                    topic_id=topic_id, topic_name=topic.name, partitions=partitions
                )
            )
    return described
