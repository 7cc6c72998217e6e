"""A share group's membership (ShareGroupHeartbeat) and its server-side assignment.

Invariants:
- A member joins with epoch 0 (keeping the member id it sends, or given a new one), leaves with epoch -1,
  and otherwise sends its current epoch (or the one before, if an answer was lost); any other epoch is
  FENCED_MEMBER_EPOCH, an unknown member id UNKNOWN_MEMBER_ID.
- Share groups spread partitions without exclusivity: every member is assigned every partition of every
  topic it subscribes to. The group epoch rises whenever a member joins, leaves, is fenced, changes its
  subscription or a subscribed topic changes its partitions; members take the new epoch at their next
  heartbeat (no revocation step is needed, as no partition is ever taken from anyone).
- A member that has not heartbeated for the session timeout is fenced by :meth:`ShareGroup.expire`, which
  names it so the caller releases the records it holds.
- :meth:`ShareGroup.image` is the group's durable part as ``__consumer_offsets`` records hold it
  (:mod:`tidelog.coordinator.group.share_group_records`); :meth:`ShareGroup.restore` rebuilds the group from
  it, every member's session starting at the restore (as Kafka restarts session timers at load).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from tidelog.coordinator.group.share_group_records import ShareGroupImage, ShareMemberImage
from tidelog.protocol.errors import ErrorCode

__all__ = ["HeartbeatResult", "ShareGroup", "ShareMember"]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    previous_epoch: int
    subscribed: tuple[str, ...]
    client_id: str
    client_host: str
    rack_id: str | None
    last_heartbeat_ms: int
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    member: ShareMember | None = None
    left: str | None = None
    """A member that left (epoch -1): the caller releases its records."""


class ShareGroup:
    """One share group's members and epochs."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self._topics: dict[str, int] = {}

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def image(self, topic_id: Callable[[str], UUID | None]) -> ShareGroupImage:
        """The group's durable part; ``topic_id`` names topics by id (a topic without one is left out)."""
        image = ShareGroupImage(self.group_id, self.group_epoch, self.group_epoch)
        for member in self.members.values():
            assignment = {
                tid: parts
                for topic, parts in member.assignment.items()
                if (tid := topic_id(topic)) is not None
            }
            image.members[member.member_id] = ShareMemberImage(
                member.member_id,
                rack_id=member.rack_id,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed=member.subscribed,
                member_epoch=member.member_epoch,
                previous_epoch=member.previous_epoch,
                assignment=assignment,
                target=dict(assignment),
                has_metadata=True,
            )
        return image

    @classmethod
    def restore(
        cls, image: ShareGroupImage, topic_name: Callable[[UUID], str | None], now_ms: int
    ) -> ShareGroup:
        """The group ``image`` describes, each member's session starting at ``now_ms``."""
        group = cls(image.group_id)
        group.group_epoch = image.group_epoch
        for m in image.members.values():
            assignment = {
                name: parts for tid, parts in m.assignment.items() if (name := topic_name(tid)) is not None
            }
            group.members[m.member_id] = ShareMember(
                m.member_id,
                m.member_epoch,
                m.previous_epoch,
                tuple(sorted(m.subscribed)),
                m.client_id,
                m.client_host,
                m.rack_id,
                now_ms,
                assignment,
            )
        assigned = {t: len(p) for member in group.members.values() for t, p in member.assignment.items()}
        group._topics = {t: assigned.get(t, 0) for t in group.subscribed_topics()}
        return group

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def heartbeat(
        self,
        *,
        member_id: str,
        member_epoch: int,
        subscribed: list[str] | None,
        rack_id: str | None,
        client_id: str,
        client_host: str,
        now_ms: int,
        partitions_of: Mapping[str, int],
        new_member_id: Callable[[], str],
        max_size: int,
    ) -> HeartbeatResult:
        """One ShareGroupHeartbeat; ``partitions_of`` maps each existing topic to its partition count."""
        if member_epoch == -1:
            if self.members.pop(member_id, None) is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID)
            self.group_epoch += 1
            return HeartbeatResult(ErrorCode.NONE, left=member_id)
        member = self.members.get(member_id)
        if member_epoch == 0:
            if member is None:
                if len(self.members) >= max_size:
                    return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED)
                if subscribed is None:
                    return HeartbeatResult(ErrorCode.INVALID_REQUEST)
                member = ShareMember(
                    member_id or new_member_id(), 0, 0, (), client_id, client_host, rack_id, now_ms
                )
                self.members[member.member_id] = member
                self.group_epoch += 1
        elif member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID)
        elif member_epoch not in (member.member_epoch, member.previous_epoch):
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH)
        member.last_heartbeat_ms = now_ms
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and tuple(sorted(subscribed)) != member.subscribed:
            member.subscribed = tuple(sorted(subscribed))
            self.group_epoch += 1
        counts = {t: partitions_of.get(t, 0) for t in self.subscribed_topics()}
        if counts != self._topics:
            self._topics = counts
            self.group_epoch += 1
        if member.member_epoch != self.group_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = self.group_epoch
        member.assignment = {
            t: tuple(range(n)) for t in member.subscribed if (n := partitions_of.get(t, 0)) > 0
        }
        return HeartbeatResult(ErrorCode.NONE, member)

    def expire(self, now_ms: int, session_timeout_ms: int) -> list[str]:
        """Fence the members whose session ran out; returns their ids."""
        gone = [
            m for m, member in self.members.items() if now_ms - member.last_heartbeat_ms > session_timeout_ms
        ]
        for member_id in gone:
            del self.members[member_id]
        if gone:
            self.group_epoch += 1
        return gone
