"""LogConfig: Kafka's defaults, topic keys, broker keys with their precedence, validation."""

from __future__ import annotations

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.storage.config import LONG_MAX, LogConfig
from tidelog.storage.errors import InvalidConfigError


def test_kafka_defaults() -> None:
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.segment_index_bytes, c.index_interval_bytes) == (
        1073741824,
        604800000,
        10485760,
        4096,
    )
    assert (c.retention_ms, c.retention_bytes, c.flush_messages, c.flush_ms) == (
        604800000,
        -1,
        LONG_MAX,
        LONG_MAX,
    )
    assert (c.file_delete_delay_ms, c.max_message_bytes, c.cleanup_policy) == (60000, 1048588, "delete")
    assert c.message_timestamp_type == "CreateTime"
    assert c.delete_enabled
    assert not c.compact_enabled
    assert not c.log_append_time


def test_topic_properties_round_trip() -> None:
    c = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "cleanup.policy": "compact,delete",
            "message.timestamp.type": "LogAppendTime",
            "preallocate": "TRUE",
            "min.cleanable.dirty.ratio": "0.25",
            "follower.replication.throttled.replicas": "*",
        }
    )
    assert c.segment_bytes == 1048576
    assert c.retention_ms == -1
    assert c.compact_enabled
    assert c.delete_enabled
    assert c.log_append_time
    assert c.preallocate is True
    assert c.min_cleanable_dirty_ratio == 0.25
    props = c.to_properties()
    assert props["segment.bytes"] == "1048576"
    assert props["preallocate"] == "true"
    assert LogConfig.from_properties(props) == c


def test_overrides_apply_over_given_defaults() -> None:
    base = LogConfig(segment_bytes=2048, retention_bytes=10)
    c = LogConfig.from_properties({"retention.bytes": "99"}, base)
    assert (c.segment_bytes, c.retention_bytes) == (2048, 99)


def test_broker_keys_with_precedence() -> None:
    c = LogConfig.from_broker_properties(
        {
            "log.retention.hours": "1",
            "log.retention.minutes": "5",
            "log.roll.hours": "2",
            "log.segment.bytes": "4096",
            "message.max.bytes": "2000",
            "log.cleanup.policy": "compact",
            "num.partitions": "3",
        }
    )
    assert c.retention_ms == 5 * 60_000
    assert c.segment_ms == 2 * 3_600_000
    assert c.segment_bytes == 4096
    assert c.max_message_bytes == 2000
    assert c.cleanup_policy == "compact"
    assert (
        LogConfig.from_broker_properties({"log.retention.ms": "7", "log.retention.hours": "1"}).retention_ms
        == 7
    )
    assert LogConfig.from_broker_properties({"log.retention.hours": "-1"}).retention_ms == -1


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"segment.bytes": "13"}, "segment.bytes=13: must be at least 14"),
        ({"segment.bytes": str(2**31)}, "must fit in an int32"),
        ({"retention.ms": "-2"}, "retention.ms=-2"),
        ({"segment.ms": "abc"}, "not a valid int"),
        ({"cleanup.policy": "compact,forever"}, "cleanup.policy"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"preallocate": "yes"}, "not a valid bool"),
        ({"no.such.config": "1"}, "unknown topic config 'no.such.config'"),
    ],
)
def test_invalid_values(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as info:
        LogConfig.from_properties(props)
    assert info.value.error_code == ErrorCode.INVALID_CONFIG
