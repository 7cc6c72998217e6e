"""Group configs (GROUP resources, Kafka 4's ``kafka-configs --entity-type groups``) against one real broker:
confluent-kafka's AdminClient describing defaults and overrides, IncrementalAlterConfigs SET / DELETE and
AlterConfigs replacing, refusals with Kafka's error codes and messages (nothing stored), the consumer
group coordinator taking a group's ``consumer.heartbeat.interval.ms``, ``tidelog configs --group``, and
the overrides surviving a restart in their checksummed file (a damaged one refused by name)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from tests.cli.cli_support import failed, ok, tidelog_cli

from tidelog.client.wire import connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from tidelog.server.config import BrokerConfig
from tidelog.server.entity_configs import EntityConfigsError
from tidelog.server.group_configs import GroupConfigStore
from tidelog.server.json_checksum import json_crc32c
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

GROUP = ConfigResource.Type.GROUP
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
_NOT_YET = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
)

DEFAULTS = {
    "consumer.session.timeout.ms": "45000",
    "consumer.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5",
    "share.partition.max.record.locks": "2000",
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.acquire.mode": "batch_optimized",
    "errors.deadletterqueue.topic.name": "",
    "errors.deadletterqueue.copy.record.enable": "false",
    "share.release.backoff.ms": "0",
    "share.release.backoff.multiplier": "1.0",
    "share.release.backoff.max.ms": "0",
}


@pytest.fixture(scope="module")
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})


def describe(admin: AdminClient, group: str) -> dict[str, Any]:
    resource = ConfigResource(GROUP, group)
    return dict(admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=30))


def values(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    return {name: (entry.value, ConfigSource(entry.source)) for name, entry in describe(admin, group).items()}


def overrides(admin: AdminClient, group: str) -> dict[str, str]:
    return {
        name: v for name, (v, source) in values(admin, group).items() if source is ConfigSource.GROUP_CONFIG
    }


def alter(admin: AdminClient, group: str, *ops: tuple[str, Any, str | None]) -> None:
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, op, value in ops]
    resource = ConfigResource(GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)


def refusal(admin: AdminClient, group: str, *ops: tuple[str, Any, str | None]) -> tuple[str, str]:
    with pytest.raises(KafkaException) as caught:
        alter(admin, group, *ops)
    error = caught.value.args[0]
    return error.name(), error.str()


def test_a_group_without_overrides_describes_the_broker_defaults(admin: AdminClient) -> None:
    described = describe(admin, "fresh")
    assert {name: entry.value for name, entry in described.items()} == DEFAULTS
    assert {ConfigSource(entry.source) for entry in described.values()} == {ConfigSource.DEFAULT_CONFIG}
    assert not any(entry.is_read_only or entry.is_sensitive for entry in described.values())


def test_incremental_alter_sets_and_deletes_keys(admin: AdminClient) -> None:
    alter(
        admin,
        "workers",
        ("share.record.lock.duration.ms", SET, "20000"),
        ("share.isolation.level", SET, "read_committed"),
        ("errors.deadletterqueue.topic.name", SET, "dlq.orders"),
        ("share.release.backoff.ms", SET, "250"),
        ("share.auto.offset.reset", SET, "by_duration:PT1H"),
    )
    assert overrides(admin, "workers") == {
        "share.record.lock.duration.ms": "20000",
        "share.isolation.level": "read_committed",
        "errors.deadletterqueue.topic.name": "dlq.orders",
        "share.release.backoff.ms": "250",
        "share.auto.offset.reset": "by_duration:PT1H",
    }
    alter(
        admin, "workers", ("share.release.backoff.ms", DELETE, None), ("share.delivery.count.limit", SET, "3")
    )
    described = values(admin, "workers")
    assert described["share.release.backoff.ms"] == ("0", ConfigSource.DEFAULT_CONFIG)
    assert described["share.delivery.count.limit"] == ("3", ConfigSource.GROUP_CONFIG)
    assert overrides(admin, "fresh") == {}  # another group is untouched


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [("share.record.lock.duration.ms", SET, "5000")],
            "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.",
        ),
        (
            [("share.record.lock.duration.ms", SET, "soon")],
            "Invalid value soon for configuration share.record.lock.duration.ms: Not a number of type INT",
        ),
        (
            [("share.delivery.count.limit", SET, "1")],
            "Invalid value 1 for configuration share.delivery.count.limit",
        ),
        ([("no.such.key", SET, "1")], "Unknown group config name: no.such.key"),
        (
            [("share.isolation.level", SET, "dirty")],
            "Invalid value dirty for configuration share.isolation.level",
        ),
        (
            [("share.acquire.mode", SET, "whole_batches")],
            (
                "Invalid value whole_batches for configuration share.acquire.mode: String must be one of: "
                "batch_optimized, record_limit"
            ),
        ),
        (
            [("consumer.heartbeat.interval.ms", SET, "16000")],
            "consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.",
        ),
        (
            [("share.release.backoff.max.ms", SET, "50")],
            "share.release.backoff.max.ms must be greater than or equal to share.release.backoff.ms",
        ),
        (
            [("errors.deadletterqueue.topic.name", SET, "__consumer_offsets")],
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'",
        ),
    ],
)
def test_bad_values_are_refused_and_nothing_is_stored(
    admin: AdminClient, ops: list[tuple[str, Any, str | None]], message: str
) -> None:
    # a good key in the same request is not stored either: the group's result is validated whole
    name, text = refusal(admin, "strict", ("share.release.backoff.ms", SET, "100"), *ops)
    assert name == "INVALID_CONFIG"
    assert message in text
    assert overrides(admin, "strict") == {}


def test_legacy_alter_configs_replaces_every_override(broker: Broker, admin: AdminClient) -> None:
    alter(
        admin, "replaced", ("share.delivery.count.limit", SET, "4"), ("share.release.backoff.ms", SET, "10")
    )
    config = AlterConfigsRequest.AlterableConfig(name="share.record.lock.duration.ms", value="45000")
    resource = AlterConfigsRequest.AlterConfigsResource(
        resource_type=32, resource_name="replaced", configs=[config]
    )
    with connect(broker.bootstrap_servers, timeout=30) as wire:
        (result,) = wire.call(
            AlterConfigsRequest(resources=[resource]), expect=AlterConfigsResponse
        ).responses
    assert result.error_code == 0, result.error_message
    assert overrides(admin, "replaced") == {"share.record.lock.duration.ms": "45000"}


def test_an_empty_group_name_is_an_invalid_request(broker: Broker) -> None:
    from tidelog.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse

    resource = DescribeConfigsRequest.DescribeConfigsResource(resource_type=32, resource_name="")
    with connect(broker.bootstrap_servers, timeout=30) as wire:
        (result,) = wire.call(
            DescribeConfigsRequest(resources=[resource]), expect=DescribeConfigsResponse
        ).results
    assert (result.error_code, result.error_message) == (42, "Group name must not be empty")


def test_the_consumer_group_coordinator_takes_the_groups_heartbeat_interval(
    broker: Broker, admin: AdminClient
) -> None:
    alter(admin, "kip848", ("consumer.heartbeat.interval.ms", SET, "7000"))
    with connect(broker.bootstrap_servers, timeout=30) as wire:
        for group, expected in (("kip848", 7000), ("kip848-default", 5000)):
            request = ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id="m1",
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[],
                topic_partitions=[],
            )
            deadline = time.monotonic() + 30
            while True:  # the first request creates __consumer_offsets; its coordinator loads it at once
                wire.call(FindCoordinatorRequest(key=group, key_type=0), 3, expect=FindCoordinatorResponse)
                answer = wire.call(request, 0, expect=ConsumerGroupHeartbeatResponse)
                if answer.error_code not in _NOT_YET or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert (answer.error_code, answer.heartbeat_interval_ms) == (0, expected)


def test_cli_describes_and_alters_a_group(broker: Broker) -> None:
    b = ["--bootstrap-server", broker.bootstrap_servers]
    ok(
        tidelog_cli(
            "configs",
            "--group",
            "cli",
            "--alter",
            "--add-config",
            "share.record.lock.duration.ms=16000,share.delivery.count.limit=6",
            *b,
        )
    )
    ok(
        tidelog_cli(
            "configs", "--group", "cli", "--alter", "--delete-config", "share.delivery.count.limit", *b
        )
    )
    document = json.loads(ok(tidelog_cli("configs", "--group", "cli", "--format", "json", *b)))
    assert document["configs"] == [
        {"name": "share.record.lock.duration.ms", "value": "16000", "source": "GROUP_CONFIG"}
    ]
    table = ok(tidelog_cli("configs", "--entity-type", "groups", "--entity-name", "cli", "--describe", *b))
    assert "share.record.lock.duration.ms" in table
    assert "16000" in table
    refused = failed(
        tidelog_cli("configs", "--group", "cli", "--alter", "--add-config", "share.session.timeout.ms=1", *b)
    )
    assert "share.session.timeout.ms must be in the range 45000 to 60000 inclusive." in refused


def test_overrides_survive_a_restart_in_their_checksummed_file(broker: Broker, admin: AdminClient) -> None:
    alter(admin, "durable/group", ("share.record.lock.duration.ms", SET, "25000"))
    before = overrides(admin, "durable/group")
    broker.restart()
    after_admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    assert overrides(after_admin, "durable/group") == before == {"share.record.lock.duration.ms": "25000"}
    stored = json.loads((broker.data_dir / "tidelog-group-configs.json").read_text())
    assert stored["entities"]["groups/durable%2Fgroup"] == {"share.record.lock.duration.ms": "25000"}
    assert stored["crc32c"] == json_crc32c(stored["entities"])


def test_the_store_refuses_a_damaged_file_by_name_and_validate_only_stores_nothing(tmp_path: Path) -> None:
    config = BrokerConfig.from_mapping({})
    store = GroupConfigStore.on_disk(tmp_path, lambda: config)
    asyncio.run(store.incremental_alter("g", [("share.delivery.count.limit", 0, "3")], validate_only=True))
    assert store.configs_of("g") == {}
    asyncio.run(store.incremental_alter("g", [("share.delivery.count.limit", 0, "3")]))
    assert GroupConfigStore.on_disk(tmp_path, lambda: config).configs_of("g") == {
        "share.delivery.count.limit": "3"
    }
    path = tmp_path / "tidelog-group-configs.json"
    path.write_text(path.read_text().replace('"3"', '"4"'))
    with pytest.raises(
        EntityConfigsError, match=r"the group configs in .*tidelog-group-configs.json are damaged"
    ):
        GroupConfigStore.on_disk(tmp_path, lambda: config)
