"""KIP-951: Produce (v10+) and Fetch (v12+, endpoints from v16) sent to a broker that does not lead the
partition answer NOT_LEADER_OR_FOLLOWER with the current leader, its epoch and its endpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.cluster.async_cluster import inprocess_cluster

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from tidelog.protocol.records import SimpleRecord, encode_batch


def test_a_follower_names_the_leader_to_producers_and_consumers(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            topic_id = cluster.create_topic("hints", (1, 2))
            cluster.elect("hints", leader=1, leader_epoch=4, isr=(1, 2))
            follower = cluster[2]
            batch = encode_batch([SimpleRecord(key=b"k", value=b"v", timestamp=1)])
            produce = ProduceRequest(
                acks=-1,
                timeout_ms=1000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name="hints",
                        partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
                    )
                ],
            )
            answer = await cluster[1].client.send(2, produce, 11, expect=ProduceResponse)
            (partition,) = answer.responses[0].partition_responses
            assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (1, 4)
            assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == [
                (1, "127.0.0.1", cluster[1].port)
            ]

            fetch = FetchRequest(
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                topics=[
                    FetchRequest.FetchTopic(
                        topic="hints",
                        topic_id=topic_id,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
            for version, endpoints in ((12, []), (16, [(1, "127.0.0.1", cluster[1].port)])):
                answer_f = await cluster[1].client.send(2, fetch, version, expect=FetchResponse)
                (data,) = answer_f.responses[0].partitions
                assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (1, 4)
                assert [(e.node_id, e.host, e.port) for e in answer_f.node_endpoints] == endpoints
            assert follower.broker.replicas.get("hints", 0) is not None

    asyncio.run(scenario())
