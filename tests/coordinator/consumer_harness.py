"""Driving KIP-848 consumer groups through the coordinator harness: heartbeats and a model client.

:class:`Member` behaves like a librdkafka consumer with ``group.protocol=consumer``: it joins with
epoch 0 and a full request, adopts what the coordinator assigns, revokes what it is no longer given
(acknowledging with its owned partitions in the next heartbeat), rejoins with epoch 0 when fenced,
and leaves with epoch -1 (or -2 for a static member that will be back). Revoking takes it until its
next heartbeat: meanwhile it still consumes the partitions it gives up (``revoking``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.coordinator.harness import Harness

from tidelog.coordinator.group import ConsumerGroup, GroupCoordinatorConfig, TopicImage, TopicsImage
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

SESSION_MS = 45_000
HEARTBEAT_MS = 5_000
REBALANCE_MS = 30_000


def topic_id(name: str) -> uuid.UUID:
    """A stable topic id per name (uuid5), so tests can name partitions by topic."""
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def image(**partitions: int) -> TopicsImage:
    return TopicsImage(TopicImage(name, topic_id(name), n) for name, n in partitions.items())


Owned = dict[str, set[int]]


def by_name(assignment: Any, topics: TopicsImage) -> Owned:
    """An assignment (response TopicPartitions list, or topic id -> partitions) keyed by topic name."""
    names = {t.topic_id: t.name for t in topics.by_name.values()}
    if isinstance(assignment, dict):
        return {names[t]: set(ps) for t, ps in assignment.items() if ps}
    return {names[tp.topic_id]: set(tp.partitions) for tp in assignment if tp.partitions}


class ConsumerHarness(Harness):
    def __init__(self, topics: TopicsImage | None = None, **config: Any) -> None:
        super().__init__(GroupCoordinatorConfig(offsets_topic_num_partitions=1, **config))
        self.set_topics(topics if topics is not None else image(t=6))

    def set_topics(self, topics: TopicsImage) -> None:
        self.topics = topics
        self.coordinator.set_topics_image(topics)

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        return self.shard.state.consumer_groups[group_id]

    def heartbeat_cg(self, version: int = 1, **fields: Any) -> ConsumerGroupHeartbeatResponse:
        response = self.send(
            ConsumerGroupHeartbeatRequest(**fields), version, client_id=fields.get("member_id", "c")
        )
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        return response

    def describe_cg(self, *group_ids: str) -> list[ConsumerGroupDescribeResponse.DescribedGroup]:
        response = self.send(ConsumerGroupDescribeRequest(group_ids=list(group_ids)), 0)
        assert isinstance(response, ConsumerGroupDescribeResponse)
        return response.groups


@dataclass
class Member:
    """A well-behaved consumer-protocol client."""

    h: ConsumerHarness
    member_id: str
    group_id: str = "g"
    topics: tuple[str, ...] = ("t",)
    instance_id: str | None = None
    assignor: str | None = None
    regex: str | None = None
    epoch: int = 0
    owned: Owned = field(default_factory=dict)
    revoking: Owned = field(default_factory=dict)
    """Partitions it was told to give up and still consumes (until its next heartbeat)."""
    last: ConsumerGroupHeartbeatResponse | None = None
    send_full: bool = True
    errors: list[int] = field(default_factory=list)

    def owned_wire(self) -> list[ConsumerGroupHeartbeatRequest.TopicPartitions]:
        return [
            ConsumerGroupHeartbeatRequest.TopicPartitions(
                topic_id=self.h.topics.by_name[t].topic_id, partitions=sorted(ps)
            )
            for t, ps in sorted(self.owned.items())
            if ps and t in self.h.topics.by_name
        ]

    def consuming(self) -> set[tuple[str, int]]:
        """Every partition it reads from right now (owned or still being revoked)."""
        return {(t, p) for part in (self.owned, self.revoking) for t, ps in part.items() for p in ps}

    def heartbeat(self) -> ConsumerGroupHeartbeatResponse:
        self.revoking = {}  # revocations finished: this heartbeat acknowledges them
        full = self.send_full or self.epoch == 0
        request: dict[str, Any] = {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": self.instance_id,
            "rebalance_timeout_ms": REBALANCE_MS if full else -1,
            "subscribed_topic_names": list(self.topics) if full else None,
            "subscribed_topic_regex": self.regex if full else None,
            "server_assignor": self.assignor,
            "topic_partitions": ([] if self.epoch == 0 else self.owned_wire()) if full else self.owned_wire(),
        }
        response = self.h.heartbeat_cg(**request)
        self.last = response
        if response.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.errors.append(response.error_code)
            self.owned, self.epoch = {}, 0  # partitions lost (it stops consuming at once); rejoin
            return response
        if response.error_code:
            self.errors.append(response.error_code)
            return response
        self.epoch = response.member_epoch
        if response.assignment is not None:
            # Take what is new at once; revoke what is gone (done by the next heartbeat, which
            # acknowledges it by no longer listing those partitions).
            new = by_name(response.assignment.topic_partitions, self.h.topics)
            for topic, partitions in self.owned.items():
                gone = partitions - new.get(topic, set())
                if gone:
                    self.revoking.setdefault(topic, set()).update(gone)
            self.owned = new
        self.send_full = False
        return response

    def leave(self, static_pause: bool = False) -> ConsumerGroupHeartbeatResponse:
        epoch = -2 if static_pause else -1
        response = self.h.heartbeat_cg(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id
        )
        self.owned, self.revoking, self.epoch = {}, {}, 0
        return response

    def partitions(self, topic: str = "t") -> set[int]:
        return set(self.owned.get(topic, set()))


def settle(h: ConsumerHarness, members: list[Member], rounds: int = 10) -> None:
    """Every member heartbeats, round after round, until nothing changes."""
    for _ in range(rounds):
        before = [(m.epoch, {t: frozenset(p) for t, p in m.owned.items()}) for m in members]
        for m in members:
            m.heartbeat()
        after = [(m.epoch, {t: frozenset(p) for t, p in m.owned.items()}) for m in members]
        if before == after:
            return
    raise AssertionError(f"the group did not settle: {[(m.member_id, m.epoch, m.owned) for m in members]}")
