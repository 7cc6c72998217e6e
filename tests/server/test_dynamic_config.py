"""Dynamic broker configs (KIP-226) without a broker: layering and precedence, DescribeConfigs sources and
synonyms, validation of alterations (read-only, unknown, bad values) and the crash-safe store."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import crc32c
import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.server.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    KAFKA_DYNAMIC_BROKER_CONFIGS,
    AlterConfigOp,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    describe_broker_configs,
    describe_topic_configs,
    log_config_for_topic,
)
from tidelog.server.dynamic_config import (
    FILE_NAME,
    DynamicBrokerConfigs,
    ReadOnlyConfigError,
    apply_incremental_broker_alter,
    validate_broker_configs,
)

T = ConfigSource.DYNAMIC_TOPIC_CONFIG
B = ConfigSource.DYNAMIC_BROKER_CONFIG
C = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
S = ConfigSource.STATIC_BROKER_CONFIG
D = ConfigSource.DEFAULT_CONFIG

SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOp.SET,
    AlterConfigOp.DELETE,
    AlterConfigOp.APPEND,
    AlterConfigOp.SUBTRACT,
)


def static(**props: str) -> BrokerConfig:
    return BrokerConfig.from_mapping({k.replace("_", "."): v for k, v in props.items()})


# ---- the dynamic set --------------------------------------------------------------------------------------


def test_dynamic_keys_are_broker_configs_and_read_only_ones_are_not_among_them() -> None:
    assert set(BROKER_CONFIGS) >= DYNAMIC_BROKER_CONFIGS
    assert not DYNAMIC_BROKER_CONFIGS & KAFKA_DYNAMIC_BROKER_CONFIGS
    assert {"log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.cleanup.policy"} <= (
        DYNAMIC_BROKER_CONFIGS
    )
    assert {"message.max.bytes", "log.flush.interval.ms", "compression.type"} <= DYNAMIC_BROKER_CONFIGS
    # synonyms in coarser units stay read-only, as in Kafka (only the head of a chain is dynamic)
    assert not {"log.retention.hours", "log.retention.minutes", "log.roll.hours"} & DYNAMIC_BROKER_CONFIGS
    assert not {"listeners", "log.dirs", "node.id", "num.partitions"} & DYNAMIC_BROKER_CONFIGS


# ---- layering -------------------------------------------------------------------------------------------


def test_precedence_per_broker_over_cluster_default_over_static() -> None:
    base = static(log_retention_ms="1000", log_segment_bytes="5000", message_max_bytes="300")
    config = base.with_dynamic(
        {"log.retention.ms": "2000", "log.segment.bytes": "6000"}, {"log.retention.ms": "3000"}
    )
    assert (config.log_retention_ms, config.log_segment_bytes, config.message_max_bytes) == (3000, 6000, 300)
    assert config.originals == base.originals
    assert (config.dynamic_default_configs, config.dynamic_broker_configs) == (
        {"log.retention.ms": "2000", "log.segment.bytes": "6000"},
        {"log.retention.ms": "3000"},
    )
    # a topic override wins over every broker layer; a topic without one takes the effective default
    assert log_config_for_topic(config, {"retention.ms": "4000"}).retention_ms == 4000
    assert log_config_for_topic(config, {}).retention_ms == 3000
    assert log_config_for_topic(config, {}).segment_bytes == 6000
    # re-layering starts from the static config again (layers are replaced, not stacked)
    assert config.with_dynamic({}, {}).log_retention_ms == 1000


def test_a_dynamic_key_removes_its_static_synonyms() -> None:
    # Kafka's overrideProps: a dynamic log.retention.ms beats a static log.retention.hours ...
    config = static(log_retention_hours="1").with_dynamic({"log.retention.ms": "5000"}, {})
    assert config.log_retention_ms == 5000
    # ... and, at a lower layer, a static log.retention.ms still beats nothing dynamic
    assert static(log_retention_ms="7").with_dynamic({}, {}).log_retention_ms == 7


def test_layers_together_must_satisfy_the_cross_checks() -> None:
    base = static(log_cleaner_max_compaction_lag_ms="100")
    with pytest.raises(ConfigError) as info:
        base.with_dynamic({"log.cleaner.min.compaction.lag.ms": "500"}, {})
    assert "log.cleaner.min.compaction.lag.ms (500, dynamic cluster default)" in str(info.value)
    assert "log.cleaner.max.compaction.lag.ms (100, static config)" in str(info.value)


# ---- DescribeConfigs --------------------------------------------------------------------------------------


def test_topic_config_sources_and_synonyms_with_dynamic_layers() -> None:
    config = static(log_retention_ms="1000").with_dynamic(
        {"log.retention.ms": "2000", "log.segment.bytes": "6000"}, {"log.retention.ms": "3000"}
    )
    retention, segment, flush = describe_topic_configs(
        config, {}, ["retention.ms", "segment.bytes", "flush.messages"], include_synonyms=True
    )
    assert (retention.value, retention.source, retention.read_only) == ("3000", B, False)
    assert retention.synonyms == (
        ConfigSynonym("log.retention.ms", "3000", B),
        ConfigSynonym("log.retention.ms", "2000", C),
        ConfigSynonym("log.retention.ms", "1000", S),
        ConfigSynonym("log.retention.hours", "168", D),
    )
    assert (segment.value, segment.source) == ("6000", C)
    assert segment.synonyms == (
        ConfigSynonym("log.segment.bytes", "6000", C),
        ConfigSynonym("log.segment.bytes", "1073741824", D),
    )
    assert (flush.source, flush.is_default) == (D, True)
    (overridden,) = describe_topic_configs(config, {"retention.ms": "9"}, ["retention.ms"])
    assert (overridden.value, overridden.source) == ("9", T)


def test_broker_configs_described_for_the_broker_id() -> None:
    config = static(log_retention_ms="1000", num_partitions="3").with_dynamic(
        {"log.retention.ms": "2000", "log.segment.bytes": "6000"}, {"log.retention.ms": "3000"}
    )
    entries = {e.name: e for e in describe_broker_configs(config, include_synonyms=True)}
    assert list(entries) == list(BROKER_CONFIGS)

    def row(name: str) -> tuple[str | None, ConfigSource, bool]:
        return entries[name].value, entries[name].source, entries[name].read_only

    assert row("log.retention.ms") == ("3000", B, False)
    assert row("log.segment.bytes") == ("6000", C, False)
    assert row("message.max.bytes") == ("1048588", D, False)
    assert row("num.partitions") == ("3", S, True)
    assert row("listeners") == ("PLAINTEXT://127.0.0.1:9092", D, True)
    assert row("log.retention.hours") == ("168", D, True)
    assert [(s.name, s.source) for s in entries["log.retention.ms"].synonyms] == [
        ("log.retention.ms", B),
        ("log.retention.ms", C),
        ("log.retention.ms", S),
        ("log.retention.hours", D),
    ]
    assert {name for name, e in entries.items() if not e.read_only} == DYNAMIC_BROKER_CONFIGS


def test_cluster_default_describes_only_the_dynamic_defaults_without_per_broker_synonyms() -> None:
    config = static(log_retention_ms="1000").with_dynamic(
        {"log.retention.ms": "2000", "log.cleanup.policy": "compact"}, {"log.retention.ms": "3000"}
    )
    entries = describe_broker_configs(config, include_synonyms=True, cluster_default=True)
    assert [(e.name, e.value, e.source, e.read_only) for e in entries] == [
        ("log.retention.ms", "2000", C, False),
        ("log.cleanup.policy", "compact", C, False),
    ]
    assert entries[0].synonyms == (
        ConfigSynonym("log.retention.ms", "2000", C),
        ConfigSynonym("log.retention.ms", "1000", S),
        ConfigSynonym("log.retention.hours", "168", D),
    )
    (only,) = describe_broker_configs(config, ["log.cleanup.policy", "num.partitions"], cluster_default=True)
    assert only.name == "log.cleanup.policy"
    assert describe_broker_configs(static(), cluster_default=True) == []


# ---- validation -------------------------------------------------------------------------------------------


def test_validate_normalises_values() -> None:
    assert validate_broker_configs(
        {"log.retention.ms": " 60000", "log.cleanup.policy": "compact , delete"}
    ) == {
        "log.retention.ms": "60000",
        "log.cleanup.policy": "compact,delete",
    }


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        ({"listeners": "PLAINTEXT://:1"}, ErrorCode.INVALID_REQUEST, "dynamically: listeners (Kafka can"),
        ({"log.dirs": "/x"}, ErrorCode.INVALID_REQUEST, "dynamically: log.dirs (a read-only config)"),
        ({"node.id": "3"}, ErrorCode.INVALID_REQUEST, "dynamically: node.id (a read-only config)"),
        ({"log.retention.hours": "1"}, ErrorCode.INVALID_REQUEST, "dynamically: log.retention.hours"),
        ({"log.cleaner.threads": "2"}, ErrorCode.INVALID_REQUEST, "log.cleaner.threads (Kafka can change it"),
        ({"no.such.key": "1"}, ErrorCode.INVALID_CONFIG, "Unknown broker config name: no.such.key"),
        (
            {"retention.ms": "1"},
            ErrorCode.INVALID_CONFIG,
            "retention.ms is a topic config; its broker default is log.retention.ms",
        ),
        (
            {"log.retention.ms": "soon"},
            ErrorCode.INVALID_CONFIG,
            "Invalid value soon for configuration log.retention.ms",
        ),
        (
            {"log.segment.bytes": "2"},
            ErrorCode.INVALID_CONFIG,
            "configuration log.segment.bytes: Value must be",
        ),
        ({"log.cleanup.policy": "shred"}, ErrorCode.INVALID_CONFIG, "configuration log.cleanup.policy"),
        ({"log.retention.ms": None}, ErrorCode.INVALID_CONFIG, "Null value not supported for broker configs"),
    ],
)
def test_validate_rejects(configs: dict[str, str | None], code: ErrorCode, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_broker_configs(configs)
    assert info.value.error_code == code
    assert isinstance(info.value, ReadOnlyConfigError) is (code == ErrorCode.INVALID_REQUEST)
    assert message in str(info.value)


def test_a_read_only_key_is_reported_before_a_bad_value_of_another() -> None:
    with pytest.raises(ReadOnlyConfigError):
        validate_broker_configs({"log.retention.ms": "soon", "listeners": "x"})


def test_incremental_alter_operations() -> None:
    base = static(log_cleanup_policy="compact")
    current = {"log.retention.ms": "1000", "log.segment.bytes": "5000"}
    ops = [
        ("log.retention.ms", SET, "2000"),
        ("log.segment.bytes", DELETE, None),
        ("message.max.bytes", SET, "7"),
    ]
    assert apply_incremental_broker_alter(current, ops, base) == {
        "log.retention.ms": "2000",
        "message.max.bytes": "7",
    }
    # APPEND starts from the value this layer overrides (the static compact), SUBTRACT from the layer's own
    appended = apply_incremental_broker_alter({}, [("log.cleanup.policy", APPEND, "delete")], base)
    assert appended == {"log.cleanup.policy": "compact,delete"}
    subtracted = apply_incremental_broker_alter(appended, [("log.cleanup.policy", SUBTRACT, "compact")], base)
    assert subtracted == {"log.cleanup.policy": "delete"}


@pytest.mark.parametrize(
    ("ops", "code", "message"),
    [
        (
            [("log.retention.ms", APPEND, "5")],
            ErrorCode.INVALID_CONFIG,
            "append is not allowed for config key",
        ),
        ([("log.retention.ms", 9, "5")], ErrorCode.INVALID_CONFIG, "Unknown config operation 9"),
        ([("a.b", SET, "1"), ("a.b", DELETE, None)], ErrorCode.INVALID_CONFIG, "duplicate config keys"),
        ([("listeners", DELETE, None)], ErrorCode.INVALID_REQUEST, "dynamically: listeners"),
        (
            [("log.cleanup.policy", SUBTRACT, "compact,delete")],
            ErrorCode.INVALID_CONFIG,
            "log.cleanup.policy",
        ),
    ],
)
def test_incremental_alter_rejects(
    ops: list[tuple[str, int, str | None]], code: ErrorCode, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        apply_incremental_broker_alter({}, ops, static())
    assert info.value.error_code == code
    assert message in str(info.value)


# ---- the store --------------------------------------------------------------------------------------------


def test_store_commits_durably_and_reloads(tmp_path: Path) -> None:
    base = static(node_id="4")
    dynamic = DynamicBrokerConfigs(base, tmp_path)
    assert (dynamic.config.log_retention_ms, dynamic.layer(""), dynamic.layer("4")) == (604_800_000, {}, {})
    assert (dynamic.entity(""), dynamic.entity("4"), dynamic.entity("5"), dynamic.entity("x")) == (
        "",
        "4",
        None,
        None,
    )

    proposed = dynamic.propose("", {"log.retention.ms": "1000"})
    assert proposed.log_retention_ms == 1000
    assert dynamic.config.log_retention_ms == 604_800_000  # proposing changes nothing
    assert not (tmp_path / FILE_NAME).exists()
    dynamic.commit("", {"log.retention.ms": "1000"}, proposed)
    dynamic.commit("4", {"log.segment.bytes": "4096"}, dynamic.propose("4", {"log.segment.bytes": "4096"}))
    assert (dynamic.config.log_retention_ms, dynamic.config.log_segment_bytes) == (1000, 4096)
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME]  # no temp file left behind
    layers = b'{"brokers":{"4":{"log.segment.bytes":"4096"}},"cluster_default":{"log.retention.ms":"1000"}}'
    assert json.loads((tmp_path / FILE_NAME).read_text()) == {
        "version": 2,
        "cluster_default": {"log.retention.ms": "1000"},
        "brokers": {"4": {"log.segment.bytes": "4096"}},
        "crc32c": crc32c.crc32c(layers),
    }

    reloaded = DynamicBrokerConfigs(base, tmp_path)
    assert (reloaded.layer(""), reloaded.layer("4")) == (
        {"log.retention.ms": "1000"},
        {"log.segment.bytes": "4096"},
    )
    assert (reloaded.config.log_retention_ms, reloaded.config.log_segment_bytes) == (1000, 4096)
    # another node id on the same data dir sees the cluster default only
    other = DynamicBrokerConfigs(static(node_id="5"), tmp_path)
    assert (other.config.log_retention_ms, other.config.log_segment_bytes) == (1000, 1_073_741_824)


def test_store_drops_stored_keys_that_are_not_valid_dynamic_configs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FILE_NAME).write_text(
        json.dumps(
            {
                "version": 1,
                "cluster_default": {"log.retention.ms": "1000", "listeners": "PLAINTEXT://:1"},
                "brokers": {"1": {"log.segment.bytes": "nope"}},
            }
        )
    )
    with caplog.at_level(logging.WARNING, logger="tidelog.dynamic_config"):
        dynamic = DynamicBrokerConfigs(static(), tmp_path)
    assert (dynamic.layer(""), dynamic.layer("1")) == ({"log.retention.ms": "1000"}, {})
    assert dynamic.config.log_retention_ms == 1000
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "ignoring stored dynamic broker config listeners=PLAINTEXT",
        "ignoring stored dynamic broker config log.segment.bytes=nope",
    ]


def test_store_that_breaks_a_cross_check_is_not_applied(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(
        json.dumps(
            {"version": 1, "cluster_default": {"log.cleaner.min.compaction.lag.ms": "500"}, "brokers": {}}
        )
    )
    dynamic = DynamicBrokerConfigs(static(log_cleaner_max_compaction_lag_ms="100"), tmp_path)
    assert dynamic.layer("") == {}
    assert dynamic.config.log_cleaner_min_compaction_lag_ms == 0
    with pytest.raises(ConfigError):
        dynamic.propose("", {"log.cleaner.min.compaction.lag.ms": "500"})


def test_store_of_an_unknown_format_is_warned_about_and_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FILE_NAME).write_text(
        json.dumps({"version": 99, "cluster_default": {"log.retention.ms": "1"}})
    )
    with caplog.at_level(logging.WARNING, logger="tidelog.dynamic_config"):
        dynamic = DynamicBrokerConfigs(static(), tmp_path)
    assert (dynamic.layer(""), dynamic.config.log_retention_ms) == ({}, 604_800_000)
    message = (
        f"dynamic broker configs in {tmp_path / FILE_NAME} are unreadable and not applied (ValueError: "
        "unsupported format version 99); the broker runs on its static configs and the next dynamic config "
        "change replaces the file"
    )
    assert [r.getMessage() for r in caplog.records] == [message]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"version": 1, "cluster_default": {"log.retention.ms": "1\x9e\xff"}}', "UnicodeDecodeError"),
        (b'{"version": 1, "cluster_default": {"log.retention.ms": "10', "JSONDecodeError"),
        (b"[1]", "TypeError"),
        (b'{"version": 1, "cluster_default": ["log.retention.ms"]}', "TypeError"),
        (b'{"version": 1, "brokers": {"1": {"log.retention.ms": 1000}}}', "TypeError"),
    ],
)
def test_a_damaged_store_is_warned_about_and_the_static_config_applies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="tidelog.dynamic_config"):
        dynamic = DynamicBrokerConfigs(static(log_retention_ms="5000"), tmp_path)
    assert (dynamic.layer(""), dynamic.layer("1"), dynamic.config.log_retention_ms) == ({}, {}, 5000)
    (record,) = caplog.records
    assert record.getMessage().startswith(
        f"dynamic broker configs in {tmp_path / FILE_NAME} are unreadable and not applied ({reason}: "
    )
    # the next alteration replaces the damaged file
    dynamic.commit("", {"log.retention.ms": "1000"}, dynamic.propose("", {"log.retention.ms": "1000"}))
    assert DynamicBrokerConfigs(static(), tmp_path).layer("") == {"log.retention.ms": "1000"}


def test_every_single_bit_flip_is_ignored_with_a_warning_or_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One flipped digit would change a retention silently: the checksum turns it into a damaged file."""
    dynamic = DynamicBrokerConfigs(static(), tmp_path)
    layer = {"log.retention.ms": "2592000000", "log.segment.bytes": "4096"}
    dynamic.commit("", layer, dynamic.propose("", layer))
    path = tmp_path / FILE_NAME
    original = path.read_bytes()
    ignored = 0
    for i in range(len(original)):  # every byte, each bit position in turn
        damaged = bytearray(original)
        damaged[i] ^= 1 << (i % 8)
        path.write_bytes(bytes(damaged))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tidelog.dynamic_config"):
            reloaded = DynamicBrokerConfigs(static(), tmp_path)
        if caplog.records:
            assert reloaded.layer("") == {}
            assert (
                caplog.records[0].getMessage().startswith(f"dynamic broker configs in {path} are unreadable")
            )
            ignored += 1
        else:
            assert reloaded.layer("") == layer, i  # a flip in layout whitespace, say
    assert ignored > 0.9 * len(original)
