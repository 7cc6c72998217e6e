"""The share-group admin side in a cluster (:mod:`tidelog.server.share_admin` with ``cluster``), on two
in-process brokers: DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteGroups are answered by the
group coordinator only, and their state is written, read (ReadShareGroupStateSummary) and deleted at the
share coordinator on the other broker, committed before the answer (the inter-broker leg is the
persister's, tested in tests/cluster/test_share_groups_failover.py). A share-partition leader still holding
the group's share-partition in memory is fenced by state epoch: after a reset its stale write is refused
and it reloads the reset start; after a delete its stale write cannot bring the state back.

Broker 1 leads ``jobs`` and ``__share_group_state``; broker 2 leads ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import cast

import pytest
from tests.server.cluster.async_cluster import InProcessCluster, inprocess_cluster
from tests.server.cluster.test_share_routing import GROUP, _ctx, _resolve, _routing

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.protocol.schema import Request, Response
from tidelog.server.cluster.broker_client import BrokerClient
from tidelog.server.dispatch import Answer
from tidelog.server.share_admin import ShareAdmin
from tidelog.server.share_persister import SharePersister, ShareStateFencedError
from tidelog.server.share_routing import ShareRouting

_Alter = AlterShareGroupOffsetsRequest
_Describe = DescribeShareGroupOffsetsRequest


class _ToShareCoordinator:
    """The inter-broker client's ``send``, straight to the other broker's share coordinator (the in-process
    brokers serve no inter-broker share APIs of their own)."""

    def __init__(self, c: InProcessCluster) -> None:
        self._c = c

    async def send(self, node_id: int, request: Request, version: int, **_: object) -> Response:
        return await _resolve(self._c[node_id].broker.share_states.handle_request(request, version))


def _admin(c: InProcessCluster, node_id: int) -> ShareAdmin:
    broker = c[node_id].broker
    persister = SharePersister(
        local=broker.share_states,
        metadata=broker.metadata,
        replicas=broker.replicas,
        client=cast(BrokerClient, _ToShareCoordinator(c)),
    )
    routing = ShareRouting(
        runtime=broker.shares,
        groups=broker.groups,
        persister=persister,
        metadata=broker.metadata,
        replicas=broker.replicas,
    )
    return ShareAdmin(
        shares=broker.shares,
        state=broker.share_states,
        groups=broker.groups,
        metadata=broker.metadata,
        replicas=broker.replicas,
        clock=broker.clock,
        cluster=routing,
    )


def _alter(start: int) -> AlterShareGroupOffsetsRequest:
    return _Alter(
        group_id=GROUP,
        topics=[
            _Alter.AlterShareGroupOffsetsRequestTopic(
                topic_name="jobs",
                partitions=[
                    _Alter.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=start)
                ],
            )
        ],
    )


def _describe() -> DescribeShareGroupOffsetsRequest:
    return _Describe(groups=[_Describe.DescribeShareGroupOffsetsRequestGroup(group_id=GROUP, topics=None)])


def test_admin_requests_at_the_group_coordinator_state_at_the_share_coordinator(tmp_path: Path) -> None:
    async def scenario() -> None:
        overrides = {"share.coordinator.state.topic.num.partitions": "1"}
        async with inprocess_cluster(tmp_path, (1, 2), **overrides) as c:  # type: ignore[arg-type]
            jobs = c.create_topic("jobs", (1, 2))
            c.create_topic("__share_group_state", (1, 2))
            c.create_topic("__consumer_offsets", (2, 1))
            c.elect("jobs", 1, 3, (1,))
            c.elect("__share_group_state", 1, 0, (1,))
            c.elect("__consumer_offsets", 2, 0, (2,))
            one, two = _admin(c, 1), _admin(c, 2)
            states = c[1].broker.share_states.coordinator

            refused = await _resolve(one.alter_offsets(_alter(5)))
            assert isinstance(refused, AlterShareGroupOffsetsResponse)
            assert refused.error_code == ErrorCode.NOT_COORDINATOR
            assert [g.error_code for g in one.describe_offsets(_describe()).groups] == [
                ErrorCode.NOT_COORDINATOR
            ]
            assert states.state(GROUP, jobs, 0) is None

            altered = await _resolve(two.alter_offsets(_alter(5)))
            assert isinstance(altered, AlterShareGroupOffsetsResponse)
            assert [p.error_code for p in altered.responses[0].partitions] == [ErrorCode.NONE]
            persisted = states.state(GROUP, jobs, 0)  # committed at broker 1 before the answer
            assert persisted is not None
            assert (persisted.start_offset, persisted.leader_epoch) == (5, 3)

            summaries = await two.summaries([GROUP])
            assert summaries == {GROUP: {("jobs", 0): 5}}
            assert two.is_share_group(GROUP)
            described = two.describe_offsets(_describe(), summaries).groups[0]
            assert isinstance(
                described, DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
            )
            assert [
                (t.topic_name, p.partition_index, p.start_offset)
                for t in described.topics
                for p in t.partitions
            ] == [("jobs", 0, 5)]

            writes: list[Awaitable[Response]] = []
            assert one.delete_group(GROUP, writes) == ErrorCode.NOT_COORDINATOR
            assert two.delete_group(GROUP, writes) == ErrorCode.NONE
            await asyncio.gather(*writes)
            assert states.state(GROUP, jobs, 0) is None
            assert not two.is_share_group(GROUP)

    asyncio.run(scenario())


def _share_fetch(
    topic_id: uuid.UUID, member: str, epoch: int, ack: tuple[int, int] | None = None
) -> ShareFetchRequest:
    batches = (
        []
        if ack is None
        else [
            ShareFetchRequest.AcknowledgementBatch(
                first_offset=ack[0], last_offset=ack[1], acknowledge_types=[1]
            )
        ]
    )
    return ShareFetchRequest(
        group_id=GROUP,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=0,
        max_records=2,
        topics=[
            ShareFetchRequest.FetchTopic(
                topic_id=topic_id,
                partitions=[
                    ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=batches)
                ],
            )
        ],
    )


def _acquired(answer: Response) -> list[tuple[int, int]]:
    assert isinstance(answer, ShareFetchResponse)
    part = answer.responses[0].partitions[0]
    assert (part.error_code, part.acknowledge_error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    return [(r.first_offset, r.last_offset) for r in part.acquired_records]


def test_a_leader_holding_the_group_is_fenced_by_a_reset_and_a_delete_elsewhere(tmp_path: Path) -> None:
    async def scenario() -> None:
        overrides = {"share.coordinator.state.topic.num.partitions": "1"}
        async with inprocess_cluster(tmp_path, (1, 2), **overrides) as c:  # type: ignore[arg-type]
            jobs = c.create_topic("jobs", (1, 2))
            c.create_topic("__share_group_state", (1, 2))
            c.create_topic("__consumer_offsets", (2, 1))
            c.elect("jobs", 1, 3, (1,))
            c.elect("__share_group_state", 1, 0, (1,))
            c.elect("__consumer_offsets", 2, 0, (2,))
            b1 = c[1].broker  # leads jobs-0: the share-partition leader
            leader = _routing(c, 1)

            def shares(request: ShareFetchRequest) -> Answer:
                return leader.fetch(_ctx(78, 1), request, b1.shares.fetch)

            two = _admin(c, 2)  # the group coordinator
            states = b1.share_states.coordinator

            assert _acquired(await _resolve(shares(_share_fetch(jobs, "m1", 0)))) == []  # starts at the end
            for i in range(10):
                c[1].partition("jobs").append_records_as_leader(
                    encode_batch([SimpleRecord(value=b"job-%d" % i, timestamp=0)]), now_ms=0
                )
            assert _acquired(await _resolve(shares(_share_fetch(jobs, "m1", 1)))) == [(0, 1)]
            await _resolve(shares(_share_fetch(jobs, "m1", -1, ack=(0, 1))))  # m1 leaves: group empty
            persisted = states.state(GROUP, jobs, 0)
            assert persisted is not None
            assert (persisted.start_offset, persisted.state_epoch) == (2, 0)

            # reset through the group coordinator: broker 1's runtime still holds the window at 2
            altered = await _resolve(two.alter_offsets(_alter(5)))
            assert isinstance(altered, AlterShareGroupOffsetsResponse)
            assert [p.error_code for p in altered.responses[0].partitions] == [ErrorCode.NONE]
            persisted = states.state(GROUP, jobs, 0)
            assert persisted is not None
            assert (persisted.start_offset, persisted.state_epoch) == (5, 1)
            assert b1.shares.partitions[(GROUP, "jobs", 0)].start_offset == 2

            # its next write (an acknowledgement) is fenced: refused, not told succeeded, window dropped
            assert _acquired(await _resolve(shares(_share_fetch(jobs, "m2", 0)))) == [(2, 3)]
            with pytest.raises(ShareStateFencedError, match="FENCED_STATE_EPOCH"):
                await _resolve(shares(_share_fetch(jobs, "m2", -1, ack=(2, 3))))
            assert (GROUP, "jobs", 0) not in b1.shares.partitions
            persisted = states.state(GROUP, jobs, 0)
            assert persisted is not None
            assert (persisted.start_offset, persisted.state_epoch) == (5, 1)

            # the next fetch reads the reset state, and writes at its epoch
            assert _acquired(await _resolve(shares(_share_fetch(jobs, "m2", 0)))) == [(5, 6)]
            await _resolve(shares(_share_fetch(jobs, "m2", -1, ack=(5, 6))))  # m2 leaves
            persisted = states.state(GROUP, jobs, 0)
            assert persisted is not None
            assert (persisted.start_offset, persisted.state_epoch) == (7, 1)

            # a delete elsewhere: the leader's stale write cannot bring the state back
            writes: list[Awaitable[Response]] = []
            await two.summaries(two.unknown([GROUP]))  # as the DeleteGroups handler does
            assert two.delete_group(GROUP, writes) == ErrorCode.NONE
            await asyncio.gather(*writes)
            assert states.state(GROUP, jobs, 0) is None
            assert _acquired(await _resolve(shares(_share_fetch(jobs, "m3", 0)))) == [(7, 8)]
            with pytest.raises(ShareStateFencedError):
                await _resolve(shares(_share_fetch(jobs, "m3", -1, ack=(7, 8))))
            assert states.state(GROUP, jobs, 0) is None
            assert (GROUP, "jobs", 0) not in b1.shares.partitions

    asyncio.run(scenario())
