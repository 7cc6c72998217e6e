"""Share groups' routing in a cluster (:mod:`tidelog.server.share_routing`), on two in-process brokers with
the test as controller: heartbeats and describes only at the group coordinator, fetches only at the
partition leader (others say who leads), state written to the share coordinator stamped with the leader
epoch, and a share-partition (a share group) dropped when its leadership (its coordinator) moves.

Broker 1 leads ``jobs`` and ``__share_group_state``; broker 2 leads ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.server.cluster.async_cluster import InProcessCluster, inprocess_cluster

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidelog.protocol.schema import Response
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.share_persister import SharePersister
from tidelog.server.share_routing import ShareRouting

GROUP = "workers"


def _ctx(api_key: int, version: int) -> RequestContext:
    return RequestContext(api_key, version, 1, "test", "127.0.0.1", 1, "PLAINTEXT")


def _routing(cluster: InProcessCluster, node_id: int) -> ShareRouting:
    node = cluster[node_id]
    broker = node.broker
    persister = SharePersister(
        local=broker.share_states, metadata=broker.metadata, replicas=broker.replicas, client=node.client
    )
    broker.shares.set_state_store(persister)
    return ShareRouting(
        runtime=broker.shares,
        groups=broker.groups,
        persister=persister,
        metadata=broker.metadata,
        replicas=broker.replicas,
    )


async def _resolve(answer: Answer) -> Response:
    return answer if isinstance(answer, Response) else await answer


def _fetch(topic_id: uuid.UUID) -> ShareFetchRequest:
    return ShareFetchRequest(
        group_id=GROUP,
        member_id="m1",
        share_session_epoch=0,
        max_wait_ms=0,
        topics=[
            ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[ShareFetchRequest.FetchPartition()])
        ],
    )


def test_requests_go_to_the_coordinator_and_the_leader(tmp_path: Path) -> None:
    async def scenario() -> None:
        overrides = {"share.coordinator.state.topic.num.partitions": "1"}
        async with inprocess_cluster(tmp_path, (1, 2), **overrides) as c:  # type: ignore[arg-type]
            jobs = c.create_topic("jobs", (1, 2))
            c.create_topic("__share_group_state", (1, 2))
            c.create_topic("__consumer_offsets", (2, 1))
            c.elect("jobs", 1, 3, (1,))
            c.elect("__share_group_state", 1, 0, (1,))
            c.elect("__consumer_offsets", 2, 0, (2,))
            one, two = _routing(c, 1), _routing(c, 2)
            b1 = c[1].broker
            # broker 2 coordinates the group once it has loaded its __consumer_offsets partition (share
            # groups are persisted there): until then its heartbeats are COORDINATOR_LOAD_IN_PROGRESS
            coordinator = c[2].broker.groups.coordinator
            deadline = asyncio.get_running_loop().time() + 10
            while (shard := coordinator.shard(coordinator.partition_for(GROUP))) is None or shard.loading:
                assert asyncio.get_running_loop().time() < deadline, "__consumer_offsets never loaded"
                await asyncio.sleep(0.01)

            heartbeat = ShareGroupHeartbeatRequest(
                group_id=GROUP, member_id="m1", subscribed_topic_names=["jobs"]
            )
            served: list[str] = []

            def serve(
                _ctx: RequestContext, request: ShareGroupHeartbeatRequest
            ) -> ShareGroupHeartbeatResponse:
                served.append(request.group_id)
                return ShareGroupHeartbeatResponse()

            refused = one.heartbeat(_ctx(76, 1), heartbeat, serve)
            assert refused.error_code == ErrorCode.NOT_COORDINATOR
            assert served == []
            joined = await _resolve(two.heartbeat(_ctx(76, 1), heartbeat, c[2].broker.shares.heartbeat))
            assert isinstance(joined, ShareGroupHeartbeatResponse)  # answered once its records are committed
            assert (joined.error_code, joined.member_id) == (ErrorCode.NONE, "m1")
            assert GROUP in c[2].broker.shares.groups
            described = one.describe(ShareGroupDescribeRequest(group_ids=[GROUP]), b1.shares.describe)
            assert [(g.group_id, g.error_code) for g in described.groups] == [
                (GROUP, ErrorCode.NOT_COORDINATOR)
            ]

            # broker 2 follows jobs-0: it names the leader and where to reach it
            moved = await _resolve(two.fetch(_ctx(78, 1), _fetch(jobs), c[2].broker.shares.fetch))
            assert isinstance(moved, ShareFetchResponse)
            part = moved.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 3)
            assert [(e.node_id, e.host, e.port) for e in moved.node_endpoints] == [
                (1, "127.0.0.1", c[1].port)
            ]

            # the leader serves it: the new share-partition is persisted, stamped with leader epoch 3
            served_fetch = await _resolve(one.fetch(_ctx(78, 1), _fetch(jobs), b1.shares.fetch))
            assert isinstance(served_fetch, ShareFetchResponse)
            assert served_fetch.responses[0].partitions[0].error_code == ErrorCode.NONE
            persisted = b1.share_states.coordinator.state(GROUP, jobs, 0)
            assert persisted is not None
            assert (persisted.start_offset, persisted.leader_epoch) == (0, 3)
            assert (GROUP, "jobs", 0) in b1.shares.partitions

            # leadership moves away: the share-partition is dropped (its next leader loads it)
            c.elect("jobs", 2, 4, (2,))
            assert (GROUP, "jobs", 0) not in b1.shares.partitions

            # the group coordinator moves: the old one forgets the group (its members join the new one)
            c.elect("__consumer_offsets", 1, 1, (1,))
            assert GROUP not in c[2].broker.shares.groups

    asyncio.run(scenario())
