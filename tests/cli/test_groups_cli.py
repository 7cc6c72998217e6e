"""``tidelog groups`` run as a user runs it (a subprocess) against a real broker and a real consumer group.

- ``list`` and ``describe`` show an active confluent-kafka member with its assignment, the committed
  offsets, log end offsets and lag per partition (JSON asserted exactly; the table names the same things).
- ``reset-offsets`` is refused while the group has members; once it is empty a dry run changes nothing,
  ``--execute`` applies earliest, latest, a timestamp, an exact offset (clamped into the log) and a shift.
- ``delete`` refuses an active group and a missing one (exit 1) and deletes an empty one with its offsets.
- Usage mistakes exit 2, an unknown topic or group 1, an unreachable broker 1 — all without a traceback.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from tests.cli.cli_support import failed, ok, tidelog_cli
from tests.server.group_harness import CONFLUENT, MemberPool, create_topic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("groups-cli")
    with Broker(
        # log.retention.ms -1: the messages are stamped in 2023 (BASE_MS); a retention check would delete them.
        {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000, "log.retention.ms": -1},
        data_dir=base / "data",
        run_dir=base / "run",
    ) as running:
        yield running


@pytest.fixture
def b(broker: Broker) -> list[str]:
    return ["-b", broker.bootstrap_servers]


@pytest.fixture
def pool(broker: Broker) -> Iterator[MemberPool]:
    members = MemberPool(broker.bootstrap_servers)
    try:
        yield members
    finally:
        members.close()


def produce_timed(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` messages into partition p, message i stamped BASE_MS + i seconds."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(
                topic, f"{partition}-{i}".encode(), partition=partition, timestamp=BASE_MS + i * 1000
            )
    assert producer.flush(30) == 0


def describe_json(b: list[str], group: str) -> dict[str, Any]:
    document = json.loads(ok(tidelog_cli("groups", "describe", group, *b, "--format", "json")))
    assert [d["group"] for d in document] == [group]
    return document[0]  # type: ignore[no-any-return]


def committed(b: list[str], group: str) -> dict[int, int | None]:
    return {o["partition"]: o["current_offset"] for o in describe_json(b, group)["offsets"]}


def reset(b: list[str], group: str, *args: str) -> dict[int, tuple[int | None, int]]:
    out = ok(tidelog_cli("groups", "reset-offsets", group, *b, "--format", "json", *args))
    document = json.loads(out)
    assert document["group"] == group
    assert document["executed"] == ("--execute" in args)
    return {o["partition"]: (o["current_offset"], o["new_offset"]) for o in document["offsets"]}


def test_groups_lifecycle(broker: Broker, b: list[str], pool: MemberPool) -> None:
    topic = group = "cli-groups"
    create_topic(broker.bootstrap_servers, topic, 3)
    produce_timed(broker.bootstrap_servers, topic, {0: 5, 1: 3})
    member = pool.start(CONFLUENT, group, [topic], reset="earliest", client_id="cli-member")
    member.wait_messages(8)
    assert member.commit([(topic, 0, 4), (topic, 1, 3)]) is None

    listed = json.loads(ok(tidelog_cli("groups", "list", *b, "--format", "json")))
    assert {"group": group, "state": "Stable", "type": "classic"} in listed
    assert group in ok(tidelog_cli("groups", "list", *b, "--format", "plain")).split()
    stable_only = ok(tidelog_cli("groups", "list", *b, "--state", "stable", "--format", "plain")).split()
    empty_only = ok(tidelog_cli("groups", "list", *b, "--state", "empty", "--format", "plain")).split()
    assert group in stable_only
    assert group not in empty_only

    described = describe_json(b, group)
    (only,) = described["members"]
    member_id = only["member_id"]
    assert member_id.startswith("cli-member-")
    assert (described["state"], described["assignor"]) == ("Stable", "range")
    assert only == {
        "member_id": member_id,
        "group_instance_id": None,
        "client_id": "cli-member",
        "host": "/127.0.0.1",
        "assignment": [[topic, 0], [topic, 1], [topic, 2]],
    }
    owner = {"member_id": member_id, "host": "/127.0.0.1", "client_id": "cli-member"}
    assert described["offsets"] == [
        {"topic": topic, "partition": 0, "current_offset": 4, "log_end_offset": 5, "lag": 1, **owner},
        {"topic": topic, "partition": 1, "current_offset": 3, "log_end_offset": 3, "lag": 0, **owner},
        {"topic": topic, "partition": 2, "current_offset": None, "log_end_offset": 0, "lag": None, **owner},
    ]
    text = ok(tidelog_cli("groups", "describe", group, *b))
    for expected in ("Stable", "range", member_id, "cli-member", "Log end offset", "Lag"):
        assert expected in text

    # Active: no reset, no delete.
    refused = failed(tidelog_cli("groups", "reset-offsets", group, *b, "--all-topics", "--to-earliest"))
    assert f"cannot reset offsets of group '{group}': it is Stable with 1 member(s)" in refused
    assert "cannot delete group" in failed(tidelog_cli("groups", "delete", group, *b))
    assert committed(b, group) == {0: 4, 1: 3, 2: None}

    member.close()
    assert describe_json(b, group)["state"] == "Empty"
    assert describe_json(b, group)["members"] == []

    # Dry runs change nothing.
    assert reset(b, group, "--all-topics", "--to-earliest") == {0: (4, 0), 1: (3, 0)}
    assert committed(b, group) == {0: 4, 1: 3}
    # Each strategy, executed.
    assert reset(b, group, "--topic", topic, "--to-earliest", "--execute") == {
        0: (4, 0),
        1: (3, 0),
        2: (None, 0),
    }
    assert committed(b, group) == {0: 0, 1: 0, 2: 0}
    assert reset(b, group, "--topic", f"{topic}:0,1", "--to-latest", "--execute") == {0: (0, 5), 1: (0, 3)}
    assert reset(b, group, "--all-topics", "--shift-by", "-2", "--execute") == {
        0: (5, 3),
        1: (3, 1),
        2: (0, 0),
    }
    assert reset(b, group, "--topic", f"{topic}:0", "--to-datetime", str(BASE_MS + 2500), "--execute") == {
        0: (3, 3)
    }
    assert reset(b, group, "--topic", f"{topic}:0", "--to-datetime", str(BASE_MS + 1000), "--execute") == {
        0: (3, 1)
    }
    # Later than every message: the log end, as Kafka's tool does.
    assert reset(b, group, "--topic", f"{topic}:1", "--to-datetime", str(BASE_MS + 10**7), "--execute") == {
        1: (1, 3)
    }
    assert reset(b, group, "--topic", f"{topic}:0", "--to-offset", "100", "--execute") == {
        0: (1, 5)
    }  # clamped
    assert reset(b, group, "--topic", f"{topic}:0", "--to-offset", "2", "--execute") == {0: (5, 2)}
    assert committed(b, group) == {0: 2, 1: 3, 2: 0}
    table = ok(tidelog_cli("groups", "reset-offsets", group, *b, "--all-topics", "--to-earliest"))
    assert "dry run" in table

    # The next member of the group starts at the reset offsets.
    again = pool.start(CONFLUENT, group, [topic], reset="earliest")
    again.wait_messages(3)
    assert sorted((p, o) for _t, p, o, _v in again.messages()) == [(0, 2), (0, 3), (0, 4)]
    again.close()

    ok(tidelog_cli("groups", "delete", group, *b))
    assert group not in ok(tidelog_cli("groups", "list", *b, "--format", "plain")).split()
    assert f"consumer group '{group}' does not exist" in failed(tidelog_cli("groups", "describe", group, *b))
    assert f"cannot delete group '{group}': it does not exist" in failed(
        tidelog_cli("groups", "delete", group, *b)
    )


def test_reset_offsets_usage_errors(broker: Broker, b: list[str]) -> None:
    create_topic(broker.bootstrap_servers, "cli-usage", 1)
    for args in (
        ("--all-topics",),
        ("--all-topics", "--to-earliest", "--to-latest"),
        ("--to-earliest",),
        ("--topic", "cli-usage", "--all-topics", "--to-earliest"),
        ("--topic", "cli-usage:x", "--to-earliest"),
        ("--topic", "cli-usage", "--to-datetime", "yesterday-ish"),
    ):
        result = tidelog_cli("groups", "reset-offsets", "g-usage", *b, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert b"Traceback" not in result.stderr
    assert "unknown topic 'nope'" in failed(
        tidelog_cli("groups", "reset-offsets", "g-usage", *b, "--topic", "nope", "--to-earliest")
    )
    assert "has no partition 7" in failed(
        tidelog_cli("groups", "reset-offsets", "g-usage", *b, "--topic", "cli-usage:7", "--to-earliest")
    )
    assert "no committed offsets" in failed(
        tidelog_cli("groups", "reset-offsets", "g-usage", *b, "--all-topics", "--to-earliest")
    )
    assert "without a committed offset: cli-usage-0" in failed(
        tidelog_cli("groups", "reset-offsets", "g-usage", *b, "--topic", "cli-usage", "--shift-by", "1")
    )
    # A group that does not exist yet may get offsets (Kafka's tool allows it: its state is Dead).
    assert ok(
        tidelog_cli(
            "groups", "reset-offsets", "g-usage", *b, "--topic", "cli-usage", "--to-latest", "--execute"
        )
    )
    assert committed(b, "g-usage") == {0: 0}


def test_unreachable_broker() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for args in (("list",), ("describe", "g"), ("delete", "g")):
        message = failed(
            tidelog_cli("groups", *args, "-b", f"127.0.0.1:{port}", "--timeout", "1", timeout=30)
        )
        assert "cannot reach broker" in message
