"""server.properties parsing, BrokerConfig precedence and validation, topic configs, DescribeConfigs sources."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.server.config import (
    BROKER_CONFIGS,
    LONG_MAX,
    TOPIC_CONFIGS,
    AlterConfigOp,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Listener,
    TopicConfigDef,
    apply_incremental_alter,
    describe_broker_configs,
    describe_topic_configs,
    effective_topic_configs,
    load_broker_config,
    log_config_for_topic,
    parse_broker_config,
    parse_properties,
    parse_set_option,
    validate_topic_configs,
)
from tidelog.server.config.listeners import advertised_endpoint


def no_lookup() -> str:
    raise AssertionError("the host name was looked up for a listener with a routable host")


def props(text: str) -> dict[str, str]:
    return {entry.key: entry.value for entry in parse_properties(text)}


def cfg(**kv: str) -> BrokerConfig:
    return BrokerConfig.from_mapping({k.replace("_", "."): v for k, v in kv.items()})


# ---- Java properties syntax ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1", {"a": "1"}),
        ("a = 1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a : 1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("a\t\f1", {"a": "1"}),
        ("   a=1", {"a": "1"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("a==b", {"a": "=b"}),
        ("a=b=c:d", {"a": "b=c:d"}),
        ("a=1   ", {"a": "1   "}),  # trailing whitespace is part of the raw value (typed parsing trims)
        ("# c=1\n! d=2\n\n   \n   # e=3\nf=4", {"f": "4"}),
        ("a=1\nb=2\r\nc=3\rd=4", {"a": "1", "b": "2", "c": "3", "d": "4"}),
        ("a=one\\\n    two\\\n\tthree", {"a": "onetwothree"}),
        ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # even backslashes: no continuation
        ("a=x\\\\\\\n  y", {"a": "x\\y"}),  # odd: continuation after an escaped backslash
        ("# comment \\\nb=2", {"b": "2"}),  # a comment never continues
        ("a=1\\\n# not a comment", {"a": "1# not a comment"}),
        ("a=1\\", {"a": "1"}),  # continuation at end of file
        ("a=tab\\there\\nnl\\rcr\\ff", {"a": "tab\there\nnl\rcr\ff"}),
        ("a=\\u0041\\u00e9", {"a": "A\u00e9"}),
        ("key\\=with\\:seps\\ and\\ space=v", {"key=with:seps and space": "v"}),
        ("a=\\q\\\\", {"a": "q\\"}),
        ("a=C:\\\\data", {"a": "C:\\data"}),
        ("listeners=PLAINTEXT://:9092", {"listeners": "PLAINTEXT://:9092"}),
        ("a=1\na=2", {"a": "2"}),
    ],
)
def test_properties_syntax(text: str, expected: dict[str, str]) -> None:
    assert props(text) == expected


def test_properties_record_where_each_entry_starts() -> None:
    entries = parse_properties("# head\n\na=1\nb=x\\\n  y\nc=3\n", source="server.properties")
    assert [(e.key, e.value, e.where) for e in entries] == [
        ("a", "1", "server.properties:3"),
        ("b", "xy", "server.properties:4"),
        ("c", "3", "server.properties:6"),
    ]


@pytest.mark.parametrize("text", ["a=\\u12", "a=\\u12g4", "a=\\uZZZZ"])
def test_malformed_unicode_escape_is_a_config_error_with_location(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^f\.properties:1: malformed \\uxxxx encoding$"):
        parse_properties(text, source="f.properties")


@pytest.mark.parametrize(
    ("option", "expected"),
    [("a=b", ("a", "b")), ("a=b=c", ("a", "b=c")), ("a=", ("a", "")), (" a =x", ("a", "x"))],
)
def test_parse_set_option(option: str, expected: tuple[str, str]) -> None:
    assert parse_set_option(option) == expected


@pytest.mark.parametrize("option", ["a", "=b", "", "  =x"])
def test_parse_set_option_rejects(option: str) -> None:
    with pytest.raises(ConfigError, match="--set expects key=value"):
        parse_set_option(option)


# ---- BrokerConfig ------------------------------------------------------------------------------------


def test_defaults() -> None:
    config, warnings = load_broker_config()
    assert warnings == []
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
    assert config.broker_listeners[0].bind_address == ("127.0.0.1", 9092)
    assert advertised_endpoint(config.advertised_listener(), 9092, no_lookup) == ("127.0.0.1", 9092)
    assert config.node_id == 1
    assert config.broker_id is None
    assert config.cluster_id is None
    assert config.log_dirs == (Path("./data"),)
    assert config.num_partitions == 1
    assert config.default_replication_factor == 1
    assert config.auto_create_topics_enable is True
    assert config.delete_topic_enable is True
    assert config.log_segment_bytes == 1073741824
    assert config.log_roll_ms == 168 * 3_600_000
    assert config.log_roll_jitter_ms == 0
    assert config.log_retention_ms == 604_800_000
    assert config.log_retention_bytes == -1
    assert config.log_retention_check_interval_ms == 300_000
    assert config.log_index_interval_bytes == 4096
    assert config.log_index_size_max_bytes == 10_485_760
    assert config.log_flush_interval_messages == LONG_MAX
    assert config.log_flush_interval_ms == LONG_MAX
    assert config.log_flush_scheduler_interval_ms == LONG_MAX
    assert config.log_message_timestamp_type == "CreateTime"
    assert config.message_max_bytes == 1048588
    assert config.socket_request_max_bytes == 104857600
    assert config.connections_max_idle_ms == 600_000
    assert config.log_segment_delete_delay_ms == 60_000
    assert config.log_cleanup_policy == ("delete",)
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_topic_replication_factor == 1
    assert config.transaction_state_log_num_partitions == 50
    assert config.group_initial_rebalance_delay_ms == 3000
    assert config.group_min_session_timeout_ms == 6000
    assert config.group_max_session_timeout_ms == 1_800_000
    assert config.offsets_retention_minutes == 10080
    assert config.offsets_retention_ms == 10080 * 60_000
    assert config.transaction_max_timeout_ms == 900_000
    assert config.producer_id_expiration_ms == 86_400_000
    assert config.min_insync_replicas == 1
    assert config.fetch_max_bytes == 57_671_680
    assert config.replica_fetch_wait_max_ms == 500
    assert config.log_cleaner_min_cleanable_ratio == 0.5
    assert config.compression_type == "producer"
    assert config.originals == {}


def test_every_broker_definition_has_an_attribute() -> None:
    attrs = {f.name for f in dataclasses.fields(BrokerConfig)}
    layers = {"originals", "dynamic_default_configs", "dynamic_broker_configs"}
    assert attrs == {d.attr for d in BROKER_CONFIGS.values()} | layers


def test_every_topic_synonym_is_a_broker_config_of_a_compatible_type() -> None:
    numeric = {ConfigType.INT, ConfigType.LONG, ConfigType.SHORT}
    for definition in TOPIC_CONFIGS.values():
        assert isinstance(definition, TopicConfigDef)
        for synonym in definition.broker_synonyms:
            broker_def = BROKER_CONFIGS[synonym.name]
            assert broker_def.type == definition.type or {broker_def.type, definition.type} <= numeric


@pytest.mark.parametrize(
    ("given", "retention_ms"),
    [
        ({}, 604_800_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5),
        ({"log.retention.ms": "5", "log.retention.hours": "1"}, 5),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1", "log.retention.hours": "5"}, -1),
        ({"log.retention.ms": "0"}, 0),
    ],
)
def test_retention_precedence_ms_over_minutes_over_hours(given: dict[str, str], retention_ms: int) -> None:
    assert BrokerConfig.from_mapping(given).log_retention_ms == retention_ms


@pytest.mark.parametrize(
    ("given", "attr", "expected"),
    [
        ({"log.roll.hours": "2"}, "log_roll_ms", 7_200_000),
        ({"log.roll.hours": "2", "log.roll.ms": "10"}, "log_roll_ms", 10),
        ({"log.roll.jitter.hours": "1"}, "log_roll_jitter_ms", 3_600_000),
        ({"log.roll.jitter.hours": "1", "log.roll.jitter.ms": "7"}, "log_roll_jitter_ms", 7),
        ({"log.flush.scheduler.interval.ms": "3000"}, "log_flush_interval_ms", 3000),
        (
            {"log.flush.scheduler.interval.ms": "3000", "log.flush.interval.ms": "10"},
            "log_flush_interval_ms",
            10,
        ),
        ({"log.dir": "/x"}, "log_dirs", (Path("/x"),)),
        ({"log.dir": "/x", "log.dirs": "/a, /b"}, "log_dirs", (Path("/a"), Path("/b"))),
        ({"broker.id": "7"}, "node_id", 7),
        ({"node.id": "7"}, "node_id", 7),
        ({"node.id": "7", "broker.id": "7"}, "node_id", 7),
        ({"auto.create.topics.enable": " FALSE "}, "auto_create_topics_enable", False),
        ({"log.cleanup.policy": "compact , delete"}, "log_cleanup_policy", ("compact", "delete")),
        ({"log.cleaner.min.cleanable.ratio": "0.25"}, "log_cleaner_min_cleanable_ratio", 0.25),
        ({"num.partitions": " 3 "}, "num_partitions", 3),
        ({"cluster.id": "MkU3OEVBNTcwNTJENDM2Qk"}, "cluster_id", "MkU3OEVBNTcwNTJENDM2Qk"),
    ],
)
def test_resolved_values(given: dict[str, str], attr: str, expected: object) -> None:
    assert getattr(BrokerConfig.from_mapping(given), attr) == expected


def test_set_overrides_the_file_and_warnings_are_returned(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a Kafka-style file\nnum.partitions=3\nlog.dirs=/var/data\nfancy.thing=1\nprocess.roles=broker\n"
        "num.partitions=4\nretention.ms=10\n"
    )
    config, warnings = load_broker_config(path, {"num.partitions": "5", "log.retention.ms": "100"})
    assert config.num_partitions == 5
    assert config.log_dirs == (Path("/var/data"),)
    assert config.log_retention_ms == 100
    assert config.originals["num.partitions"] == "5"
    assert warnings == [
        f"num.partitions is set twice ({path}:2 and {path}:6); the last value wins",
        f"process.roles ({path}:5) is accepted for compatibility with Kafka but has no effect in tidelog",
        f"unknown configuration 'fancy.thing' ({path}:4) is ignored",
        (
            f"retention.ms ({path}:7) is a topic-level config and is ignored here; set the broker default with "
            "log.retention.ms"
        ),
    ]


def test_overrides_may_be_pairs_in_order() -> None:
    config, _ = load_broker_config(None, [("num.partitions", "2"), ("num.partitions", "9")])
    assert config.num_partitions == 9


def test_bad_value_in_file_names_key_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=1\n\nlog.segment.bytes=lots\n")
    with pytest.raises(ConfigError) as info:
        load_broker_config(path)
    assert str(info.value) == (
        f"Invalid value lots for configuration log.segment.bytes: Not a number of type INT ({path}:3)"
    )
    assert info.value.key == "log.segment.bytes"
    assert info.value.error_code is ErrorCode.INVALID_CONFIG


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config file .*nope\.properties"):
        load_broker_config(tmp_path / "nope.properties")


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_bytes(b"a=\xff\xfe\n")
    with pytest.raises(ConfigError, match=r"not valid UTF-8 \(byte offset 2\)"):
        load_broker_config(path)


@pytest.mark.parametrize(
    ("given", "key", "message"),
    [
        (
            {"num.partitions": "0"},
            "num.partitions",
            "Invalid value 0 for configuration num.partitions: Value must be at least 1 (properties)",
        ),
        ({"num.partitions": "2147483648"}, "num.partitions", "Not a number of type INT"),
        ({"num.partitions": "1.5"}, "num.partitions", "Not a number of type INT"),
        ({"log.retention.ms": "9223372036854775808"}, "log.retention.ms", "Not a number of type LONG"),
        ({"log.retention.ms": "-2"}, "log.retention.ms", "Value must be at least -1"),
        (
            {"offsets.topic.replication.factor": "40000"},
            "offsets.topic.replication.factor",
            "Not a number of type SHORT",
        ),
        (
            {"auto.create.topics.enable": "yes"},
            "auto.create.topics.enable",
            "Expected value to be either true or false",
        ),
        (
            {"log.cleaner.min.cleanable.ratio": "1.5"},
            "log.cleaner.min.cleanable.ratio",
            "Value must be no more than 1",
        ),
        (
            {"log.cleaner.min.cleanable.ratio": "nan"},
            "log.cleaner.min.cleanable.ratio",
            "Not a number of type DOUBLE",
        ),
        (
            {"log.message.timestamp.type": "createtime"},
            "log.message.timestamp.type",
            "String must be one of: CreateTime, LogAppendTime",
        ),
        (
            {"compression.type": "brotli"},
            "compression.type",
            "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            {"log.cleanup.policy": "delete,shred"},
            "log.cleanup.policy",
            "String must be one of: compact, delete",
        ),
        (
            {"log.cleanup.policy": ""},
            "log.cleanup.policy",
            "Value must be a non-empty list of: compact, delete",
        ),
        ({"log.cleanup.policy": "delete,,compact"}, "log.cleanup.policy", "List contains an empty element"),
        ({"log.segment.bytes": "13"}, "log.segment.bytes", "Value must be at least 14"),
        (
            {"node.id": "1", "broker.id": "2"},
            "node.id",
            "node.id (1, properties) and broker.id (2, properties) must be equal",
        ),
        ({"log.dirs": ""}, "log.dirs", "log.dirs must name at least one directory"),
        ({"log.dirs": "/a,/a"}, "log.dirs", "log.dirs names a directory twice"),
        ({"log.dir": ""}, "log.dir", "log.dir must not be empty"),
        ({"cluster.id": "has space"}, "cluster.id", "Must contain only ASCII letters"),
        (
            {"listeners": "localhost:9092"},
            "listeners",
            "Unable to parse 'localhost:9092' as NAME://host:port",
        ),
        (
            {"listeners": "PLAINTEXT://h:70000"},
            "listeners",
            "Port 70000 of 'PLAINTEXT://h:70000' is not in [0, 65535]",
        ),
        ({"listeners": "FOO://h:1"}, "listeners", "No security protocol defined for listener FOO"),
        (
            {"listeners": "X://h:9093", "listener.security.protocol.map": "X:KERBEROS"},
            "listeners",
            "listener X uses security protocol KERBEROS, which tidelog does not support yet",
        ),
        (
            {"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"},
            "listeners",
            "Each listener must have a different name, PLAINTEXT is repeated",
        ),
        (
            {
                "listeners": "PLAINTEXT://:1,X://:1",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,X:PLAINTEXT",
            },
            "listeners",
            "listeners use the same port twice",
        ),
        (
            {
                "listeners": "CONTROLLER://:9093",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            },
            "listeners",
            "at least one broker (non-controller) listener",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT"},
            "listener.security.protocol.map",
            "Expected NAME:PROTOCOL pairs",
        ),
        (
            {"advertised.listeners": "SSL://h:1"},
            "advertised.listeners",
            "listener SSL is not one of listeners (PLAINTEXT)",
        ),
        (
            {"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
            "advertised.listeners",
            "nonroutable meta-address 0.0.0.0",
        ),
        (
            {"advertised.listeners": "PLAINTEXT://a.example:1,PLAINTEXT://b.example:2"},
            "advertised.listeners",
            "Each listener must have a different name, PLAINTEXT is repeated",
        ),
        (
            {
                "listeners": "INTERNAL://:1,EXTERNAL://:2",
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT",
            },
            "listeners",
            "No security protocol defined for listener EXTERNAL",
        ),
        (
            {
                "listeners": "INTERNAL://:1",
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                "advertised.listeners": "EXTERNAL://kafka.example:2",
            },
            "advertised.listeners",
            "listener EXTERNAL is not one of listeners (INTERNAL)",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL"},
            "inter.broker.listener.name",
            "must be one of the listener names",
        ),
        (
            {"group.min.session.timeout.ms": "2000000"},
            "group.min.session.timeout.ms",
            "group.min.session.timeout.ms (2000000, properties) must not be greater than group.max.session.timeout.ms (1800000, default)",
        ),
        (
            {"replica.lag.time.max.ms": "100"},
            "replica.lag.time.max.ms",
            "replica.fetch.wait.max.ms (500, default) must not be greater than replica.lag.time.max.ms",
        ),
    ],
)
def test_bad_values_raise_config_error_naming_the_key(given: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_broker_config(given)
    assert info.value.key == key
    assert key in str(info.value)
    assert message in str(info.value)


def test_set_errors_say_set() -> None:
    with pytest.raises(ConfigError, match=r"Value must be at least 1 \(--set\)$"):
        load_broker_config(None, {"num.io.threads": "0"})


@pytest.mark.parametrize(
    ("listeners", "expected", "bind"),
    [
        ("PLAINTEXT://:9092", (Listener("PLAINTEXT", "", 9092, "PLAINTEXT"),), ("0.0.0.0", 9092)),
        ("PLAINTEXT://0.0.0.0:0", (Listener("PLAINTEXT", "0.0.0.0", 0, "PLAINTEXT"),), ("0.0.0.0", 0)),
        ("plaintext://[::1]:9092", (Listener("PLAINTEXT", "::1", 9092, "PLAINTEXT"),), ("::1", 9092)),
        (
            " PLAINTEXT://127.0.0.1:9092 , CONTROLLER://127.0.0.1:9093 ",
            (
                Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
                Listener("CONTROLLER", "127.0.0.1", 9093, "PLAINTEXT"),
            ),
            ("127.0.0.1", 9092),
        ),
    ],
)
def test_listeners(listeners: str, expected: tuple[Listener, ...], bind: tuple[str, int]) -> None:
    config = BrokerConfig.from_mapping(
        {
            "listeners": listeners,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        }
    )
    assert config.listeners == expected
    assert config.broker_listeners == expected[:1]
    assert config.broker_listeners[0].bind_address == bind


def test_kafka_kraft_sample_config_controller_listener_first() -> None:
    config = BrokerConfig.from_mapping(
        {
            "process.roles": "broker,controller",
            "listeners": "CONTROLLER://:9093,PLAINTEXT://127.0.0.1:19092",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            "advertised.listeners": "PLAINTEXT://broker.example:29092",
        }
    )
    assert config.broker_listeners[0].bind_address == ("127.0.0.1", 19092)
    assert advertised_endpoint(config.advertised_listener(), 19092, no_lookup) == ("broker.example", 29092)
    assert str(config.advertised_listener()) == "PLAINTEXT://broker.example:29092"


@pytest.mark.parametrize(
    "given",
    [
        {"listeners": "PLAINTEXT://127.0.0.1:0"},
        {"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "PLAINTEXT://127.0.0.1:0"},
    ],
)
def test_advertised_port_zero_becomes_bound_port(given: dict[str, str]) -> None:
    config = BrokerConfig.from_mapping(given)
    assert advertised_endpoint(config.advertised_listener(), 43210, no_lookup) == ("127.0.0.1", 43210)


@pytest.mark.parametrize(
    "given",
    [
        {"listeners": "PLAINTEXT://:9092"},
        {"listeners": "PLAINTEXT://0.0.0.0:9092"},
        {"listeners": "PLAINTEXT://[::]:9092"},
        {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://:9092"},
    ],
)
def test_advertised_wildcard_host_becomes_the_canonical_host_name(given: dict[str, str]) -> None:
    config = BrokerConfig.from_mapping(given)
    assert advertised_endpoint(config.advertised_listener(), 9092, lambda: "broker.local") == (
        "broker.local",
        9092,
    )


def test_advertised_listeners_by_name_else_the_listener() -> None:
    config = BrokerConfig.from_mapping(
        {
            "listeners": "INTERNAL://127.0.0.1:19092,EXTERNAL://:19093,REPLICATION://10.0.0.5:19094",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,REPLICATION:PLAINTEXT",
            "advertised.listeners": "EXTERNAL://kafka.example:9093",
        }
    )
    assert [listener.name for listener in config.broker_listeners] == ["INTERNAL", "EXTERNAL", "REPLICATION"]
    endpoints = {
        listener.name: advertised_endpoint(
            config.advertised_listener(listener.name), listener.port, no_lookup
        )
        for listener in config.broker_listeners
    }
    assert endpoints == {
        "INTERNAL": ("127.0.0.1", 19092),
        "EXTERNAL": ("kafka.example", 9093),
        "REPLICATION": ("10.0.0.5", 19094),
    }


def test_listener_str_brackets_ipv6() -> None:
    assert str(Listener("PLAINTEXT", "::1", 9, "PLAINTEXT")) == "PLAINTEXT://[::1]:9"


def test_with_overrides_keeps_originals() -> None:
    base = BrokerConfig.from_mapping({"num.partitions": "3"})
    changed = base.with_overrides({"log.retention.hours": "1"})
    assert (changed.num_partitions, changed.log_retention_ms) == (3, 3_600_000)
    assert changed.originals == {"num.partitions": "3", "log.retention.hours": "1"}


# ---- topic configs ------------------------------------------------------------------------------------


def test_effective_topic_configs_follow_broker_synonyms_then_overrides() -> None:
    broker = cfg(log_retention_minutes="10", log_segment_bytes="1000", log_cleanup_policy="compact")
    effective = effective_topic_configs(broker, {"segment.bytes": "2000"})
    assert effective["retention.ms"] == 600_000
    assert effective["segment.bytes"] == 2000
    assert effective["cleanup.policy"] == ("compact",)
    assert effective["max.message.bytes"] == 1048588
    assert effective["file.delete.delay.ms"] == 60_000
    assert effective["segment.ms"] == 604_800_000
    assert effective["min.cleanable.dirty.ratio"] == 0.5
    assert effective["follower.replication.throttled.replicas"] == ()
    assert set(effective) == set(TOPIC_CONFIGS)


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ({"retention.ms": " 1000 "}, {"retention.ms": "1000"}),
        ({"cleanup.policy": "compact , delete"}, {"cleanup.policy": "compact,delete"}),
        ({"preallocate": "TRUE"}, {"preallocate": "true"}),
        ({"min.cleanable.dirty.ratio": "0.1"}, {"min.cleanable.dirty.ratio": "0.1"}),
        ({"retention.ms": "-1", "retention.bytes": "-1"}, {"retention.ms": "-1", "retention.bytes": "-1"}),
        ({}, {}),
    ],
)
def test_validate_topic_configs_normalises(given: dict[str, str], normalised: dict[str, str]) -> None:
    assert validate_topic_configs(given) == normalised


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"retention.ms": "abc"},
            "Invalid value abc for configuration retention.ms: Not a number of type LONG",
        ),
        (
            {"retention.ms": "-2"},
            "Invalid value -2 for configuration retention.ms: Value must be at least -1",
        ),
        (
            {"segment.bytes": "10"},
            "Invalid value 10 for configuration segment.bytes: Value must be at least 14",
        ),
        (
            {"cleanup.policy": "forever"},
            "Invalid value forever for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        (
            {"message.timestamp.type": "Now"},
            "Invalid value Now for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime",
        ),
        (
            {"min.cleanable.dirty.ratio": "2"},
            "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
        ),
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"log.retention.ms": "1"}, "Unknown topic config name: log.retention.ms"),
        ({"retention.ms": None}, "Null value not supported for topic configs: retention.ms"),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
        ),
    ],
)
def test_validate_topic_configs_rejects(given: dict[str, str | None], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(given)
    assert str(info.value) == message
    assert info.value.error_code is ErrorCode.INVALID_CONFIG


def test_compaction_lag_conflict_considers_broker_default() -> None:
    broker = cfg(log_cleaner_max_compaction_lag_ms="100")
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms \(200\) > max.compaction.lag.ms \(100\)"):
        validate_topic_configs({"min.compaction.lag.ms": "200"}, broker)


@pytest.mark.parametrize(
    ("current", "ops", "expected"),
    [
        ({}, [("retention.ms", AlterConfigOp.SET, "5")], {"retention.ms": "5"}),
        ({"retention.ms": "5"}, [("retention.ms", AlterConfigOp.DELETE, None)], {}),
        ({}, [("retention.ms", AlterConfigOp.DELETE, None)], {}),
        ({}, [("cleanup.policy", AlterConfigOp.APPEND, "compact")], {"cleanup.policy": "delete,compact"}),
        (
            {"cleanup.policy": "compact"},
            [("cleanup.policy", AlterConfigOp.APPEND, "compact")],
            {"cleanup.policy": "compact"},
        ),
        (
            {"cleanup.policy": "compact,delete"},
            [("cleanup.policy", AlterConfigOp.SUBTRACT, "delete")],
            {"cleanup.policy": "compact"},
        ),
        ({"segment.ms": "100"}, [("retention.ms", 0, "7"), ("segment.ms", 1, None)], {"retention.ms": "7"}),
    ],
)
def test_apply_incremental_alter(
    current: dict[str, str], ops: list[tuple[str, int, str | None]], expected: dict[str, str]
) -> None:
    assert apply_incremental_alter(BrokerConfig.from_mapping({}), current, ops) == expected


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [("retention.ms", AlterConfigOp.APPEND, "5")],
            "Config value append is not allowed for config key: retention.ms",
        ),
        (
            [("retention.ms", AlterConfigOp.SUBTRACT, "5")],
            "Config value subtract is not allowed for config key: retention.ms",
        ),
        ([("retention.ms", 0, "1"), ("retention.ms", 1, None)], "Error due to duplicate config keys"),
        ([("retention.ms", 9, "1")], "Unknown config operation 9 for config key: retention.ms"),
        (
            [("cleanup.policy", AlterConfigOp.SUBTRACT, "delete")],
            "Value must be a non-empty list of: compact, delete",
        ),
        ([("nope", 0, "1")], "Unknown topic config name: nope"),
    ],
)
def test_apply_incremental_alter_rejects(ops: list[tuple[str, int, str | None]], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_incremental_alter(BrokerConfig.from_mapping({}), {}, ops)
    assert message in str(info.value)


# ---- DescribeConfigs ------------------------------------------------------------------------------------

D = ConfigSource.DEFAULT_CONFIG
S = ConfigSource.STATIC_BROKER_CONFIG
T = ConfigSource.DYNAMIC_TOPIC_CONFIG


def test_config_source_numbers_are_kafkas() -> None:
    assert (T, ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, S, D) == (
        1,
        2,
        3,
        4,
        5,
    )
    assert (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.LIST) == (
        1,
        2,
        3,
        5,
        7,
    )


@pytest.mark.parametrize(
    ("broker_props", "overrides", "name", "value", "source", "synonyms"),
    [
        ({}, {}, "segment.bytes", "1073741824", D, [("log.segment.bytes", "1073741824", D)]),
        (
            {"log.segment.bytes": "5000"},
            {},
            "segment.bytes",
            "5000",
            S,
            [("log.segment.bytes", "5000", S), ("log.segment.bytes", "1073741824", D)],
        ),
        (
            {"log.segment.bytes": "5000"},
            {"segment.bytes": "7000"},
            "segment.bytes",
            "7000",
            T,
            [
                ("segment.bytes", "7000", T),
                ("log.segment.bytes", "5000", S),
                ("log.segment.bytes", "1073741824", D),
            ],
        ),
        # Kafka's quirk, kept: synonyms start at the head broker key (log.retention.ms), so a value that
        # comes only from log.retention.hours shows no synonyms and DEFAULT_CONFIG as its source.
        ({}, {}, "retention.ms", "604800000", D, []),
        ({"log.retention.hours": "1"}, {}, "retention.ms", "3600000", D, []),
        (
            {"log.retention.ms": "99", "log.retention.hours": "1"},
            {},
            "retention.ms",
            "99",
            S,
            [
                ("log.retention.ms", "99", S),
                ("log.retention.hours", "1", S),
                ("log.retention.hours", "168", D),
            ],
        ),
        ({}, {"retention.ms": "60000"}, "retention.ms", "60000", T, [("retention.ms", "60000", T)]),
        ({}, {}, "flush.ms", str(LONG_MAX), D, []),
        (
            {"log.flush.interval.ms": "1000"},
            {},
            "flush.ms",
            "1000",
            S,
            [("log.flush.interval.ms", "1000", S), ("log.flush.scheduler.interval.ms", str(LONG_MAX), D)],
        ),
        ({}, {}, "cleanup.policy", "delete", D, [("log.cleanup.policy", "delete", D)]),
        (
            {},
            {"cleanup.policy": "compact,delete"},
            "cleanup.policy",
            "compact,delete",
            T,
            [("cleanup.policy", "compact,delete", T), ("log.cleanup.policy", "delete", D)],
        ),
        ({}, {}, "follower.replication.throttled.replicas", "", D, []),
        ({}, {}, "min.cleanable.dirty.ratio", "0.5", D, [("log.cleaner.min.cleanable.ratio", "0.5", D)]),
        ({}, {}, "file.delete.delay.ms", "60000", D, [("log.segment.delete.delay.ms", "60000", D)]),
    ],
)
def test_describe_topic_configs_sources_and_synonyms(
    broker_props: dict[str, str],
    overrides: dict[str, str],
    name: str,
    value: str,
    source: ConfigSource,
    synonyms: list[tuple[str, str, ConfigSource]],
) -> None:
    broker = BrokerConfig.from_mapping(broker_props)
    (entry,) = describe_topic_configs(broker, overrides, [name], include_synonyms=True)
    assert (entry.name, entry.value, entry.source, entry.read_only, entry.is_sensitive) == (
        name,
        value,
        source,
        False,
        False,
    )
    assert entry.synonyms == tuple(ConfigSynonym(*s) for s in synonyms)
    assert entry.is_default is (source is D)


def test_describe_topic_configs_all_names_and_options() -> None:
    broker = BrokerConfig.from_mapping({})
    entries = describe_topic_configs(broker, {})
    assert [e.name for e in entries] == list(TOPIC_CONFIGS)
    assert all(e.synonyms == () and e.documentation is None for e in entries)
    (entry,) = describe_topic_configs(broker, {}, ["retention.ms", "no.such"], include_documentation=True)
    assert entry.config_type is ConfigType.LONG
    assert entry.documentation == TOPIC_CONFIGS["retention.ms"].doc


@pytest.mark.parametrize(
    ("broker_props", "name", "value", "source", "synonyms"),
    [
        ({}, "log.retention.hours", "168", D, [("log.retention.hours", "168", D)]),
        (
            {"log.retention.hours": "100"},
            "log.retention.hours",
            "100",
            S,
            [("log.retention.hours", "100", S), ("log.retention.hours", "168", D)],
        ),
        ({}, "log.roll.ms", None, D, []),
        (
            {"log.retention.ms": "5"},
            "log.retention.ms",
            "5",
            S,
            [("log.retention.ms", "5", S), ("log.retention.hours", "168", D)],
        ),
        ({}, "num.partitions", "1", D, [("num.partitions", "1", D)]),
        (
            {"num.partitions": " 3"},
            "num.partitions",
            "3",
            S,
            [("num.partitions", "3", S), ("num.partitions", "1", D)],
        ),
        ({}, "advertised.listeners", None, D, []),
    ],
)
def test_describe_broker_configs(
    broker_props: dict[str, str],
    name: str,
    value: str | None,
    source: ConfigSource,
    synonyms: list[tuple[str, str, ConfigSource]],
) -> None:
    broker = BrokerConfig.from_mapping(broker_props)
    (entry,) = describe_broker_configs(broker, [name, "not.a.config"], include_synonyms=True)
    read_only = name not in ("log.roll.ms", "log.retention.ms")  # the dynamic ones (KIP-226)
    assert (entry.name, entry.value, entry.source, entry.read_only) == (name, value, source, read_only)
    assert entry.synonyms == tuple(ConfigSynonym(*s) for s in synonyms)


def test_describe_broker_configs_lists_every_definition() -> None:
    entries = describe_broker_configs(BrokerConfig.from_mapping({}))
    assert [e.name for e in entries] == list(BROKER_CONFIGS)


# ---- storage LogConfig ----------------------------------------------------------------------------------


def test_log_config_for_topic_defaults_are_kafkas() -> None:
    from tidelog.storage.config import LogConfig

    assert log_config_for_topic(BrokerConfig.from_mapping({}), {}) == LogConfig()


@pytest.mark.parametrize(
    ("broker_props", "overrides"),
    [
        ({}, {"segment.bytes": "1000", "cleanup.policy": "compact,delete", "retention.ms": "-1"}),
        ({"log.retention.minutes": "5", "log.roll.hours": "2", "log.segment.bytes": "4096"}, {}),
        (
            {"log.retention.hours": "-1", "log.cleanup.policy": "compact"},
            {"min.cleanable.dirty.ratio": "0.1"},
        ),
        ({"log.flush.scheduler.interval.ms": "700", "message.max.bytes": "2000"}, {"flush.messages": "10"}),
        (
            {"log.message.timestamp.type": "LogAppendTime", "log.preallocate": "true"},
            {"preallocate": "false"},
        ),
        (
            {"log.roll.jitter.hours": "1", "log.segment.delete.delay.ms": "5"},
            {"message.timestamp.type": "CreateTime"},
        ),
    ],
)
def test_log_config_for_topic_agrees_with_storage(
    broker_props: dict[str, str], overrides: dict[str, str]
) -> None:
    from tidelog.storage.config import LogConfig

    broker = BrokerConfig.from_mapping(broker_props)
    expected = LogConfig.from_broker_properties(broker_props).with_overrides(overrides)
    assert log_config_for_topic(broker, validate_topic_configs(overrides, broker)) == expected


def test_log_config_for_topic_fields() -> None:
    broker = cfg(log_retention_hours="2", log_cleanup_policy="compact,delete")
    log_config = log_config_for_topic(broker, {"segment.bytes": "2048", "max.message.bytes": "500"})
    assert (log_config.retention_ms, log_config.segment_bytes, log_config.max_message_bytes) == (
        7_200_000,
        2048,
        500,
    )
    assert log_config.cleanup_policy == "compact,delete"
    assert log_config.compact_enabled
    assert log_config.delete_enabled
