"""``tidelog reassign``'s files (Kafka's plan and topics-to-move JSON) and its usage errors, refused before
anything is sent (the commands against a cluster are in tests/cluster/test_reassignment.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidelog.cli._reassign_plan import PlanError, format_plan, read_plan, read_topics_to_move
from tidelog.cli.main import cli

UNREACHABLE = ["--bootstrap-server", "127.0.0.1:1", "--timeout", "0.5"]


def write(tmp_path: Path, document: object, name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def test_a_plan_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    plan = {("t", 1): (2, 3, 4), ("a", 0): (1,)}
    text = format_plan(plan)
    assert text == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"t","partition":1,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}'
    )
    assert read_plan(write(tmp_path, text)) == plan
    kafka_written = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 1]}]}
    assert read_plan(write(tmp_path, kafka_written)) == {("t", 0): (3, 1)}


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ("not json", "cannot read it as JSON"),
        ({"version": 1, "partitions": []}, "expected"),
        (
            {"version": 1, "partitions": [{"topic": "t", "partition": 0}]},
            "needs topic, partition and replicas",
        ),
        ({"version": 1, "partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}, "bad types"),
        (
            {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": []}]},
            "empty replica list",
        ),
        (
            {
                "version": 1,
                "partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}],
            },
            'only "any" log dirs',
        ),
        (
            {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2},
            "listed twice",
        ),
    ],
)
def test_malformed_plans_are_refused(tmp_path: Path, document: object, complaint: str) -> None:
    with pytest.raises(PlanError, match=complaint):
        read_plan(write(tmp_path, document))
    result = CliRunner().invoke(
        cli, ["reassign", "verify", "--reassignment-json-file", str(write(tmp_path, document)), *UNREACHABLE]
    )
    assert result.exit_code == 2
    assert complaint in result.output


def test_topics_to_move(tmp_path: Path) -> None:
    document = {"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}, {"topic": "a"}]}
    assert read_topics_to_move(write(tmp_path, document)) == ["a", "b"]
    with pytest.raises(PlanError, match="needs a topic name"):
        read_topics_to_move(write(tmp_path, {"version": 1, "topics": [{"name": "a"}]}))


def test_a_bad_broker_list_is_a_usage_error(tmp_path: Path) -> None:
    topics = write(tmp_path, {"version": 1, "topics": [{"topic": "a"}]})
    for brokers in ("1,x", "1,1", ""):
        result = CliRunner().invoke(
            cli,
            [
                "reassign",
                "generate",
                "--topics-to-move-json-file",
                str(topics),
                "--broker-list",
                brokers,
                *UNREACHABLE,
            ],
        )
        assert result.exit_code == 2, result.output
        assert "--broker-list" in result.output


def test_an_unreachable_broker_is_one_line(tmp_path: Path) -> None:
    plan = write(tmp_path, {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    result = CliRunner().invoke(
        cli, ["reassign", "verify", "--reassignment-json-file", str(plan), *UNREACHABLE]
    )
    assert result.exit_code == 1
    assert "cannot reach broker at 127.0.0.1:1" in result.output
    assert "Traceback" not in result.output


def test_throttled_replicas_of_a_plan_are_kafkas() -> None:
    """Leader side: the moving partitions' current replicas; follower side: the replicas they gain; the
    brokers: every one a moving partition has or will have. A partition that does not move is left alone."""
    from tidelog.cli._reassign_throttle import throttled_replicas

    current = {("t", 0): (1, 2, 3), ("t", 1): (2, 3, 4), ("u", 0): (3, 1), ("v", 0): (1,)}
    plan = {("t", 0): (2, 3, 4), ("t", 1): (2, 3, 4), ("u", 0): (1, 3), ("v", 0): (5,)}
    configs, brokers = throttled_replicas(current, plan)
    assert configs == {
        "t": {
            "leader.replication.throttled.replicas": "0:1,0:2,0:3",
            "follower.replication.throttled.replicas": "0:4",
        },
        "u": {  # a reordering gains nothing: only the leader side is throttled
            "leader.replication.throttled.replicas": "0:1,0:3",
            "follower.replication.throttled.replicas": "",
        },
        "v": {
            "leader.replication.throttled.replicas": "0:1",
            "follower.replication.throttled.replicas": "0:5",
        },
    }
    assert brokers == [1, 2, 3, 4, 5]


def test_a_throttle_must_be_positive(tmp_path: Path) -> None:
    plan = write(tmp_path, {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    result = CliRunner().invoke(
        cli, ["reassign", "execute", "--reassignment-json-file", str(plan), "--throttle", "0", *UNREACHABLE]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--throttle': 0 is not in the range x>=1." in result.output
