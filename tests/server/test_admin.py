"""Admin round trips against a real broker with confluent-kafka, kafka-python and aiokafka.

Each client creates, deletes and grows topics and reads and alters configs through its own admin API (so
each exercises the versions it negotiates), and every error case is asserted with Kafka's exact error code:
CreateTopics (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG,
INVALID_TOPIC_EXCEPTION, validate_only), DeleteTopics by name, CreatePartitions (increase only),
DescribeConfigs sources and synonyms, AlterConfigs / IncrementalAlterConfigs (validated whole, applied
live, persisted across a graceful restart and a SIGKILL), DescribeCluster from kafka-python, and that the
cluster id and a DeleteRecords log start offset survive restarts.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from tests.support.kafka_workload import GROUP_ID_UNUSED, confluent_create_topic, confluent_high_watermarks

from tidelog.client.wire import connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DescribeConfigsRequest
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {
    "log.segment.bytes": "536870912",
    "num.partitions": "3",
    "auto.create.topics.enable": "false",
}

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


@dataclass(frozen=True)
class Spec:
    name: str
    partitions: int = 1
    replication: int = 1
    configs: dict[str, str] = field(default_factory=dict)


# -- per-client admin adapters: each returns {topic: Kafka error code (0 = success)} ----------------------


def _ck_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _ck_code(future: Any) -> int:
    try:
        future.result(timeout=30)
    except confluent_kafka.KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def ck_create(bootstrap: str, specs: list[Spec], validate_only: bool = False) -> dict[str, int]:
    admin = _ck_admin(bootstrap)
    new = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication, config=s.configs)
        for s in specs
    ]
    futures = admin.create_topics(new, validate_only=validate_only, request_timeout=30)
    return {name: _ck_code(f) for name, f in futures.items()}


def kp_create(bootstrap: str, specs: list[Spec], validate_only: bool = False) -> dict[str, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_topics(
            {
                s.name: {
                    "num_partitions": s.partitions,
                    "replication_factor": s.replication,
                    "configs": s.configs,
                }
                for s in specs
            },
            validate_only=validate_only,
            raise_errors=False,
        )
    finally:
        admin.close()
    return {t["name"]: t["error_code"] for t in result["topics"]}


def _ak(coro_fn: Callable[[Any], Any], bootstrap: str) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    async def run() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return await coro_fn(admin)
        finally:
            await admin.close()

    return asyncio.run(asyncio.wait_for(run(), 60))


def ak_create(bootstrap: str, specs: list[Spec], validate_only: bool = False) -> dict[str, int]:
    from aiokafka.admin import NewTopic as AkNewTopic

    async def go(admin: Any) -> Any:
        return await admin.create_topics(
            [AkNewTopic(s.name, s.partitions, s.replication, topic_configs=s.configs) for s in specs],
            validate_only=validate_only,
        )

    response = _ak(go, bootstrap)
    return {row[0]: row[1] for row in response.topic_errors}


def ck_delete(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = _ck_admin(bootstrap)  # must outlive its futures
    futures = admin.delete_topics(names, request_timeout=30)
    return {name: _ck_code(f) for name, f in futures.items()}


def kp_delete(bootstrap: str, names: list[str]) -> dict[str, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_topics(names, raise_errors=False)
    finally:
        admin.close()
    return {t["name"]: t["error_code"] for t in result["topics"]}


def ak_delete(bootstrap: str, names: list[str]) -> dict[str, int]:
    async def go(admin: Any) -> Any:
        return await admin.delete_topics(names)

    response = _ak(go, bootstrap)
    return {row[0]: row[1] for row in response.topic_error_codes}


def ck_grow(bootstrap: str, counts: dict[str, int], validate_only: bool = False) -> dict[str, int]:
    admin = _ck_admin(bootstrap)  # must outlive its futures
    futures = admin.create_partitions(
        [NewPartitions(t, n) for t, n in counts.items()], validate_only=validate_only, request_timeout=30
    )
    return {name: _ck_code(f) for name, f in futures.items()}


def kp_grow(bootstrap: str, counts: dict[str, int], validate_only: bool = False) -> dict[str, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_partitions(counts, validate_only=validate_only, raise_errors=False)
    finally:
        admin.close()
    return {r.name: r.error_code for r in result.results}


def ak_grow(bootstrap: str, counts: dict[str, int], validate_only: bool = False) -> dict[str, int]:
    """aiokafka raises on the first error; one topic per call keeps the codes exact."""
    import aiokafka.errors
    from aiokafka.admin import NewPartitions as AkNewPartitions

    out = {}
    for name, count in counts.items():

        async def go(admin: Any, name: str = name, count: int = count) -> Any:
            return await admin.create_partitions({name: AkNewPartitions(count)}, validate_only=validate_only)

        try:
            _ak(go, bootstrap)
        except aiokafka.errors.KafkaError as exc:
            out[name] = exc.errno
        else:
            out[name] = 0
    return out


CREATE = {"confluent-kafka": ck_create, "kafka-python": kp_create, "aiokafka": ak_create}
DELETE = {"confluent-kafka": ck_delete, "kafka-python": kp_delete, "aiokafka": ak_delete}
GROW = {"confluent-kafka": ck_grow, "kafka-python": kp_grow, "aiokafka": ak_grow}


def topics_on_broker(bootstrap: str) -> dict[str, int]:
    """{topic: partition count} from a full Metadata request."""
    metadata = _ck_admin(bootstrap).list_topics(timeout=20)
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes) -> tuple[int, int | None]:
    """(error code, offset) of one acks=all produce."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "log_level": 3, "message.timeout.ms": 20000}
    )
    result: list[tuple[int, int | None]] = []
    producer.produce(
        topic,
        value=value,
        partition=partition,
        on_delivery=lambda err, msg: result.append((0, msg.offset()) if err is None else (err.code(), None)),
    )
    assert producer.flush(30) == 0
    return result[0]


# -- CreateTopics ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_create_topics_error_cases(broker: Broker, client: str) -> None:
    bootstrap = broker.bootstrap_servers
    prefix = f"ct-{client}"
    assert CREATE[client](bootstrap, [Spec(f"{prefix}-existing", 2)]) == {f"{prefix}-existing": 0}
    cases = [
        (Spec(f"{prefix}-good", 4, 1, {"retention.ms": "3600000"}), ErrorCode.NONE),
        (Spec(f"{prefix}-existing", 2), ErrorCode.TOPIC_ALREADY_EXISTS),
        (Spec(f"{prefix}-zero-partitions", 0), ErrorCode.INVALID_PARTITIONS),
        (Spec(f"{prefix}-rf3", 1, 3), ErrorCode.INVALID_REPLICATION_FACTOR),
        (Spec(f"{prefix}-rf0", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (Spec(f"{prefix}-bad-policy", 1, 1, {"cleanup.policy": "bogus"}), ErrorCode.INVALID_CONFIG),
        (Spec(f"{prefix}-unknown-config", 1, 1, {"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
        (Spec(f"{prefix}-bad-number", 1, 1, {"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
        (Spec(f"{prefix} has spaces!", 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (Spec(f"{prefix}-" + "x" * 250, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (Spec("..", 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
    ]
    got = CREATE[client](bootstrap, [spec for spec, _ in cases])
    assert got == {spec.name: int(code) for spec, code in cases}
    listed = topics_on_broker(bootstrap)
    assert listed[f"{prefix}-good"] == 4
    assert listed[f"{prefix}-existing"] == 2
    rejected = {
        spec.name for spec, code in cases if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
    }
    assert not rejected & set(listed)
    # the created topic works at once
    assert produce_one(bootstrap, f"{prefix}-good", 3, b"first") == (0, 0)


@pytest.mark.parametrize("client", CLIENTS)
def test_create_topics_validate_only(broker: Broker, client: str) -> None:
    bootstrap = broker.bootstrap_servers
    prefix = f"vo-{client}"
    assert CREATE[client](bootstrap, [Spec(f"{prefix}-existing")]) == {f"{prefix}-existing": 0}
    got = CREATE[client](
        bootstrap,
        [
            Spec(f"{prefix}-would-work", 3, 1, {"segment.bytes": "1048576"}),
            Spec(f"{prefix}-existing"),
            Spec(f"{prefix}-zero", 0),
            Spec(f"{prefix}-bad-config", 1, 1, {"min.insync.replicas": "zero"}),
        ],
        validate_only=True,
    )
    assert got == {
        f"{prefix}-would-work": 0,
        f"{prefix}-existing": ErrorCode.TOPIC_ALREADY_EXISTS,
        f"{prefix}-zero": ErrorCode.INVALID_PARTITIONS,
        f"{prefix}-bad-config": ErrorCode.INVALID_CONFIG,
    }
    listed = topics_on_broker(bootstrap)
    assert f"{prefix}-would-work" not in listed
    assert f"{prefix}-zero" not in listed
    # validating changed nothing: the topic can still be created for real afterwards
    assert CREATE[client](bootstrap, [Spec(f"{prefix}-would-work", 3)]) == {f"{prefix}-would-work": 0}
    assert topics_on_broker(bootstrap)[f"{prefix}-would-work"] == 3


def test_create_topics_with_replica_assignments(broker: Broker) -> None:
    """kafka-python can send explicit assignments: only this broker (node 1) may hold replicas."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        result = admin.create_topics(
            {
                "assigned-ok": {"assignments": {0: [1], 1: [1], 2: [1]}},
                "assigned-other-broker": {"assignments": {0: [1], 1: [2]}},
                "assigned-two-replicas": {"assignments": {0: [1, 2]}},
            },
            raise_errors=False,
        )
    finally:
        admin.close()
    assert {t["name"]: t["error_code"] for t in result["topics"]} == {
        "assigned-ok": 0,
        "assigned-other-broker": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "assigned-two-replicas": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    }
    listed = topics_on_broker(broker.bootstrap_servers)
    assert listed["assigned-ok"] == 3
    assert "assigned-other-broker" not in listed
    assert "assigned-two-replicas" not in listed


def test_create_topic_with_broker_defaults(broker: Broker, topic: str) -> None:
    """num_partitions=-1 and replication_factor=-1 take num.partitions (3 here) and 1."""
    assert ck_create(broker.bootstrap_servers, [Spec(topic, -1, -1)]) == {topic: 0}
    metadata = _ck_admin(broker.bootstrap_servers).list_topics(topic, timeout=20)
    partitions = metadata.topics[topic].partitions
    assert sorted(partitions) == [0, 1, 2]
    for p in partitions.values():
        assert (p.leader, p.replicas, p.isrs, p.error) == (1, [1], [1], None)


# -- DeleteTopics ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_delete_topics_by_name(broker: Broker, client: str) -> None:
    bootstrap = broker.bootstrap_servers
    doomed, kept = f"del-{client}-doomed", f"del-{client}-kept"
    assert ck_create(bootstrap, [Spec(doomed, 2), Spec(kept, 1)]) == {doomed: 0, kept: 0}
    for i in range(3):
        assert produce_one(bootstrap, doomed, 1, b"old-%d" % i) == (0, i)
    assert produce_one(bootstrap, kept, 0, b"kept") == (0, 0)

    assert DELETE[client](bootstrap, [doomed]) == {doomed: 0}
    listed = topics_on_broker(bootstrap)
    assert doomed not in listed
    assert listed[kept] == 1
    assert DELETE[client](bootstrap, [doomed, f"del-{client}-never-existed"]) == {
        doomed: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        f"del-{client}-never-existed": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # Metadata for the deleted topic says it is unknown (auto-create is off here)
    admin = _ck_admin(bootstrap)
    assert (
        admin.list_topics(doomed, timeout=20).topics[doomed].error.code()
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    # the same name again is a new, empty topic; the other topic kept its data
    assert ck_create(bootstrap, [Spec(doomed, 2)]) == {doomed: 0}
    assert confluent_high_watermarks(bootstrap, doomed, 2) == {0: (0, 0), 1: (0, 0)}
    assert confluent_high_watermarks(bootstrap, kept, 1) == {0: (0, 1)}
    assert produce_one(bootstrap, doomed, 1, b"new") == (0, 0)


# -- CreatePartitions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_create_partitions_increase_only(broker: Broker, client: str) -> None:
    bootstrap = broker.bootstrap_servers
    name = f"grow-{client}"
    assert ck_create(bootstrap, [Spec(name, 2)]) == {name: 0}
    assert produce_one(bootstrap, name, 1, b"before") == (0, 0)

    if client != "aiokafka":  # aiokafka's validate_only is tested through the others' code path
        assert GROW[client](bootstrap, {name: 8}, validate_only=True) == {name: 0}
        assert topics_on_broker(bootstrap)[name] == 2
    assert GROW[client](bootstrap, {name: 5}) == {name: 0}
    assert topics_on_broker(bootstrap)[name] == 5
    assert GROW[client](bootstrap, {name: 3}) == {name: ErrorCode.INVALID_PARTITIONS}
    assert GROW[client](bootstrap, {name: 5}) == {name: ErrorCode.INVALID_PARTITIONS}
    assert GROW[client](bootstrap, {f"{name}-missing": 4}) == {
        f"{name}-missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert topics_on_broker(bootstrap)[name] == 5
    # old data untouched, new partitions usable from offset 0
    assert confluent_high_watermarks(bootstrap, name, 5) == {
        0: (0, 0),
        1: (0, 1),
        2: (0, 0),
        3: (0, 0),
        4: (0, 0),
    }
    assert produce_one(bootstrap, name, 4, b"new") == (0, 0)
    assert produce_one(bootstrap, name, 1, b"after") == (0, 1)


# -- DescribeConfigs -------------------------------------------------------------------------------------------


def ck_describe(bootstrap: str, resource: ConfigResource) -> dict[str, ConfigEntry]:
    admin = _ck_admin(bootstrap)  # must outlive its futures
    futures = admin.describe_configs([resource], request_timeout=30)
    (future,) = futures.values()
    return dict(future.result(timeout=30))


def test_describe_configs_sources_and_defaults(broker: Broker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    assert ck_create(
        bootstrap, [Spec(topic, 1, 1, {"retention.ms": "3600000", "cleanup.policy": "compact"})]
    ) == {topic: 0}
    entries = ck_describe(bootstrap, ConfigResource(ConfigResource.Type.TOPIC, topic))

    def summary(name: str) -> tuple[str | None, ConfigSource, bool, bool]:
        e = entries[name]
        return e.value, ConfigSource(e.source), e.is_default, e.is_read_only

    # a topic override
    assert summary("retention.ms") == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False)
    assert summary("cleanup.policy") == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False)
    # the static broker config (log.segment.bytes=536870912 on this broker)
    assert summary("segment.bytes") == ("536870912", ConfigSource.STATIC_BROKER_CONFIG, False, False)
    # Kafka defaults
    assert summary("max.message.bytes") == ("1048588", ConfigSource.DEFAULT_CONFIG, True, False)
    assert summary("retention.bytes") == ("-1", ConfigSource.DEFAULT_CONFIG, True, False)
    assert summary("min.insync.replicas") == ("1", ConfigSource.DEFAULT_CONFIG, True, False)
    # synonyms (librdkafka asks for them; its dict keeps one entry per name, so the full chains are checked
    # with kafka-python below). Kafka drops broker synonyms before the head name (log.retention.ms is unset,
    # so log.retention.hours' default is not listed).
    retention_synonyms = [
        (s.name, s.value, ConfigSource(s.source)) for s in entries["retention.ms"].synonyms.values()
    ]
    assert retention_synonyms == [("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)]

    # broker resource: static values with their sources
    broker_entries = ck_describe(bootstrap, ConfigResource(ConfigResource.Type.BROKER, "1"))
    assert broker_entries["log.segment.bytes"].value == "536870912"
    assert ConfigSource(broker_entries["log.segment.bytes"].source) == ConfigSource.STATIC_BROKER_CONFIG
    assert broker_entries["num.partitions"].value == "3"
    assert ConfigSource(broker_entries["message.max.bytes"].source) == ConfigSource.DEFAULT_CONFIG
    assert broker_entries["message.max.bytes"].value == "1048588"
    assert broker_entries["num.partitions"].is_read_only
    assert not broker_entries["log.segment.bytes"].is_read_only  # dynamic (KIP-226)

    # an unknown topic
    with pytest.raises(confluent_kafka.KafkaException) as info:
        ck_describe(bootstrap, ConfigResource(ConfigResource.Type.TOPIC, f"{topic}-missing"))
    assert info.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("keys", [None, [], ["retention.ms", "cleanup.policy"]])
def test_describe_configs_key_filter_on_the_wire(broker: Broker, topic: str, keys: list[str] | None) -> None:
    """``configuration_keys`` null or empty returns every config (as Kafka's ConfigHelper); a list only those."""
    confluent_create_topic(broker.bootstrap_servers, topic, 1)
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=keys
    )
    with connect(broker.bootstrap_servers, timeout=30) as wire:
        (result,) = wire.call(DescribeConfigsRequest(resources=[resource]), 4).results
    assert result.error_code == ErrorCode.NONE
    names = {c.name for c in result.configs}
    if keys:
        assert names == set(keys)
    else:
        assert {"retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes"} <= names
        assert len(names) > 20


def test_describe_configs_kafka_python_and_aiokafka(broker: Broker, topic: str) -> None:
    from aiokafka.admin.config_resource import ConfigResource as AkResource
    from aiokafka.admin.config_resource import ConfigResourceType as AkType
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType as KpType
    from kafka.admin import KafkaAdminClient

    bootstrap = broker.bootstrap_servers
    assert ck_create(bootstrap, [Spec(topic, 1, 1, {"retention.ms": "3600000"})]) == {topic: 0}

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_configs(
            [KpResource(KpType.TOPIC, topic, ["retention.ms", "segment.bytes", "max.message.bytes"])],
            include_synonyms=True,
            config_filter="all",
        )
    finally:
        admin.close()
    configs = described["topic"][topic]
    assert {k: (v["value"], v["config_source"], v["synonyms"]) for k, v in configs.items()} == {
        "retention.ms": (
            "3600000",
            "DYNAMIC_TOPIC_CONFIG",
            [{"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}],
        ),
        "segment.bytes": (
            "536870912",
            "STATIC_BROKER_CONFIG",
            [
                {"name": "log.segment.bytes", "value": "536870912", "source": "STATIC_BROKER_CONFIG"},
                {"name": "log.segment.bytes", "value": "1073741824", "source": "DEFAULT_CONFIG"},
            ],
        ),
        "max.message.bytes": (
            "1048588",
            "DEFAULT_CONFIG",
            [{"name": "message.max.bytes", "value": "1048588", "source": "DEFAULT_CONFIG"}],
        ),
    }

    async def go(admin: Any) -> Any:
        return await admin.describe_configs(
            [AkResource(AkType.TOPIC, topic, {"retention.ms": None, "segment.bytes": None})]
        )

    (response,) = _ak(go, bootstrap)
    ((error_code, _message, resource_type, name, entries),) = response.resources
    assert (error_code, resource_type, name) == (0, 2, topic)
    assert {e[0]: e[1] for e in entries} == {"retention.ms": "3600000", "segment.bytes": "536870912"}


# -- AlterConfigs / IncrementalAlterConfigs ------------------------------------------------------------------


def _topic_overrides(bootstrap: str, topic: str) -> dict[str, str | None]:
    entries = ck_describe(bootstrap, ConfigResource(ConfigResource.Type.TOPIC, topic))
    return {
        n: e.value for n, e in entries.items() if ConfigSource(e.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    }


def test_alter_configs_applied_live_and_persisted(fresh_broker: Broker) -> None:
    from aiokafka.admin.config_resource import ConfigResource as AkResource
    from aiokafka.admin.config_resource import ConfigResourceType as AkType
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType as KpType
    from kafka.admin import KafkaAdminClient

    bootstrap = fresh_broker.bootstrap_servers
    a, b, c = "alter-incremental", "alter-replace", "alter-aiokafka"
    assert ck_create(
        bootstrap,
        [
            Spec(a, 1, 1, {"segment.ms": "3600000", "retention.ms": "86400000"}),
            Spec(b, 1, 1, {"retention.ms": "60000"}),
            Spec(c, 1, 1, {"segment.ms": "3600000"}),
        ],
    ) == {a: 0, b: 0, c: 0}
    admin = _ck_admin(bootstrap)

    # IncrementalAlterConfigs (confluent-kafka): SET two keys, DELETE one, keep the untouched one
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        a,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=30)
    # a whole request is rejected when one entry is bad: nothing of it is applied
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        a,
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "lots", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    (future,) = admin.incremental_alter_configs([bad]).values()
    assert _ck_code(future) == ErrorCode.INVALID_CONFIG
    unknown = ConfigResource(
        ConfigResource.Type.TOPIC,
        a,
        incremental_configs=[ConfigEntry("no.such.key", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    (future,) = admin.incremental_alter_configs([unknown]).values()
    assert _ck_code(future) == ErrorCode.INVALID_CONFIG
    # validate_only changes nothing
    dry = ConfigResource(
        ConfigResource.Type.TOPIC,
        a,
        incremental_configs=[ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.SET)],
    )
    (future,) = admin.incremental_alter_configs([dry], validate_only=True).values()
    assert _ck_code(future) == 0
    missing = ConfigResource(
        ConfigResource.Type.TOPIC,
        "no-such-topic",
        incremental_configs=[ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.SET)],
    )
    (future,) = admin.incremental_alter_configs([missing]).values()
    assert _ck_code(future) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # AlterConfigs (kafka-python, incremental=False): the client describes first and resends the other
    # overrides itself, since AlterConfigs replaces the whole set
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp.alter_configs([KpResource(KpType.TOPIC, b, {"retention.bytes": "1048576"})], incremental=False)
    finally:
        kp.close()

    # AlterConfigs (aiokafka, sends only what it is given): replaces the whole override set
    async def go(admin: Any) -> Any:
        return await admin.alter_configs(
            [AkResource(AkType.TOPIC, c, {"cleanup.policy": "compact", "retention.ms": "123456"})]
        )

    responses = _ak(go, bootstrap)
    assert [tuple(r[:1]) for resp in responses for r in resp.resources] == [(0,)]

    expected = {
        a: {"retention.ms": "7200000", "max.message.bytes": "2000"},
        b: {"retention.ms": "60000", "retention.bytes": "1048576"},
        c: {"cleanup.policy": "compact", "retention.ms": "123456"},
    }

    def check() -> None:
        for name, overrides in expected.items():
            assert _topic_overrides(bootstrap, name) == overrides, name
        # applied to the partition log: a record batch over 2000 bytes is now too large for topic a
        assert produce_one(bootstrap, a, 0, b"x" * 3000)[0] == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE
        assert produce_one(bootstrap, a, 0, b"small")[0] == 0

    check()
    fresh_broker.restart()  # graceful
    assert fresh_broker.bootstrap_servers == bootstrap
    check()
    fresh_broker.kill()  # and a crash: the overrides were persisted before the answers
    fresh_broker.restart()
    check()


# -- DescribeCluster, cluster id ------------------------------------------------------------------------------


def test_describe_cluster_kafka_python(broker: Broker) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    metadata = _ck_admin(broker.bootstrap_servers).list_topics(timeout=20)
    assert cluster["cluster_id"] == metadata.cluster_id
    assert len(cluster["cluster_id"]) == 22  # 16 bytes, URL-safe base64 without padding
    assert cluster["controller_id"] == 1 == metadata.controller_id
    assert cluster["brokers"] == [{"broker_id": 1, "host": "127.0.0.1", "port": broker.port, "rack": None}]

    async def go(admin: Any) -> Any:
        return await admin.describe_cluster()

    ak_cluster = _ak(go, broker.bootstrap_servers)
    assert ak_cluster["cluster_id"] == metadata.cluster_id
    assert ak_cluster["controller_id"] == 1


def test_cluster_id_and_log_start_offset_survive_restarts(fresh_broker: Broker, topic: str) -> None:
    bootstrap = fresh_broker.bootstrap_servers
    cluster_id = _ck_admin(bootstrap).list_topics(timeout=20).cluster_id
    confluent_create_topic(bootstrap, topic, 1)
    for i in range(10):
        assert produce_one(bootstrap, topic, 0, b"v%d" % i) == (0, i)
    admin = _ck_admin(bootstrap)
    (future,) = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 6)]).values()
    assert future.result(timeout=30).low_watermark == 6

    for crash in (False, True):
        if crash:
            fresh_broker.kill()
        fresh_broker.restart()
        assert _ck_admin(bootstrap).list_topics(timeout=20).cluster_id == cluster_id
        assert confluent_high_watermarks(bootstrap, topic, 1) == {0: (6, 10)}
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        got = []
        while len(got) < 4:
            message = consumer.poll(10)
            assert message is not None
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert got == [(6, b"v6"), (7, b"v7"), (8, b"v8"), (9, b"v9")]


def test_a_partition_the_metadata_does_not_name_is_kept_as_a_stray(fresh_broker: Broker, topic: str) -> None:
    """A partition directory the topic metadata does not name (an interrupted delete, or a metadata store
    restored from an older copy) is renamed ``-stray`` and kept with its data, as Kafka keeps stray logs."""
    bootstrap = fresh_broker.bootstrap_servers
    confluent_create_topic(bootstrap, topic, 1)
    for i in range(5):
        assert produce_one(bootstrap, topic, 0, b"v%d" % i) == (0, i)
    fresh_broker.stop()
    data_dir = Path(fresh_broker.data_dir)
    shutil.copytree(data_dir / f"{topic}-0", data_dir / "ghost-0")
    written = (data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    fresh_broker.restart()  # on the same port
    bootstrap = fresh_broker.bootstrap_servers
    assert "ghost" not in _ck_admin(bootstrap).list_topics(timeout=20).topics
    (stray,) = data_dir.glob("ghost-0.*-stray")
    assert (stray / "00000000000000000000.log").read_bytes() == written
    assert not (data_dir / "ghost-0").exists()
    assert f"kept as {stray}" in fresh_broker.log_path.read_text()
    # A topic created with that name starts empty; the stray stays beside it, through restarts.
    confluent_create_topic(bootstrap, "ghost", 1)
    assert confluent_high_watermarks(bootstrap, "ghost", 1) == {0: (0, 0)}
    fresh_broker.restart()
    bootstrap = fresh_broker.bootstrap_servers
    assert confluent_high_watermarks(bootstrap, "ghost", 1) == {0: (0, 0)}
    assert list(data_dir.glob("ghost-0.*-stray")) == [stray]
    assert confluent_high_watermarks(bootstrap, topic, 1) == {0: (0, 5)}
