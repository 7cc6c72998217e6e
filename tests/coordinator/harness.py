"""A stand-in for the server runtime: drives a GroupCoordinator with a manual clock and a timer table.

It applies every CoordinatorResult the way the runtime must (records kept in order, completions
delivered once, timers replaced by key) and fires timers in deadline order when time advances.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from tidelog.coordinator.common import (
    CancelTimer,
    CoordinatorRecord,
    CoordinatorResult,
    DeferredResponse,
    ScheduleTimer,
)
from tidelog.coordinator.group import GroupCoordinator, GroupCoordinatorConfig, TimerKey
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.shard import GroupCoordinatorShard
from tidelog.protocol import codec
from tidelog.protocol.messages import (
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tidelog.protocol.schema import Request, Response

SESSION_MS = 10_000
REBALANCE_MS = 20_000


def subscription(*topics: str) -> bytes:
    """A consumer's JoinGroup metadata: ConsumerProtocol version 0 + ConsumerProtocolSubscription v0."""
    return struct.pack(">h", 0) + codec.encode(ConsumerProtocolSubscription(topics=list(topics)), 0)


class CountingUuids:
    """Deterministic stand-in for uuid4: 00000000-0000-0000-0000-000000000001, ...02, ..."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(int=self.n)


@dataclass
class Harness:
    config: GroupCoordinatorConfig = field(
        default_factory=lambda: GroupCoordinatorConfig(offsets_topic_num_partitions=1)
    )
    now: int = 1_000_000
    load: bool = True

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(self.config, new_uuid=CountingUuids())
        self.timers: dict[TimerKey, int] = {}
        self.records: list[CoordinatorRecord] = []
        self.completed: dict[int, Response] = {}
        self.results: list[CoordinatorResult] = []
        if self.load:
            for partition in range(self.config.offsets_topic_num_partitions):
                self.coordinator.begin_loading(partition)
                self.apply(self.coordinator.complete_loading(partition, self.now))

    # -- the runtime's duties --------------------------------------------------------------------

    def apply(self, result: CoordinatorResult) -> CoordinatorResult:
        self.results.append(result)
        for partition in sorted(result.records):
            assert partition == 0 or self.config.offsets_topic_num_partitions > 1
            self.records.extend(result.records[partition])
        for handle, response in result.completions:
            assert handle.handle_id not in self.completed, f"{handle} completed twice"
            assert handle.api_key == response.API_KEY
            codec.encode(response, handle.api_version)  # every answer must go on the wire as is
            self.completed[handle.handle_id] = response
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers[op.key] = op.deadline_ms
            else:
                assert isinstance(op, CancelTimer)
                self.timers.pop(op.key, None)
        return result

    def send(
        self, request: Request, version: int, *, client_id: str = "client", client_host: str = "/10.0.0.1"
    ) -> Any:
        result = self.apply(
            self.coordinator.handle(
                request, version, now_ms=self.now, client_id=client_id, client_host=client_host
            )
        )
        return result.response

    def advance(self, ms: int) -> None:
        """Let ``ms`` pass, firing every timer that falls due, each at its own deadline."""
        target = self.now + ms
        while True:
            due = [
                (deadline, i, key)
                for i, (key, deadline) in enumerate(self.timers.items())
                if deadline <= target
            ]
            if not due:
                break
            deadline, _, key = min(due, key=lambda d: (d[0], d[1]))
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.apply(self.coordinator.on_timeout(key, self.now))
        self.now = target

    def response(self, answer: Any) -> Any:
        """The response itself, or the completion of a parked request (which must have arrived)."""
        if isinstance(answer, DeferredResponse):
            return self.completed[answer.handle_id]
        assert isinstance(answer, Response)
        return answer

    def is_parked(self, answer: Any) -> bool:
        return isinstance(answer, DeferredResponse) and answer.handle_id not in self.completed

    # -- state peeking ---------------------------------------------------------------------------

    @property
    def shard(self) -> GroupCoordinatorShard:
        shard = self.coordinator.shard(0)
        assert shard is not None
        return shard

    def group(self, group_id: str) -> ClassicGroup:
        return self.shard.state.groups[group_id]

    # -- client requests -------------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str = "",
        *,
        version: int = 9,
        protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
        protocol_type: str = "consumer",
        instance_id: str | None = None,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client_id: str = "client",
    ) -> Any:
        request = JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols],
        )
        return self.send(request, version, client_id=client_id)

    def join_new(self, group_id: str, client_id: str = "client", **kwargs: Any) -> tuple[str, Any]:
        """A v4+ dynamic member's two-step join: MEMBER_ID_REQUIRED, then the real JoinGroup."""
        first = self.response(self.join(group_id, client_id=client_id, **kwargs))
        assert isinstance(first, JoinGroupResponse)
        assert first.error_code == 79, first  # MEMBER_ID_REQUIRED
        return first.member_id, self.join(group_id, first.member_id, client_id=client_id, **kwargs)

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        version: int = 5,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Any:
        request = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return self.send(request, version)

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, *, instance_id: str | None = None
    ) -> int:
        request = HeartbeatRequest(
            group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=instance_id
        )
        return int(self.send(request, 4).error_code)

    def leave(self, group_id: str, *members: tuple[str, str | None], version: int = 5) -> Any:
        if version >= 3:
            request = LeaveGroupRequest(
                group_id=group_id,
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members
                ],
            )
        else:
            ((member_id, _),) = members
            request = LeaveGroupRequest(group_id=group_id, member_id=member_id)
        return self.send(request, version)

    def commit(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], int],
        *,
        generation: int = -1,
        member_id: str = "",
        version: int = 9,
        metadata: str | None = "",
        leader_epoch: int = -1,
        retention_ms: int = -1,
        instance_id: str | None = None,
    ) -> dict[tuple[str, int], int]:
        topics: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=leader_epoch,
                    committed_metadata=metadata,
                )
            )
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            retention_time_ms=retention_ms,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        response = self.send(request, version)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    def fetch(self, group_id: str, partitions: dict[str, list[int]] | None, *, version: int = 7) -> Any:
        topics = None
        if partitions is not None:
            topics = [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in partitions.items()
            ]
        return self.send(OffsetFetchRequest(group_id=group_id, topics=topics), version)

    def fetched(
        self, group_id: str, partitions: dict[str, list[int]] | None = None
    ) -> dict[tuple[str, int], int]:
        """Committed offsets as OffsetFetch v7 reports them."""
        response = self.fetch(group_id, partitions)
        assert response.error_code == 0
        return {
            (t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions
        }

    # -- a whole generation ----------------------------------------------------------------------

    def form_group(
        self, group_id: str, clients: list[str], assignments: dict[str, bytes] | None = None, **kwargs: Any
    ) -> tuple[list[str], int]:
        """Members join (one initial-rebalance delay later the join completes), the leader syncs.

        Returns the member ids (leader first) and the generation."""
        ids: list[str] = []
        answers = []
        for client in clients:
            member_id, answer = self.join_new(group_id, client_id=client, **kwargs)
            ids.append(member_id)
            answers.append(answer)
        for _ in range(50):
            if not any(self.is_parked(a) for a in answers):
                break
            self.advance(max(self.config.group_initial_rebalance_delay_ms, 1))
        responses = [self.response(a) for a in answers]
        assert all(isinstance(r, JoinGroupResponse) and r.error_code == 0 for r in responses), responses
        generation = responses[0].generation_id
        leader = responses[0].leader
        followers = [m for m in ids if m != leader]
        parked = [self.sync(group_id, m, generation) for m in followers]
        by_member = assignments or {m: m.encode() for m in ids}
        leader_sync = self.response(self.sync(group_id, leader, generation, by_member))
        assert isinstance(leader_sync, SyncGroupResponse)
        assert leader_sync.error_code == 0
        for p in parked:
            assert self.response(p).error_code == 0
        return [leader, *followers], generation
