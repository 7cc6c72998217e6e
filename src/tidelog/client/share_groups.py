"""Reading share groups (KIP-932) over the wire, as ``kafka-share-groups.sh`` does: the list, one group's
members and start offsets, and the records its members hold (tidelog's pending tag, Redis's XPENDING).
Shared by ``tidelog share-groups`` and the web console; confluent-kafka's AdminClient has no share-group
admin.

Invariants:
- ``list_share_groups`` asks every broker (ListGroups v5, type ``share``: a broker answers the groups it
  coordinates) and merges, sorted.
- Group-level requests (ShareGroupDescribe, DescribeShareGroupOffsets) go to the group's coordinator
  (FindCoordinator, key type GROUP); ``pending_records`` asks each partition's leader, where acquisitions
  live. A group that does not exist raises :class:`ShareGroupNotFoundError` naming it and Kafka's code.
- ``connect(host:port)`` opens the other connections (the caller's security and timeout); they are closed
  before a function returns. A broker that cannot be reached raises :class:`~tidelog.client.wire.WireError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from tidelog.client.lookup import GROUP_KEY_TYPE, find_coordinator, partition_leaders
from tidelog.client.wire import WireClient, WireError
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from tidelog.protocol.share_pending import PENDING_TAG, decode_pending

__all__ = [
    "Connect",
    "PendingRecords",
    "ShareGroupDescription",
    "ShareGroupNotFoundError",
    "ShareMember",
    "coordinator_of",
    "describe_share_group",
    "list_share_groups",
    "pending_records",
    "share_group_offsets",
]

Connect = Callable[[str], AbstractContextManager[WireClient]]
"""Opens a connection to ``host:port`` (closed when the ``with`` block ends)."""

ShareOffsetsGroup = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup


class ShareGroupNotFoundError(WireError):
    """The group is not a share group this cluster knows."""

    def __init__(self, group_id: str, error_code: int) -> None:
        super().__init__(f"share group not found: {group_id} ({ErrorCode.name_of(error_code)})")
        self.group_id = group_id
        self.error_code = error_code


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    assignment: tuple[tuple[str, tuple[int, ...]], ...]
    """(topic, partitions), by topic."""


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str
    epoch: int
    members: tuple[ShareMember, ...]
    """By member id."""
    start_offsets: tuple[tuple[str, int, int], ...]
    """(topic, partition, start offset) of each share-partition with state, sorted."""


@dataclass(frozen=True)
class PendingRecords:
    """Records of one share-partition acquired by a member and not yet acknowledged."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    member_id: str
    delivery_count: int
    lock_remaining_ms: int


def list_share_groups(addresses: Iterable[str], connect: Connect) -> list[str]:
    """The share groups' ids that the brokers at ``addresses`` coordinate, sorted."""
    found: set[str] = set()
    for address in sorted(set(addresses)):
        with connect(address) as broker:
            answer = broker.call(ListGroupsRequest(types_filter=["share"]), 5, expect=ListGroupsResponse)
        if answer.error_code != ErrorCode.NONE:
            raise WireError(f"cannot list share groups at {address}: {ErrorCode.name_of(answer.error_code)}")
        found.update(g.group_id for g in answer.groups if g.group_type == "share")
    return sorted(found)


@contextmanager
def coordinator_of(bootstrap: WireClient, group_id: str, connect: Connect) -> Iterator[WireClient]:
    """A connection to ``group_id``'s coordinator (``bootstrap`` itself when it is the one)."""
    _node, address = find_coordinator(bootstrap, group_id, key_type=GROUP_KEY_TYPE)
    if address == bootstrap.address:
        yield bootstrap
        return
    with connect(address) as coordinator:
        yield coordinator


def share_group_offsets(
    wire: WireClient,
    group_id: str,
    *,
    topics: list[tuple[str, list[int]]] | None = None,
    pending: bool = False,
) -> ShareOffsetsGroup:
    """DescribeShareGroupOffsets v0 of one group (``topics`` None: every share-partition with state), with
    tidelog's pending tag when ``pending``."""
    req = DescribeShareGroupOffsetsRequest
    asked = req.DescribeShareGroupOffsetsRequestGroup(
        group_id=group_id,
        topics=None
        if topics is None
        else [req.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics],
    )
    if pending:
        asked.unknown_tagged_fields = {PENDING_TAG: b""}
    answer = wire.call(req(groups=[asked]), 0, expect=DescribeShareGroupOffsetsResponse)
    return answer.groups[0]


def describe_share_group(bootstrap: WireClient, group_id: str, connect: Connect) -> ShareGroupDescription:
    """One share group: state, epoch, members with their assignments, and start offsets."""
    with coordinator_of(bootstrap, group_id, connect) as wire:
        answer = wire.call(
            ShareGroupDescribeRequest(group_ids=[group_id]), 0, expect=ShareGroupDescribeResponse
        )
        (group,) = answer.groups
        if group.error_code != ErrorCode.NONE:
            raise ShareGroupNotFoundError(group_id, group.error_code)
        offsets = share_group_offsets(wire, group_id)
    members = tuple(
        ShareMember(
            m.member_id,
            m.client_id,
            m.client_host,
            m.member_epoch,
            tuple(
                (t.topic_name, tuple(sorted(t.partitions)))
                for t in sorted(m.assignment.topic_partitions, key=lambda t: t.topic_name)
            ),
        )
        for m in sorted(group.members, key=lambda m: m.member_id)
    )
    starts = tuple(
        sorted(
            (t.topic_name, p.partition_index, p.start_offset) for t in offsets.topics for p in t.partitions
        )
    )
    return ShareGroupDescription(group.group_id, group.group_state, group.group_epoch, members, starts)


def pending_records(
    bootstrap: WireClient, group_id: str, connect: Connect, *, topic: str | None = None
) -> list[PendingRecords]:
    """The records ``group_id``'s members hold, from every share-partition leader (``topic``: only its
    share-partitions), by topic, partition and offset. Raises :class:`ShareGroupNotFoundError`, and
    ``WireError`` for an unknown ``topic``."""
    with coordinator_of(bootstrap, group_id, connect) as coordinator:
        exists = share_group_offsets(coordinator, group_id, topics=[])
    if exists.error_code != ErrorCode.NONE:
        raise ShareGroupNotFoundError(group_id, exists.error_code)
    brokers, metadata = partition_leaders(bootstrap, None if topic is None else [topic])
    if topic is not None and (topic not in metadata or metadata[topic].error_code != ErrorCode.NONE):
        raise WireError(f"unknown topic {topic!r}")
    led: dict[int, dict[str, list[int]]] = {}  # leader: {topic: partitions it leads}
    for name, info in metadata.items():
        if info.is_internal or info.error_code != ErrorCode.NONE:
            continue
        for part in info.partitions:
            if part.leader_id in brokers:
                led.setdefault(part.leader_id, {}).setdefault(name, []).append(part.partition_index)
    found: list[PendingRecords] = []
    for leader, topics in sorted(led.items()):  # the acquisitions live on each share-partition's leader
        with connect(brokers[leader]) as wire:
            answered = share_group_offsets(wire, group_id, topics=sorted(topics.items()), pending=True)
        if answered.error_code != ErrorCode.NONE:
            continue
        for t in answered.topics:
            for p in t.partitions:
                value = (p.unknown_tagged_fields or {}).get(PENDING_TAG)
                if value is None:
                    continue
                found.extend(
                    PendingRecords(
                        t.topic_name,
                        p.partition_index,
                        r.first_offset,
                        r.last_offset,
                        r.member_id,
                        r.delivery_count,
                        r.lock_remaining_ms,
                    )
                    for r in decode_pending(value)
                )
    return sorted(found, key=lambda r: (r.topic, r.partition, r.first_offset))
