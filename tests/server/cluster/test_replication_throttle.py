"""The follower side of the replication throttles (server/replication_quota.py in the replica fetcher), between
real tidelog brokers in one event loop (async_cluster.py): a follower over ``follower.replication.throttled.rate``
leaves its throttled partition out of its fetches (the fetcher shows it delayed, throttled) and stops short of
the leader's log end; a raised rate applies at once and it catches up, byte for byte. (The leader's side and
both together, timed, are in tests/cluster/test_reassignment.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.server.cluster.async_cluster import batches, in_sync, inprocess_cluster
from tests.server.inprocess import until

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.cluster.replica_fetcher import FetchStatus, ReplicaFetcherConfig
from tidelog.server.replication_quota import FOLLOWER_THROTTLED_REPLICAS, ReplicationQuotaManager
from tidelog.server.security.quota_rate import QuotaWindow

pytestmark = [pytest.mark.timeout(120)]

T = "t"
NOW_MS = 1_700_000_000_000


def test_a_follower_over_its_throttle_leaves_the_partition_out_until_the_rate_is_raised(
    tmp_path: Path,
) -> None:
    config = ReplicaFetcherConfig(fetch_max_bytes=2048, backoff_ms=50)
    rate = [1]  # byte/s: after its first answer the follower is over its quota for good
    topic_configs = {T: {FOLLOWER_THROTTLED_REPLICAS: "0:2"}}

    async def scenario() -> None:
        async with inprocess_cluster(
            tmp_path, (1, 2), fetcher_config=config, start_fetchers=False
        ) as cluster:
            quota = ReplicationQuotaManager(
                broker_id=2,
                config_key=FOLLOWER_THROTTLED_REPLICAS,
                rate=lambda: rate[0],
                topic_configs=topic_configs.get,
                window=QuotaWindow(samples=1, window_ms=60_000),
            )
            cluster[2].fetchers.quota = quota  # before the election creates its fetcher
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1,))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            for i in range(60):
                batch = encode_batch([SimpleRecord(value=b"v%d-" % i + bytes(300), timestamp=NOW_MS)])
                error, _info, message = cluster[1].broker.replicas.append(T, 0, batch, now_ms=NOW_MS)
                assert error == ErrorCode.NONE, message
            cluster[2].fetchers.start()

            def throttled() -> bool:
                view = cluster[2].fetchers.fetcher_for(1)
                state = None if view is None else view.partitions.get(TopicPartition(T, 0))
                return (
                    state is not None
                    and state.status is FetchStatus.DELAYED
                    and state.error == "follower replication throttled"
                )

            await until(throttled)
            copied = follower.log_end_offset
            assert 0 < copied < leader.log_end_offset == 60
            assert quota.is_quota_exceeded(cluster[2].broker.clock.now_ms())
            assert batches(follower) == batches(leader, 0)[:copied]  # one answer: whole batches

            rate[0] = 10**9  # a dynamic change: the next check lets it fetch again
            await until(lambda: in_sync(leader, follower))
            assert batches(follower) == batches(leader)

    asyncio.run(scenario())
