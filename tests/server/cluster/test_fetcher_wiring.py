"""What the broker wires the replica fetchers with: the inter-broker listener and the addresses on it
(server/cluster/inter_broker.py), the fetchers' settings from the broker config (fetcher_config.py), the
version a request goes out at (leader_endpoint.py) and which fetcher a partition goes to."""

from __future__ import annotations

import pytest

from tidelog.protocol import TopicPartition
from tidelog.protocol.messages import ApiKey
from tidelog.server.cluster.inter_broker import endpoint_resolver, inter_broker_listener_name
from tidelog.server.cluster.leader_endpoint import pick_version
from tidelog.server.cluster.replica_fetcher import ReplicaFetcherConfig, fetcher_id
from tidelog.server.config import BrokerConfig
from tidelog.server.metadata_cache import BrokerInfo, Endpoint, MetadataCache

LISTENERS = {
    "listeners": "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
}


def test_the_inter_broker_listener_is_named_or_follows_the_security_protocol() -> None:
    assert inter_broker_listener_name(BrokerConfig.from_mapping({})) == "PLAINTEXT"
    named = BrokerConfig.from_mapping({**LISTENERS, "inter.broker.listener.name": "replication"})
    assert inter_broker_listener_name(named) == "REPLICATION"


def test_endpoint_for_reads_the_metadata_cache_at_every_call() -> None:
    metadata = MetadataCache(1, "cluster")
    endpoint_for = endpoint_resolver(metadata, "replication")
    assert endpoint_for(2) is None  # not alive
    metadata.put_broker(
        BrokerInfo(
            2, (Endpoint("CLIENT", "10.0.0.2", 9092), Endpoint("REPLICATION", "10.0.0.2", 9093)), epoch=7
        )
    )
    metadata.put_broker(BrokerInfo(3, (Endpoint("CLIENT", "10.0.0.3", 9092),), epoch=8))
    assert endpoint_for(2) == ("10.0.0.2", 9093)
    assert endpoint_for(3) is None  # no endpoint on the inter-broker listener
    metadata.put_broker(
        BrokerInfo(2, (Endpoint("REPLICATION", "10.0.0.2", 19093),), epoch=9)
    )  # registered again
    assert endpoint_for(2) == ("10.0.0.2", 19093)


def test_the_fetcher_settings_come_from_kafkas_keys() -> None:
    assert ReplicaFetcherConfig.from_broker_config(BrokerConfig.from_mapping({})) == ReplicaFetcherConfig()
    assert ReplicaFetcherConfig() == ReplicaFetcherConfig(
        fetch_max_bytes=1_048_576,
        response_max_bytes=10_485_760,
        wait_max_ms=500,
        min_bytes=1,
        backoff_ms=1_000,
        num_fetchers=1,
        request_timeout_ms=30_000,
    )
    config = BrokerConfig.from_mapping(
        {
            "replica.fetch.max.bytes": "2048",
            "replica.fetch.response.max.bytes": "8192",
            "replica.fetch.wait.max.ms": "250",
            "replica.fetch.min.bytes": "10",
            "replica.fetch.backoff.ms": "100",
            "num.replica.fetchers": "4",
            "replica.socket.timeout.ms": "5000",
        }
    )
    fetcher = ReplicaFetcherConfig.from_broker_config(config)
    assert fetcher == ReplicaFetcherConfig(
        fetch_max_bytes=2048,
        response_max_bytes=8192,
        wait_max_ms=250,
        min_bytes=10,
        backoff_ms=100,
        num_fetchers=4,
        request_timeout_ms=5000,
    )
    assert fetcher.fetch_timeout_ms == 5250


@pytest.mark.parametrize(
    "changes",
    [{"fetch_max_bytes": 0}, {"response_max_bytes": -1}, {"wait_max_ms": -1}, {"num_fetchers": 0}],
)
def test_fetcher_settings_that_cannot_work_are_refused(changes: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must"):
        ReplicaFetcherConfig(**changes)


def test_a_request_goes_out_at_the_highest_version_both_brokers_speak() -> None:
    fetch = ApiKey.FETCH
    assert pick_version(None, fetch, 12, 16) == 16  # not connected yet: try the highest
    assert pick_version({fetch: (4, 16)}, fetch, 12, 16) == 16
    assert pick_version({fetch: (4, 13)}, fetch, 12, 16) == 13
    assert pick_version({fetch: (0, 17)}, fetch, 12, 12) == 12
    assert pick_version({fetch: (4, 11)}, fetch, 12, 16) is None  # no DivergingEpoch: not a leader to use
    assert pick_version({fetch: (13, 16)}, fetch, 12, 12) is None
    assert pick_version({ApiKey.PRODUCE: (3, 9)}, fetch, 12, 16) is None


def test_a_partition_always_goes_to_the_same_of_its_leaders_fetchers() -> None:
    tps = [TopicPartition(f"topic-{i}", p) for i in range(10) for p in range(4)]
    assert {fetcher_id(tp, 1) for tp in tps} == {0}
    ids = [fetcher_id(tp, 3) for tp in tps]
    assert set(ids) == {0, 1, 2}
    assert ids == [fetcher_id(tp, 3) for tp in tps]
    # stable across processes (not Python's salted str hash): a restarted broker splits them the same way
    assert [fetcher_id(TopicPartition("orders", p), 4) for p in range(4)] == [2, 3, 0, 1]
