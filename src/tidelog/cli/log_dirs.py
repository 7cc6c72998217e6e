"""``tidelog log-dirs``: the job of ``kafka-log-dirs.sh`` (describe) and of the log-dir half of
``kafka-reassign-partitions.sh`` (move a replica between log dirs of its broker), over DescribeLogDirs and
AlterReplicaLogDirs, which confluent-kafka's AdminClient lacks: spoken with :mod:`tidelog.client.wire`.

Invariants:

- ``describe`` asks every broker (or ``--broker-list``'s) and prints Kafka's tool's JSON: ``{"version": 1,
  "brokers": [{"broker": id, "logDirs": [{"logDir": path, "error": null or the exception's class name,
  "partitions": [{"partition": "t-0", "size": bytes, "offsetLag": n, "isFuture": bool}]}]}]}``, filtered by
  ``--topic-list``.
- ``move`` takes exactly one of ``--reassignment-json-file`` (Kafka's plan format: each partition's
  ``replicas`` and ``log_dirs``, ``"any"`` meaning no move) or ``--topic`` + ``--partition`` + ``--dir``
  (``--broker``: default every broker hosting it); anything else is a usage error (exit 2). Each broker
  gets one AlterReplicaLogDirs with its replicas; any error is printed and is exit 1. ``--wait`` then
  follows DescribeLogDirs until no moved replica has a future log left.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console
from tidelog.cli._txn_wire import no_librdkafka_properties, open_wire, partition_leaders
from tidelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.client.wire import WireClient

__all__ = ["log_dirs_group"]

_EXCEPTION_NAMES = {
    ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException",
    ErrorCode.LOG_DIR_NOT_FOUND: "org.apache.kafka.common.errors.LogDirNotFoundException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "org.apache.kafka.common.errors.ClusterAuthorizationException",
}


def _error_name(code: int) -> str | None:
    if code == ErrorCode.NONE:
        return None
    return _EXCEPTION_NAMES.get(ErrorCode.of(code), ErrorCode.name_of(code))


@click.group("log-dirs")
def log_dirs_group() -> None:
    """Brokers' log dirs: describe them, move replicas between them (kafka-log-dirs.sh)."""


def _brokers(client: ClientOptions, wanted: str | None) -> dict[int, str]:
    with open_wire(client) as wire:
        brokers, _ = partition_leaders(wire, [])
    if wanted:
        ids = {int(b) for b in wanted.split(",") if b.strip()}
        missing = ids - set(brokers)
        if missing:
            fail(f"no broker {', '.join(str(b) for b in sorted(missing))} in the cluster")
        brokers = {b: a for b, a in brokers.items() if b in ids}
    return dict(sorted(brokers.items()))


def _describe_one(wire: WireClient) -> list[dict[str, Any]]:
    from tidelog.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse

    response = wire.call(DescribeLogDirsRequest(topics=None), expect=DescribeLogDirsResponse)
    if response.error_code != ErrorCode.NONE:
        fail(f"{wire.address} refused DescribeLogDirs: {ErrorCode.name_of(response.error_code)}")
    return [
        {
            "logDir": result.log_dir,
            "error": _error_name(result.error_code),
            "partitions": [
                {
                    "partition": f"{topic.name}-{p.partition_index}",
                    "size": p.partition_size,
                    "offsetLag": p.offset_lag,
                    "isFuture": p.is_future_key,
                }
                for topic in result.topics
                for p in topic.partitions
            ],
        }
        for result in response.results
    ]


def describe_brokers(client: ClientOptions, brokers: dict[int, str]) -> dict[str, Any]:
    out = []
    for broker_id, address in brokers.items():
        with open_wire(client, address) as wire:
            out.append({"broker": broker_id, "logDirs": _describe_one(wire)})
    return {"version": 1, "brokers": out}


@log_dirs_group.command("describe")
@click.option("--broker-list", help="Comma-separated broker ids to query (default: every broker).")
@click.option("--topic-list", help="Comma-separated topics to show (default: every topic).")
@client_options
def describe_command(client: ClientOptions, broker_list: str | None, topic_list: str | None) -> None:
    """Each broker's log dirs with the replicas in them, as kafka-log-dirs.sh --describe prints them."""
    no_librdkafka_properties(client)
    brokers = _brokers(client, broker_list)
    err = click.echo
    err("Querying brokers for log directories information", err=True)
    described = describe_brokers(client, brokers)
    err(f"Received log directory information from brokers {','.join(str(b) for b in brokers)}", err=True)
    if topic_list:
        topics = {t.strip() for t in topic_list.split(",") if t.strip()}
        for broker in described["brokers"]:
            for log_dir in broker["logDirs"]:
                log_dir["partitions"] = [
                    p for p in log_dir["partitions"] if p["partition"].rsplit("-", 1)[0] in topics
                ]
    click.echo(json.dumps(described))


def _plan_from_file(path: Path) -> list[tuple[str, int, int, str]]:
    """(topic, partition, broker, dir) of each replica with a log dir in Kafka's reassignment JSON."""
    try:
        plan = json.loads(path.read_text())
        moves = []
        for entry in plan["partitions"]:
            replicas = entry.get("replicas") or []
            log_dirs = entry.get("log_dirs") or []
            if log_dirs and len(log_dirs) != len(replicas):
                raise ValueError(
                    f"{entry['topic']}-{entry['partition']}: log_dirs and replicas differ in length"
                )
            for broker, log_dir in zip(replicas, log_dirs, strict=True):
                if log_dir != "any":
                    moves.append((str(entry["topic"]), int(entry["partition"]), int(broker), str(log_dir)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.UsageError(f"cannot read the plan in {path}: {exc}") from exc
    return moves


@log_dirs_group.command("move")
@click.option(
    "--reassignment-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Kafka\'s plan: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1], '
    '"log_dirs": ["/data/d2"]}]}.',
)
@click.option("--topic", help="Topic of the replica to move.")
@click.option("--partition", type=click.IntRange(min=0), help="Partition of --topic.")
@click.option("--dir", "log_dir", help="Absolute path of the log dir to move it to.")
@click.option("--broker", type=int, help="Broker whose replica moves (default: every broker hosting it).")
@click.option("--wait", is_flag=True, help="Return only once every moved replica is in its new dir.")
@client_options
def move_command(
    client: ClientOptions,
    reassignment_json_file: Path | None,
    topic: str | None,
    partition: int | None,
    log_dir: str | None,
    broker: int | None,
    wait: bool,
) -> None:
    """Move replicas between the log dirs of their brokers (AlterReplicaLogDirs)."""
    from tidelog.protocol.messages import AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse

    no_librdkafka_properties(client)
    simple = topic is not None or partition is not None or log_dir is not None
    if (reassignment_json_file is None) == (not simple) or (
        simple and (topic is None or partition is None or log_dir is None)
    ):
        raise click.UsageError("give --reassignment-json-file, or --topic, --partition and --dir")
    with open_wire(client) as wire:
        brokers, topics = partition_leaders(wire, None if reassignment_json_file else [topic or ""])
    if reassignment_json_file is not None:
        moves = _plan_from_file(reassignment_json_file)
    else:
        assert topic is not None
        assert partition is not None
        assert log_dir is not None
        meta = topics.get(topic)
        hosts = (
            []
            if meta is None
            else [r for p in meta.partitions if p.partition_index == partition for r in p.replica_nodes]
        )
        if broker is not None:
            hosts = [broker]
        if not hosts:
            fail(f"no replica of {topic}-{partition} in the cluster")
        moves = [(topic, partition, b, log_dir) for b in hosts]
    per_broker: dict[int, dict[str, dict[str, list[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for t, index, b, d in moves:
        if b not in brokers:
            fail(f"no broker {b} in the cluster")
        per_broker[b][d][t].append(index)
    console = out_console
    failed = False
    for broker_id, dirs in sorted(per_broker.items()):
        request = AlterReplicaLogDirsRequest(
            dirs=[
                AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                    path=d,
                    topics=[
                        AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=t, partitions=ps)
                        for t, ps in by_topic.items()
                    ],
                )
                for d, by_topic in dirs.items()
            ]
        )
        with open_wire(client, brokers[broker_id]) as wire:
            response = wire.call(request, expect=AlterReplicaLogDirsResponse)
        for result in response.results:
            for p in result.partitions:
                if p.error_code == ErrorCode.NONE:
                    console.print(f"{result.topic_name}-{p.partition_index} on broker {broker_id}: moving")
                else:
                    failed = True
                    console.print(
                        f"{result.topic_name}-{p.partition_index} on broker {broker_id}: "
                        f"{ErrorCode.name_of(p.error_code)}"
                    )
    if failed:
        fail("some replicas were not moved")
    if wait:
        _wait_moved(client, brokers, {(t, p, b) for t, p, b, _ in moves})


def _wait_moved(client: ClientOptions, brokers: dict[int, str], moved: set[tuple[str, int, int]]) -> None:
    deadline = time.monotonic() + max(client.timeout, 1.0) * 60
    while True:
        described = describe_brokers(client, {b: brokers[b] for b in {b for _, _, b in moved}})
        pending = {
            (broker["broker"], p["partition"])
            for broker in described["brokers"]
            for log_dir in broker["logDirs"]
            for p in log_dir["partitions"]
            if p["isFuture"]
            and any(broker["broker"] == b and p["partition"] == f"{t}-{n}" for t, n, b in moved)
        }
        if not pending:
            out_console.print("every replica is in its new log dir")
            return
        if time.monotonic() > deadline:
            fail(f"still moving: {sorted(pending)}")
        time.sleep(0.2)
