"""The share-group admin side in a cluster (:mod:`tidelog.server.share_admin` with ``cluster``), on two
in-process brokers: DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteGroups are answered by the
group coordinator only, and their state is written, read (ReadShareGroupStateSummary) and deleted at the
share coordinator on the other broker, committed before the answer (the inter-broker leg is the
persister's, tested in tests/cluster/test_share_groups_failover.py).

Broker 1 leads ``jobs`` and ``__share_group_state``; broker 2 leads ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import cast

from tests.server.cluster.async_cluster import InProcessCluster, inprocess_cluster
from tests.server.cluster.test_share_routing import GROUP, _resolve

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.server.cluster.broker_client import BrokerClient
from tidelog.server.share_admin import ShareAdmin
from tidelog.server.share_persister import SharePersister
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
