"""The ``tidelog`` console script, run as a user runs it (a subprocess) against a real broker."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli import cli_support
from tests.cli.cli_support import ok, tidelog_cli

import tidelog
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

failed = functools.partial(cli_support.failed, squash=False)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("cli-broker")
    with Broker(
        {"auto.create.topics.enable": False}, data_dir=base / "data", run_dir=base / "run"
    ) as running:
        yield running


@pytest.fixture
def b(broker: Broker) -> list[str]:
    """The ``-b HOST:PORT`` arguments for the module's broker."""
    return ["-b", broker.bootstrap_servers]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def consume_json(b: list[str], topic: str, *args: str) -> list[dict[str, Any]]:
    out = ok(tidelog_cli("consume", topic, *b, "--format", "json", *args))
    return [json.loads(line) for line in out.splitlines()]


# ---- no broker needed ----------------------------------------------------------------------------------


def test_help_and_version() -> None:
    out = ok(tidelog_cli("--help"))
    for command in ("broker", "topics", "produce", "consume", "configs"):
        assert command in out
    assert ok(tidelog_cli("--version")).strip() == f"tidelog, version {tidelog.__version__}"
    module = subprocess.run(
        [sys.executable, "-m", "tidelog", "--version"], capture_output=True, timeout=60, check=False
    )
    assert module.returncode == 0
    assert module.stdout.decode().strip() == f"tidelog, version {tidelog.__version__}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "num.partitions=abc"],
            "Invalid value abc for configuration num.partitions: Not a number of type INT (--set)",
        ),
        (["--set", "listeners=PLAINTEXT://127.0.0.1:99999"], "configuration listeners"),
        (["--set", "nokey"], "--set expects key=value, got 'nokey'"),
        (
            ["--set", "listeners=SSL://127.0.0.1:0"],
            "listener SSL uses TLS but has no keystore: set ssl.keystore.location",
        ),
        (
            ["--set", "listeners=SSL://127.0.0.1:0", "--set", "ssl.keystore.location=/nonexistent.pem"],
            "ssl.keystore.location (/nonexistent.pem) cannot be read: No such file or directory",
        ),
        (
            ["--config", "/nonexistent/server.properties"],
            "cannot read config file /nonexistent/server.properties",
        ),
    ],
)
def test_broker_configuration_errors_exit_2(args: list[str], message: str) -> None:
    stderr = failed(tidelog_cli("broker", *args), code=2)
    assert message in stderr


def test_broker_config_file_error_names_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("# test\nlog.retention.hours=forever\n")
    stderr = failed(tidelog_cli("broker", "--config", str(config)), code=2)
    assert (
        f"Invalid value forever for configuration log.retention.hours: Not a number of type INT ({config}:2)"
        in stderr
    )


def test_broker_prints_config_warnings(tmp_path: Path) -> None:
    with Broker({"fancy.unknown.key": "1", "retention.ms": "5"}, data_dir=tmp_path / "d") as running:
        log = running.log_tail()
    assert "warning: unknown configuration 'fancy.unknown.key' (--set) is ignored" in log
    assert "warning: retention.ms (--set) is a topic-level config and is ignored here" in log


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["topics", "list"], None),
        (["topics", "create", "t"], None),
        (["topics", "describe", "t"], None),
        (["topics", "delete", "t"], None),
        (["produce", "t"], "hello\n"),
        (["consume", "t"], None),
        (["configs", "describe", "--topic", "t"], None),
        (["configs", "describe", "--broker-defaults"], None),
        (["share-groups", "pending", "g"], None),
    ],
)
def test_unreachable_broker_is_a_short_clear_error(args: list[str], stdin: str | None) -> None:
    port = closed_port()
    started = time.monotonic()
    stderr = failed(tidelog_cli(*args, "-b", f"127.0.0.1:{port}", "--timeout", "2", stdin=stdin))
    assert time.monotonic() - started < 20
    assert f"Error: cannot reach broker at 127.0.0.1:{port} within 2 s: " in stderr
    assert "Connection refused" in stderr


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "t", "--from-beginning", "--offset", "3"],
        ["consume", "t", "--group", "g", "--partition", "0"],
        ["consume", "t", "--offset", "minus-one"],
        ["topics", "create", "t", "--config", "no-equals-sign"],
        ["topics", "alter", "t"],
        ["configs", "describe"],
        ["configs", "describe", "--topic", "t", "--broker", "1"],
        ["configs", "describe", "--broker-defaults", "--broker", "1"],
        ["configs", "alter", "--broker-defaults"],
        ["produce", "t", "--rate", "0"],
        ["share-groups", "reset-offsets", "--group", "g", "--topic", "t"],
        [
            "share-groups",
            "reset-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--to-latest",
            "--dry-run",
            "--execute",
        ],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = tidelog_cli(*args, "-b", f"127.0.0.1:{closed_port()}", "--timeout", "1")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert b"Traceback" not in result.stderr


# ---- against a broker --------------------------------------------------------------------------------


def test_topics_lifecycle(b: list[str]) -> None:
    assert (
        "Created topic life."
        in tidelog_cli("topics", "create", "life", "-p", "3", "-c", "retention.ms=100000", *b).stderr.decode()
    )
    assert "life" in ok(tidelog_cli("topics", "list", *b, "--format", "plain")).split()
    listed = json.loads(ok(tidelog_cli("topics", "list", *b, "--format", "json")))
    assert {"topic": "life", "partitions": 3} in listed
    assert "life" in ok(tidelog_cli("topics", "list", *b))

    (described,) = json.loads(ok(tidelog_cli("topics", "describe", "life", *b, "--format", "json")))
    assert described["topic"] == "life"
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1] for p in described["partitions"])
    assert all((p["log_start_offset"], p["log_end_offset"]) == (0, 0) for p in described["partitions"])
    assert described["configs"] == {"retention.ms": "100000"}
    table = ok(tidelog_cli("topics", "describe", "life", *b))
    assert "Topic: life  PartitionCount: 3  ReplicationFactor: 1  Configs: retention.ms=100000" in table

    assert "already exists" in failed(tidelog_cli("topics", "create", "life", *b))
    assert (
        "Topic life already exists."
        in tidelog_cli("topics", "create", "life", "--if-not-exists", *b).stderr.decode()
    )

    ok(
        tidelog_cli(
            "topics", "alter", "life", "-p", "5", "-c", "segment.bytes=1048576", "-d", "retention.ms", *b
        )
    )
    (described,) = json.loads(
        ok(tidelog_cli("topics", "describe", "life", *b, "--format", "json", "--no-offsets"))
    )
    assert len(described["partitions"]) == 5
    assert described["configs"] == {"segment.bytes": "1048576"}
    assert "can only be increased" in failed(tidelog_cli("topics", "alter", "life", "-p", "2", *b))
    assert "retention.ms" in failed(tidelog_cli("topics", "alter", "life", "-c", "retention.ms=soon", *b))

    assert "Deleted topic life." in tidelog_cli("topics", "delete", "life", *b).stderr.decode()
    assert "life" not in ok(tidelog_cli("topics", "list", *b, "--format", "plain")).split()
    assert "unknown topic 'life'" in failed(tidelog_cli("topics", "delete", "life", *b))
    ok(tidelog_cli("topics", "delete", "life", "--if-exists", *b))


def test_invalid_topic_config_is_reported(b: list[str]) -> None:
    stderr = failed(tidelog_cli("topics", "create", "badcfg", "-c", "cleanup.policy=forever", *b))
    assert "cannot create topic 'badcfg'" in stderr
    assert "cleanup.policy" in stderr


def test_unknown_topic_errors(b: list[str]) -> None:
    assert "unknown topic 'nope'" in failed(tidelog_cli("topics", "describe", "nope", *b))
    assert "unknown topic 'nope'" in failed(tidelog_cli("consume", "nope", *b, "-n", "1"))
    assert "unknown topic 'nope'" in failed(tidelog_cli("configs", "describe", "--topic", "nope", *b))
    assert "unknown topic 'nope'" in failed(tidelog_cli("produce", "nope", *b, stdin="x\n"))


def test_produce_and_consume_json_with_keys_and_headers(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "roundtrip", "-p", "1", *b))
    result = tidelog_cli(
        "produce", "roundtrip", *b, "-K", r"\t", "-H", "source=cli", stdin="k1\tv1\nk2\tv 2\n\tno key\n"
    )
    ok(result)
    assert "Produced 3 message(s) to roundtrip." in result.stderr.decode()
    records = consume_json(b, "roundtrip", "--from-beginning", "-n", "3")
    assert [(r["topic"], r["partition"], r["offset"]) for r in records] == [
        ("roundtrip", 0, i) for i in range(3)
    ]
    assert [(r["key"], r["value"]) for r in records] == [("k1", "v1"), ("k2", "v 2"), ("", "no key")]
    assert all(r["headers"] == [["source", "cli"]] for r in records)
    assert all(
        r["timestamp_type"] == "CreateTime" and abs(r["timestamp"] / 1000 - time.time()) < 300
        for r in records
    )


def test_headers_parsed_from_lines_and_text_output(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "headed", *b))
    lines = "h1:a,h2:b\tkey1\tvalue1\n\tkey2\tvalue2\n"
    ok(tidelog_cli("produce", "headed", *b, "--parse-headers", "-K", r"\t", stdin=lines))
    out = ok(
        tidelog_cli("consume", "headed", *b, "--from-beginning", "-n", "2", "--print-key", "--print-headers")
    )
    assert out == "h1:a,h2:b\tkey1\tvalue1\nNO_HEADERS\tkey2\tvalue2\n"
    plain = ok(tidelog_cli("consume", "headed", *b, "--from-beginning", "-n", "2"))
    assert plain == "value1\nvalue2\n"


def test_line_without_key_separator_fails_after_sending_the_good_lines(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "strict", *b))
    stderr = failed(tidelog_cli("produce", "strict", *b, "-K", ":", stdin="a:1\nb:2\nnot-keyed\nc:3\n"))
    assert "line 3: no key separator ':' found" in stderr
    records = consume_json(b, "strict", "--from-beginning", "--idle-timeout", "2")
    assert [(r["key"], r["value"]) for r in records] == [("a", "1"), ("b", "2")]


def test_binary_values_round_trip(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "binary", *b))
    payload = b"\xff\xfe\x00bin\rx"  # (a trailing \r would be read as part of a CRLF line end)
    ok(tidelog_cli("produce", "binary", *b, stdin=payload + b"\n" + "ünïcode".encode() + b"\n"))
    records = consume_json(b, "binary", "--from-beginning", "-n", "2")
    assert records[0]["value"] == {"base64": "//4AYmluDXg="}
    assert records[0]["key"] is None
    assert records[1]["value"] == "ünïcode"
    raw = tidelog_cli("consume", "binary", *b, "--from-beginning", "-n", "1")
    assert raw.returncode == 0
    assert raw.stdout == payload + b"\n"


def test_produce_from_file_with_rate_limit(b: list[str], tmp_path: Path) -> None:
    ok(tidelog_cli("topics", "create", "rated", *b))
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"line-{i}\n" for i in range(10)))
    started = time.monotonic()
    ok(tidelog_cli("produce", "rated", *b, "--file", str(source), "--rate", "20", "--no-progress"))
    assert time.monotonic() - started >= 0.45
    out = ok(tidelog_cli("consume", "rated", *b, "--from-beginning", "-n", "10"))
    assert out.splitlines() == [f"line-{i}" for i in range(10)]


@pytest.mark.parametrize(
    ("compression", "acks"), [("gzip", "1"), ("snappy", "all"), ("lz4", "-1"), ("zstd", "0")]
)
def test_produce_with_compression_and_acks(b: list[str], compression: str, acks: str) -> None:
    topic = f"codec-{compression}"
    ok(tidelog_cli("topics", "create", topic, *b))
    ok(
        tidelog_cli(
            "produce",
            topic,
            *b,
            "-z",
            compression,
            "--acks",
            acks,
            stdin="".join(f"{i}\n" for i in range(50)),
        )
    )
    out = ok(tidelog_cli("consume", topic, *b, "--from-beginning", "-n", "50"))
    assert out.splitlines() == [str(i) for i in range(50)]


def test_consume_positions(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "positions", "-p", "2", *b))
    ok(tidelog_cli("produce", "positions", *b, "-p", "0", stdin="a\nb\nc\nd\n"))
    ok(tidelog_cli("produce", "positions", *b, "-p", "1", stdin="x\ny\n"))
    assert ok(tidelog_cli("consume", "positions", *b, "-p", "0", "--offset", "2", "-n", "2")) == "c\nd\n"
    assert (
        ok(tidelog_cli("consume", "positions", *b, "-p", "1", "--offset", "earliest", "-n", "2")) == "x\ny\n"
    )
    both = consume_json(b, "positions", "--from-beginning", "-n", "6")
    assert sorted((r["partition"], r["offset"], r["value"]) for r in both) == [
        (0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "d"), (1, 0, "x"), (1, 1, "y"),
    ]  # fmt: skip
    latest = tidelog_cli("consume", "positions", *b, "--offset", "latest", "--idle-timeout", "1.5")
    assert ok(latest) == ""
    assert "Processed a total of 0 messages" in latest.stderr.decode()
    fewer = tidelog_cli(
        "consume", "positions", *b, "-p", "1", "--from-beginning", "-n", "5", "--idle-timeout", "2"
    )
    assert ok(fewer) == "x\ny\n"
    assert "Processed a total of 2 messages" in fewer.stderr.decode()
    assert "no partition 7" in failed(tidelog_cli("consume", "positions", *b, "-p", "7", "-n", "1"))


def test_consume_from_timestamp(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "timed", *b))
    ok(tidelog_cli("produce", "timed", *b, stdin="old-1\nold-2\n"))
    time.sleep(0.1)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.1)
    ok(tidelog_cli("produce", "timed", *b, stdin="new-1\nnew-2\n"))
    assert (
        ok(tidelog_cli("consume", "timed", *b, "--timestamp", str(boundary_ms), "-n", "2"))
        == "new-1\nnew-2\n"
    )
    future = tidelog_cli(
        "consume", "timed", *b, "--timestamp", str(boundary_ms + 3_600_000), "--idle-timeout", "1.5"
    )
    assert ok(future) == ""


def test_consume_as_a_group_commits_offsets(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "grouped", *b))
    ok(tidelog_cli("produce", "grouped", *b, stdin="1\n2\n3\n"))
    assert (
        ok(
            tidelog_cli(
                "consume",
                "grouped",
                *b,
                "-g",
                "cli-group",
                "--from-beginning",
                "-n",
                "3",
                "--idle-timeout",
                "20",
            )
        )
        == "1\n2\n3\n"
    )
    ok(tidelog_cli("produce", "grouped", *b, stdin="4\n"))
    again = tidelog_cli(
        "consume", "grouped", *b, "-g", "cli-group", "--from-beginning", "--idle-timeout", "5", "-n", "2"
    )
    assert ok(again) == "4\n"


def test_configs_describe_and_alter(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "configured", "-c", "retention.ms=5000", *b))

    def topic_configs(*extra: str) -> dict[str, dict[str, Any]]:
        out = ok(tidelog_cli("configs", "describe", "--topic", "configured", *b, "--format", "json", *extra))
        document = json.loads(out)
        assert (document["resource"], document["name"]) == ("topic", "configured")
        return {c["name"]: c for c in document["configs"]}

    overrides = topic_configs()
    assert {name: c["value"] for name, c in overrides.items()} == {"retention.ms": "5000"}
    assert overrides["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    everything = topic_configs("--all", "--synonyms")
    assert everything["segment.bytes"]["value"] == "1073741824"
    assert everything["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    assert everything["retention.ms"]["synonyms"][0] == {
        "name": "retention.ms",
        "value": "5000",
        "source": "DYNAMIC_TOPIC_CONFIG",
    }

    ok(
        tidelog_cli(
            "configs",
            "alter",
            "--topic",
            "configured",
            "--set",
            "cleanup.policy=compact",
            "--delete",
            "retention.ms",
            *b,
        )
    )
    assert {name: c["value"] for name, c in topic_configs().items()} == {"cleanup.policy": "compact"}
    assert "cleanup.policy" in failed(
        tidelog_cli("configs", "alter", "--topic", "configured", "--set", "cleanup.policy=shred", *b)
    )
    table = ok(tidelog_cli("configs", "describe", "--topic", "configured", *b))
    assert "cleanup.policy" in table
    assert "compact" in table


def test_configs_describe_broker(b: list[str], broker: Broker) -> None:
    document = json.loads(ok(tidelog_cli("configs", "describe", "--broker", *b, "--all", "--format", "json")))
    assert (document["resource"], document["name"]) == ("broker", "1")
    configs = {c["name"]: c for c in document["configs"]}
    assert configs["num.partitions"]["value"] == "1"
    assert configs["num.partitions"]["source"] == "DEFAULT_CONFIG"
    assert configs["auto.create.topics.enable"]["value"] == "false"
    assert configs["auto.create.topics.enable"]["source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.dirs"]["value"] == str(broker.data_dir)
    only_set = json.loads(ok(tidelog_cli("configs", "describe", "--broker", "1", *b, "--format", "json")))
    assert {c["name"] for c in only_set["configs"]} >= {"listeners", "log.dirs", "auto.create.topics.enable"}
    assert all(c["source"] != "DEFAULT_CONFIG" for c in only_set["configs"])


def test_configs_dynamic_broker_configs(b: list[str]) -> None:
    ok(tidelog_cli("topics", "create", "dynamic-plain", *b))

    def describe(*args: str) -> dict[str, dict[str, Any]]:
        document = json.loads(ok(tidelog_cli("configs", "describe", *args, *b, "--format", "json")))
        return {c["name"]: c for c in document["configs"]}

    def retention(where: dict[str, dict[str, Any]], name: str) -> tuple[str, str, bool]:
        return where[name]["value"], where[name]["source"], where[name]["read_only"]

    try:
        alter = tidelog_cli("configs", "alter", "--broker-defaults", "--set", "log.retention.ms=3600000", *b)
        assert "Updated the broker defaults." in alter.stderr.decode()
        assert describe("--broker-defaults", "--synonyms") == {
            "log.retention.ms": {
                "name": "log.retention.ms",
                "value": "3600000",
                "source": "DYNAMIC_DEFAULT_BROKER_CONFIG",
                "read_only": False,
                "sensitive": False,
                "synonyms": [
                    {
                        "name": "log.retention.ms",
                        "value": "3600000",
                        "source": "DYNAMIC_DEFAULT_BROKER_CONFIG",
                    },
                    {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"},
                ],
            }
        }
        topic = describe("--topic", "dynamic-plain", "--all")
        assert retention(topic, "retention.ms") == ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG", False)

        ok(tidelog_cli("configs", "alter", "--broker", "1", "--set", "log.retention.ms=7200000", *b))
        broker = describe("--broker", "1")
        assert retention(broker, "log.retention.ms") == ("7200000", "DYNAMIC_BROKER_CONFIG", False)
        assert retention(broker, "listeners")[1:] == ("STATIC_BROKER_CONFIG", True)
        topic = describe("--topic", "dynamic-plain", "--all")
        assert retention(topic, "retention.ms") == ("7200000", "DYNAMIC_BROKER_CONFIG", False)

        refused = failed(
            tidelog_cli("configs", "alter", "--broker", "1", "--set", "listeners=PLAINTEXT://:1", *b)
        )
        assert "Cannot update these configs dynamically: listeners" in refused
        refused = failed(
            tidelog_cli("configs", "alter", "--broker-defaults", "--set", "num.partitions=3", *b)
        )
        assert "Cannot update these configs dynamically: num.partitions" in refused
        refused = failed(
            tidelog_cli("configs", "alter", "--broker-defaults", "--set", "log.retention.ms=x", *b)
        )
        assert "Invalid value x for configuration log.retention.ms" in refused
    finally:
        ok(tidelog_cli("configs", "alter", "--broker", "1", "--delete", "log.retention.ms", *b))
        ok(tidelog_cli("configs", "alter", "--broker-defaults", "--delete", "log.retention.ms", *b))
    assert describe("--broker-defaults") == {}
    topic = describe("--topic", "dynamic-plain", "--all")
    assert retention(topic, "retention.ms") == ("604800000", "DEFAULT_CONFIG", False)


def test_leader_election_on_a_standalone_broker(b: list[str], tmp_path: Path) -> None:
    """One replica per partition leads it already: PREFERRED elects nothing, says so per partition, and an
    unknown partition is the broker's UNKNOWN_TOPIC_OR_PARTITION; naming no partitions is a usage error."""
    ok(tidelog_cli("topics", "create", "elect-me", "-p", "2", *b))
    out = ok(tidelog_cli("leader-election", "--election-type", "preferred", "--topic", "elect-me", *b))
    assert out.splitlines() == ["Valid replica already elected for partitions elect-me-0, elect-me-1"]
    out = ok(tidelog_cli("leader-election", "--election-type", "PREFERRED", "--all-topic-partitions", *b))
    assert out.splitlines() == ["No partitions needed a leader election"]
    plan = tmp_path / "elect.json"
    plan.write_text(
        '{"partitions": [{"topic": "elect-me", "partition": 1}, {"topic": "elect-me", "partition": 7}]}'
    )
    refused = failed(
        tidelog_cli("leader-election", "--election-type", "preferred", "--path-to-json-file", str(plan), *b)
    )
    assert "Error completing leader election (PREFERRED) for partitions: elect-me-7:" in refused
    assert "does not exist" in refused
    usage = failed(tidelog_cli("leader-election", "--election-type", "preferred", *b), 2, marker="Error")
    assert "exactly one of --topic, --all-topic-partitions, --path-to-json-file" in usage
