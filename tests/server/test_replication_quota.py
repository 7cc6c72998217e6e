"""Replication throttles (issue 15): the throttled-replicas lists, the topic config validator, the quota's
bound, window and in-sync exemption, and the dynamic broker configs' keys."""

from __future__ import annotations

import pytest

from tidelog.server.config import DYNAMIC_BROKER_CONFIGS, BrokerConfig, ConfigError
from tidelog.server.config.topic_defs import topic_def
from tidelog.server.replication_quota import (
    ALL_PARTITIONS,
    ReplicationQuotaManager,
    ThrottledPartitions,
    format_throttled_replicas,
    parse_throttled_partitions,
)
from tidelog.server.security.quota_rate import QuotaWindow


def test_parse_keeps_the_partitions_naming_this_broker() -> None:
    assert parse_throttled_partitions("0:1,0:2,1:2,2:3", 2) == ThrottledPartitions(
        partitions=frozenset({0, 1})
    )
    assert parse_throttled_partitions(" 0:1 , 3:1", 1) == ThrottledPartitions(partitions=frozenset({0, 3}))
    assert parse_throttled_partitions("0:1", 4) == ThrottledPartitions()
    assert parse_throttled_partitions("*", 9) is ALL_PARTITIONS
    assert parse_throttled_partitions("", 1) == ThrottledPartitions()
    assert parse_throttled_partitions(None, 1) == ThrottledPartitions()
    assert 7 in ALL_PARTITIONS
    assert 0 not in ThrottledPartitions()
    with pytest.raises(ValueError, match="not a partition:broker entry: '0-1'"):
        parse_throttled_partitions("0-1", 1)


def test_format_is_kafkas_partition_broker_list() -> None:
    assert format_throttled_replicas({1: [3, 4], 0: [1, 2]}) == "0:1,0:2,1:3,1:4"
    assert format_throttled_replicas({}) == ""


@pytest.mark.parametrize("value", ["*", "0:1", "0:1,1:2,10:102", ""])
def test_topic_config_accepts_kafkas_formats(value: str) -> None:
    for name in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        topic_def(name).parse(value)


@pytest.mark.parametrize("value", ["0", "a:1", "*,0:1", "0:1:2"])
def test_topic_config_refuses_other_values_in_kafkas_words(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        topic_def("leader.replication.throttled.replicas").parse(value)
    assert str(info.value) == (
        f"Invalid value {value} for configuration leader.replication.throttled.replicas: Must be the literal"
        " '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def test_rates_are_dynamic_broker_configs_unlimited_by_default() -> None:
    assert {
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
    } <= DYNAMIC_BROKER_CONFIGS
    config = BrokerConfig.from_mapping({})
    assert config.leader_replication_throttled_rate == 2**63 - 1
    assert config.follower_replication_throttled_rate == 2**63 - 1
    assert (config.replication_quota_window_num, config.replication_quota_window_size_seconds) == (11, 1)
    with pytest.raises(ConfigError, match=r"leader\.replication\.throttled\.rate"):
        BrokerConfig.from_mapping({"leader.replication.throttled.rate": "-1"})


def _manager(
    rate: list[int], configs: dict[str, dict[str, str]], samples: int = 1
) -> ReplicationQuotaManager:
    return ReplicationQuotaManager(
        broker_id=2,
        config_key="leader.replication.throttled.replicas",
        rate=lambda: rate[0],
        topic_configs=configs.get,
        window=QuotaWindow(samples=samples, window_ms=1000),
    )


def test_only_throttled_replicas_out_of_the_isr_are_held_over_the_bound() -> None:
    configs = {"orders": {"leader.replication.throttled.replicas": "0:2,1:3"}}
    rate = [1000]
    quota = _manager(rate, configs)
    assert quota.is_throttled("orders", 0)
    assert not quota.is_throttled("orders", 1)  # names broker 3, not this one
    assert not quota.is_throttled("other", 0)
    assert not quota.should_throttle("orders", 0, in_sync=False, now_ms=0)  # nothing recorded yet
    quota.record(500, 0)
    assert quota.measured_rate(500) == 1000.0  # at the bound: acceptable (Kafka's upper bound)
    assert not quota.is_quota_exceeded(500)
    quota.record(250, 500)
    assert quota.is_quota_exceeded(500)
    assert quota.should_throttle("orders", 0, in_sync=False, now_ms=500)
    assert not quota.should_throttle("orders", 0, in_sync=True, now_ms=500)  # in-sync: never throttled
    assert not quota.should_throttle("orders", 1, in_sync=False, now_ms=500)  # not a throttled replica
    assert quota.throttle_time_ms(500) == 250  # (1500 - 1000) / 1000 * the 500 ms measured
    rate[0] = 2000  # a dynamic change applies at the next check
    assert not quota.is_quota_exceeded(500)
    configs["orders"] = {"leader.replication.throttled.replicas": "*"}
    assert quota.is_throttled("orders", 1)
    configs["orders"] = {}
    assert not quota.is_throttled("orders", 0)


def test_the_default_bound_is_never_exceeded() -> None:
    quota = _manager([2**63 - 1], {"t": {"leader.replication.throttled.replicas": "*"}})
    quota.record(10**12, 0)
    assert not quota.should_throttle("t", 0, in_sync=False, now_ms=1)
    assert quota.throttle_time_ms(1) == 0


def test_a_fresh_meter_spreads_its_first_bytes_over_num_minus_one_windows() -> None:
    """Kafka's ``Rate``: with 11 samples the first 10 s worth passes at full speed; with 1 none does."""
    eleven = _manager([1000], {}, samples=11)
    eleven.record(9_000, 0)
    assert not eleven.is_quota_exceeded(10)
    one = _manager([1000], {}, samples=1)
    one.record(100, 0)
    assert one.is_quota_exceeded(10)
    assert not one.is_quota_exceeded(100)
