"""Dynamic broker configs (KIP-226) against a real broker, with confluent-kafka and kafka-python admin
clients for the broker id and tidelog's own wire client for the cluster default (resource name ``""``,
which neither client can address).

Covers: a cluster-wide ``log.retention.ms`` reaching a topic without an override (its described source and
the retention task), a topic override winning, the per-broker layer over the cluster default, deletes
restoring the defaults, persistence across a restart, AlterConfigs replacing a layer, read-only, unknown
and bad keys refused with Kafka's error codes, and ``validate_only`` changing nothing.
"""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from tests.support.kafka_workload import confluent_create_topic, confluent_high_watermarks

from tidelog.client.wire import connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from tidelog.server.config import DYNAMIC_BROKER_CONFIGS
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {
    "node.id": "0",
    "log.segment.bytes": "1024",
    "log.retention.check.interval.ms": "100",
    "auto.create.topics.enable": "false",
}

BROKER = ConfigResource.Type.BROKER
TOPIC = ConfigResource.Type.TOPIC
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
WEEK_MS = "604800000"


# -- confluent-kafka -----------------------------------------------------------------------------------------


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def describe(bootstrap: str, kind: Any, name: str) -> dict[str, Any]:
    admin = _admin(bootstrap)  # must outlive its futures
    (future,) = admin.describe_configs([ConfigResource(kind, name)], request_timeout=30).values()
    return dict(future.result(timeout=30))


def source_of(bootstrap: str, kind: Any, name: str, key: str) -> tuple[str, ConfigSource]:
    entry = describe(bootstrap, kind, name)[key]
    return entry.value, ConfigSource(entry.source)


def alter(
    bootstrap: str, name: str, *entries: tuple[str, str | None, Any], validate_only: bool = False
) -> tuple[int, str]:
    """IncrementalAlterConfigs on BROKER ``name``: (error code, message); (0, "") on success."""
    configs = [ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries]
    admin = _admin(bootstrap)
    resource = ConfigResource(BROKER, name, incremental_configs=configs)
    (future,) = admin.incremental_alter_configs([resource], validate_only=validate_only).values()
    try:
        future.result(timeout=30)
    except confluent_kafka.KafkaException as exc:
        return int(exc.args[0].code()), str(exc.args[0].str())
    return 0, ""


# -- the wire client (resource name "") ------------------------------------------------------------------------


def wire_describe(bootstrap: str, name: str) -> tuple[int, dict[str, tuple[str | None, int, bool]]]:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name=name, configuration_keys=None
    )
    with connect(bootstrap, timeout=30) as wire:
        (result,) = wire.call(DescribeConfigsRequest(resources=[resource], include_synonyms=True)).results
    return result.error_code, {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}


def wire_alter(
    bootstrap: str, name: str, *ops: tuple[str, str | None, int], validate_only: bool = False
) -> tuple[int, str]:
    configs = [
        IncrementalAlterConfigsRequest.AlterableConfig(name=key, value=value, config_operation=op)
        for key, value, op in ops
    ]
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=4, resource_name=name, configs=configs
    )
    request = IncrementalAlterConfigsRequest(resources=[resource], validate_only=validate_only)
    with connect(bootstrap, timeout=30) as wire:
        (result,) = wire.call(request).responses
    return result.error_code, result.error_message or ""


def wire_replace(bootstrap: str, name: str, configs: dict[str, str]) -> int:
    """AlterConfigs (the legacy, replacing one) on BROKER ``name``."""
    resource = AlterConfigsRequest.AlterConfigsResource(
        resource_type=4,
        resource_name=name,
        configs=[AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in configs.items()],
    )
    with connect(bootstrap, timeout=30) as wire:
        (result,) = wire.call(AlterConfigsRequest(resources=[resource])).responses
    return int(result.error_code)


# -- helpers ---------------------------------------------------------------------------------------------------


def produce_old_records(bootstrap: str, topic: str, count: int) -> None:
    """``count`` 400-byte records an hour old, one batch each (so segments of 1024 bytes roll often)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3})
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(count):
        producer.produce(topic, key=b"k", value=b"x" * 400, timestamp=an_hour_ago + i)
        assert producer.flush(30) == 0


def log_start(bootstrap: str, topic: str) -> int:
    return confluent_high_watermarks(bootstrap, topic, 1)[0][0]


def wait_for_log_start_above_zero(bootstrap: str, topic: str, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while (start := log_start(bootstrap, topic)) == 0:
        assert time.monotonic() < deadline, f"retention never deleted a segment of {topic}"
        time.sleep(0.1)
    return start


# -- tests -----------------------------------------------------------------------------------------------------


def test_cluster_default_and_per_broker_retention_apply_live_and_persist(fresh_broker: Broker) -> None:
    bs = fresh_broker.bootstrap_servers
    confluent_create_topic(bs, "plain", 1)
    confluent_create_topic(bs, "kept", 1, {"retention.ms": WEEK_MS})
    for topic in ("plain", "kept"):
        produce_old_records(bs, topic, 8)
    assert source_of(bs, TOPIC, "plain", "retention.ms") == (WEEK_MS, ConfigSource.DEFAULT_CONFIG)
    assert wire_describe(bs, "") == (0, {})

    # cluster-wide: the topic without an override reports it and the retention task uses it
    assert wire_alter(bs, "", ("log.retention.ms", "60000", 0)) == (0, "")
    assert source_of(bs, TOPIC, "plain", "retention.ms") == (
        "60000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert source_of(bs, TOPIC, "kept", "retention.ms") == (WEEK_MS, ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert wire_describe(bs, "") == (0, {"log.retention.ms": ("60000", 3, False)})
    # every record is an hour old: all of them go, the active segment included (rolled, as in Kafka)
    assert wait_for_log_start_above_zero(bs, "plain") == 8
    assert log_start(bs, "kept") == 0  # the same retention pass kept it: the topic override wins

    # per-broker over the cluster default (confluent-kafka addresses broker "0")
    assert alter(bs, "0", ("log.retention.ms", "120000", SET), ("log.retention.bytes", "100000", SET)) == (
        0,
        "",
    )
    assert source_of(bs, TOPIC, "plain", "retention.ms") == ("120000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    entry = describe(bs, BROKER, "0")["log.retention.ms"]
    assert (entry.value, ConfigSource(entry.source), entry.is_read_only) == (
        "120000",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        False,
    )

    # both layers survive a restart
    fresh_broker.restart()
    bs = fresh_broker.bootstrap_servers
    assert source_of(bs, TOPIC, "plain", "retention.ms") == ("120000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert source_of(bs, TOPIC, "plain", "retention.bytes") == ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert wire_describe(bs, "") == (0, {"log.retention.ms": ("60000", 3, False)})

    # deleting restores: first the cluster default shows through, then Kafka's default
    assert alter(bs, "0", ("log.retention.ms", None, DELETE), ("log.retention.bytes", None, DELETE)) == (
        0,
        "",
    )
    assert source_of(bs, TOPIC, "plain", "retention.ms") == (
        "60000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert wire_alter(bs, "", ("log.retention.ms", None, 1)) == (0, "")
    assert source_of(bs, TOPIC, "plain", "retention.ms") == (WEEK_MS, ConfigSource.DEFAULT_CONFIG)
    assert source_of(bs, TOPIC, "plain", "retention.bytes") == ("-1", ConfigSource.DEFAULT_CONFIG)
    assert wire_describe(bs, "") == (0, {})


def test_refusals_validate_only_and_legacy_alter(fresh_broker: Broker) -> None:
    bs = fresh_broker.bootstrap_servers
    confluent_create_topic(bs, "plain", 1)

    def segment_bytes() -> tuple[str, ConfigSource]:
        return source_of(bs, TOPIC, "plain", "segment.bytes")

    static = ("1024", ConfigSource.STATIC_BROKER_CONFIG)
    assert segment_bytes() == static

    code, message = alter(bs, "0", ("listeners", "PLAINTEXT://127.0.0.1:1", SET))
    assert (code, "listeners" in message) == (ErrorCode.INVALID_REQUEST, True)
    code, message = alter(bs, "0", ("log.dirs", "/tmp/elsewhere", SET))
    assert (code, "log.dirs" in message) == (ErrorCode.INVALID_REQUEST, True)
    code, message = alter(bs, "0", ("log.segment.bytes", "2048", SET), ("no.such.config", "1", SET))
    assert (code, "no.such.config" in message) == (ErrorCode.INVALID_CONFIG, True)
    code, message = alter(bs, "0", ("log.segment.bytes", "2048", SET), ("log.retention.ms", "soon", SET))
    assert (code, "log.retention.ms" in message) == (ErrorCode.INVALID_CONFIG, True)
    assert segment_bytes() == static  # a refused request applied nothing of itself

    # validate_only: a valid change is accepted and not applied, an invalid one still refused
    assert alter(bs, "0", ("log.segment.bytes", "2048", SET), validate_only=True) == (0, "")
    assert wire_alter(bs, "", ("log.segment.bytes", "4096", 0), validate_only=True) == (0, "")
    assert alter(bs, "0", ("log.segment.bytes", "1", SET), validate_only=True)[0] == ErrorCode.INVALID_CONFIG
    assert segment_bytes() == static
    assert wire_describe(bs, "") == (0, {})

    # other broker ids are not this broker's to describe or alter
    assert wire_describe(bs, "7")[0] == ErrorCode.INVALID_REQUEST
    assert wire_alter(bs, "7", ("log.segment.bytes", "2048", 0))[0] == ErrorCode.INVALID_REQUEST
    assert wire_describe(bs, "x")[0] == ErrorCode.INVALID_REQUEST

    # AlterConfigs replaces a whole layer
    assert wire_alter(bs, "", ("log.segment.bytes", "4096", 0), ("log.retention.bytes", "5000", 0)) == (0, "")
    assert wire_replace(bs, "", {"log.retention.bytes": "6000"}) == 0
    assert wire_describe(bs, "") == (0, {"log.retention.bytes": ("6000", 3, False)})
    assert wire_replace(bs, "", {"num.partitions": "4"}) == ErrorCode.INVALID_REQUEST


def test_kafka_python_sees_the_dynamic_keys_and_alters_them(fresh_broker: Broker) -> None:
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType as KpType
    from kafka.admin import KafkaAdminClient

    bs = fresh_broker.bootstrap_servers
    confluent_create_topic(bs, "plain", 1)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        dynamic = admin.describe_configs([KpResource(KpType.BROKER, "0")], config_filter="dynamic")
        assert set(dynamic["broker"]["0"]) == DYNAMIC_BROKER_CONFIGS
        # incremental (kafka-python's default against a broker that has it), then the legacy AlterConfigs
        result = admin.alter_configs([KpResource(KpType.BROKER, "0", {"message.max.bytes": "2000"})])
        assert result == {"broker": {"0": "OK"}}
        result = admin.alter_configs(
            [KpResource(KpType.BROKER, "0", {"log.segment.bytes": "4096"})], incremental=False
        )
        assert result == {"broker": {"0": "OK"}}
        modified = admin.describe_configs([KpResource(KpType.BROKER, "0")])  # config_filter="modified"
        assert {k: (v["value"], v["config_source"]) for k, v in modified["broker"]["0"].items()} == {
            "message.max.bytes": ("2000", "DYNAMIC_BROKER_CONFIG"),
            "log.segment.bytes": ("4096", "DYNAMIC_BROKER_CONFIG"),
        }
        refused = admin.alter_configs(
            [KpResource(KpType.BROKER, "0", {"node.id": "3"})], raise_on_unknown=False
        )
        assert refused["broker"]["0"].startswith("[Error 42] InvalidRequestError")
        assert "node.id" in refused["broker"]["0"]
    finally:
        admin.close()
    assert source_of(bs, TOPIC, "plain", "max.message.bytes") == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert source_of(bs, TOPIC, "plain", "segment.bytes") == ("4096", ConfigSource.DYNAMIC_BROKER_CONFIG)
    # the new message.max.bytes is enforced live on the topic without an override
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bs, "log_level": 3, "message.max.bytes": 100_000}
    )
    errors: list[Any] = []
    producer.produce("plain", value=b"y" * 5000, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE]
