"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor maps every partition of the subscribed topics to one subscribed member. It sees each
member's subscription (topic ids) and its current target assignment, and the partition count of every
subscribed topic; it knows nothing of epochs or revocation (the reconciliation hands partitions over
safely, whatever the assignor decides).

- ``uniform`` (Kafka's ``UniformAssignor``, the default): spreads partitions so that no member that
  could take a partition from another holds two or more fewer than it; with identical subscriptions
  every member gets ``floor(P / N)`` or ``ceil(P / N)``. It is sticky: a member keeps the partitions
  of its current target as long as that balance allows, so a join or a leave moves few partitions.
- ``range`` (Kafka's ``RangeAssignor``): per topic, the subscribed members in member id order get
  consecutive ranges, the first ``P mod N`` one partition more; members subscribed to the same topics
  get the same partition numbers of each (co-partitioning). Unlike Kafka's it is not sticky.

Invariants: deterministic (members and topics are visited in sorted order, ties broken by member
id); every partition of a topic with at least one subscriber is assigned to exactly one subscriber;
every member appears in the result, possibly with nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from tidelog.coordinator.group.consumer_group_member import Assignment

__all__ = [
    "ASSIGNORS",
    "MemberSubscription",
    "PartitionAssignor",
    "RangeAssignor",
    "UniformAssignor",
    "assignor_name",
]

_TopicPartition = tuple[UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What an assignor knows of a member."""

    member_id: str
    subscribed_topic_ids: frozenset[UUID]
    current: Assignment
    """The member's current target assignment (for stickiness)."""
    instance_id: str | None = None
    rack_id: str | None = None


class PartitionAssignor(Protocol):
    @property
    def name(self) -> str: ...

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[UUID, int]
    ) -> dict[str, dict[UUID, frozenset[int]]]:
        """``partitions``: partition count of every subscribed topic that exists."""
        ...


def _result(owned: Mapping[str, set[_TopicPartition]]) -> dict[str, dict[UUID, frozenset[int]]]:
    result: dict[str, dict[UUID, frozenset[int]]] = {}
    for member_id, tps in owned.items():
        by_topic: dict[UUID, set[int]] = {}
        for topic_id, partition in tps:
            by_topic.setdefault(topic_id, set()).add(partition)
        result[member_id] = {topic_id: frozenset(ps) for topic_id, ps in by_topic.items()}
    return result


class UniformAssignor:
    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[UUID, int]
    ) -> dict[str, dict[UUID, frozenset[int]]]:
        member_ids = sorted(members)
        topics = sorted(partitions)
        eligible = {t: [m for m in member_ids if t in members[m].subscribed_topic_ids] for t in topics}
        owned: dict[str, set[_TopicPartition]] = {m: set() for m in member_ids}
        owner: dict[_TopicPartition, str] = {}

        # 1. Stickiness: keep what the current target gave, while it is still subscribed and exists.
        for m in member_ids:
            current = members[m].current
            for topic_id in sorted(current):
                if topic_id not in partitions or topic_id not in members[m].subscribed_topic_ids:
                    continue
                for partition in sorted(current[topic_id]):
                    tp = (topic_id, partition)
                    if partition < partitions[topic_id] and tp not in owner:
                        owner[tp] = m
                        owned[m].add(tp)

        # 2. Everything else goes to the eligible member holding the fewest partitions.
        for topic_id in topics:
            candidates = eligible[topic_id]
            if not candidates:
                continue
            for partition in range(partitions[topic_id]):
                tp = (topic_id, partition)
                if tp in owner:
                    continue
                m = min(candidates, key=lambda c: (len(owned[c]), c))
                owner[tp] = m
                owned[m].add(tp)

        # 3. Balance: move partitions from a member to an eligible one holding two or more fewer.
        # Each move lowers the sum of squared counts, so this ends.
        while self._move_one(member_ids, eligible, owned, owner):
            pass
        return _result(owned)

    @staticmethod
    def _move_one(
        member_ids: list[str],
        eligible: Mapping[UUID, list[str]],
        owned: dict[str, set[_TopicPartition]],
        owner: dict[_TopicPartition, str],
    ) -> bool:
        for donor in sorted(member_ids, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[donor], reverse=True):
                receivers = [r for r in eligible[tp[0]] if len(owned[r]) + 1 < len(owned[donor])]
                if receivers:
                    receiver = min(receivers, key=lambda r: (len(owned[r]), r))
                    owned[donor].discard(tp)
                    owned[receiver].add(tp)
                    owner[tp] = receiver
                    return True
        return False


class RangeAssignor:
    name = "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[UUID, int]
    ) -> dict[str, dict[UUID, frozenset[int]]]:
        member_ids = sorted(members)
        owned: dict[str, set[_TopicPartition]] = {m: set() for m in member_ids}
        for topic_id in sorted(partitions):
            subscribers = [m for m in member_ids if topic_id in members[m].subscribed_topic_ids]
            if not subscribers:
                continue
            quota, extra = divmod(partitions[topic_id], len(subscribers))
            start = 0
            for i, m in enumerate(subscribers):
                count = quota + (1 if i < extra else 0)
                owned[m].update((topic_id, p) for p in range(start, start + count))
                start += count
        return _result(owned)


ASSIGNORS: Mapping[str, PartitionAssignor] = {"uniform": UniformAssignor(), "range": RangeAssignor()}
"""The server assignors by the name clients ask for (``group.remote.assignor``)."""

_KAFKA_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_name(configured: str) -> str:
    """An entry of ``group.consumer.assignors`` (a name or Kafka's class name) as an assignor name."""
    name = _KAFKA_CLASS_NAMES.get(configured.strip(), configured.strip())
    if name not in ASSIGNORS:
        raise ValueError(f"unknown consumer group assignor {configured!r} (known: {sorted(ASSIGNORS)})")
    return name
