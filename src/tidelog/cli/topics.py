"""``tidelog topics create|list|describe|alter|delete`` (the jobs of ``kafka-topics.sh``), over AdminClient.

Invariants: every subcommand first fetches cluster metadata, so an unreachable broker fails with
"cannot reach broker" within ``--timeout``; an unknown topic is an error (exit 1) unless ``--if-exists``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, NotRequired, TypedDict

import click

from tidelog.cli._common import (
    ClientOptions,
    alter_configs,
    client_options,
    config_source,
    err_console,
    fail,
    out_console,
    parse_key_values,
    print_warning,
    wait_result,
)
from tidelog.cli._common import (
    table as make_table,
)
from tidelog.cli._progress import progress_bar, show_progress

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, TopicMetadata

_Offset = int | str
"""An offset, or ``"?"`` where the broker could not say."""


class _PartitionRow(TypedDict):
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    status: str
    log_start_offset: NotRequired[_Offset]
    log_end_offset: NotRequired[_Offset]


class _TopicRow(TypedDict):
    topic: str
    partitions: list[_PartitionRow]
    configs: dict[str, str] | None


@click.group("topics")
def topics_group() -> None:
    """Create, list, describe, alter and delete topics."""


@topics_group.command("create")
@click.argument("topic")
@click.option(
    "--partitions",
    "-p",
    type=click.IntRange(min=1),
    help="Partition count [default: broker's num.partitions].",
)
@click.option(
    "--replication-factor",
    "-r",
    type=click.IntRange(min=1),
    help="Replicas per partition [default: broker's default.replication.factor].",
)
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic config override (repeatable).",
)
@click.option("--if-not-exists", is_flag=True, help="Succeed if the topic already exists.")
@client_options
def create_command(
    client: ClientOptions,
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: tuple[str, ...],
    if_not_exists: bool,
) -> None:
    """Create TOPIC."""
    from confluent_kafka import KafkaException

    from tidelog.cli._kafka import NewTopic

    config = parse_key_values(configs, "--config")
    admin = client.admin()
    client.cluster_metadata(admin)
    new_topic = NewTopic(
        topic,
        num_partitions=partitions if partitions is not None else -1,
        replication_factor=replication_factor if replication_factor is not None else -1,
        config=config,
    )
    futures = admin.create_topics(
        [new_topic], operation_timeout=client.timeout, request_timeout=client.timeout
    )
    try:
        futures[topic].result(timeout=client.timeout + 5)
    except KafkaException as exc:
        if if_not_exists and exc.args and exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
            err_console.print(f"Topic {topic} already exists.")
            return
    wait_result(client, futures[topic], f"cannot create topic {topic!r}")
    err_console.print(f"Created topic {topic}.")


@topics_group.command("list")
@click.option(
    "--internal",
    "-a",
    "include_internal",
    is_flag=True,
    help="Include internal topics (__consumer_offsets ...).",
)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "plain", "json"]), default="table", show_default=True
)
@client_options
def list_command(client: ClientOptions, include_internal: bool, fmt: str) -> None:
    """List topics."""
    metadata = client.cluster_metadata(client.admin())
    topics = sorted(
        (name, len(meta.partitions))
        for name, meta in metadata.topics.items()
        if include_internal or not name.startswith("__")
    )
    if fmt == "json":
        out_console.print_json(json.dumps([{"topic": n, "partitions": p} for n, p in topics]))
    elif fmt == "plain":
        for name, _ in topics:
            click.echo(name)
    else:
        table = make_table(
            "Topic", "Partitions", title=f"{len(topics)} topic(s) on {client.bootstrap_server}"
        )
        for name, count in topics:
            table.add_row(name, str(count))
        out_console.print(table)


def _topic_metadata(client: ClientOptions, admin: AdminClient, topic: str) -> TopicMetadata:
    metadata = client.cluster_metadata(admin)  # all topics: asking for one could auto-create it
    meta = metadata.topics.get(topic)
    if meta is None or (meta.error is not None and meta.error.name() == "UNKNOWN_TOPIC_OR_PART"):
        fail(f"unknown topic {topic!r}")
    if meta.error is not None:
        fail(f"topic {topic!r}: {meta.error.str()}")
    return meta


def _offsets(
    client: ClientOptions, admin: AdminClient, topic: str, partitions: list[int]
) -> dict[int, tuple[_Offset, _Offset]]:
    """Log start and end offset of each partition (``?`` where the broker cannot say)."""
    from confluent_kafka import KafkaException, TopicPartition

    from tidelog.cli._kafka import OffsetSpec

    out: dict[int, tuple[_Offset, _Offset]] = dict.fromkeys(partitions, ("?", "?"))
    if not partitions:
        return out
    try:
        earliest = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.earliest() for p in partitions},
            request_timeout=client.timeout,
        )
        latest = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
            request_timeout=client.timeout,
        )
        for tp, future in earliest.items():
            out[tp.partition] = (future.result(timeout=client.timeout).offset, out[tp.partition][1])
        for tp, future in latest.items():
            out[tp.partition] = (out[tp.partition][0], future.result(timeout=client.timeout).offset)
    except (KafkaException, TimeoutError) as exc:
        print_warning(f"offsets of {topic} unavailable: {exc}")
    return out


def _topic_overrides(client: ClientOptions, admin: AdminClient, topic: str) -> dict[str, str] | None:
    from confluent_kafka import KafkaException

    from tidelog.cli._kafka import ConfigResource, ConfigSource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=client.timeout)[resource].result(
            timeout=client.timeout
        )
    except (KafkaException, TimeoutError) as exc:
        print_warning(f"configs of {topic} unavailable: {exc}")
        return None
    return {
        name: entry.value
        for name, entry in sorted(entries.items())
        if config_source(entry) is ConfigSource.DYNAMIC_TOPIC_CONFIG
    }


def _status(leader: int, replicas: list[int], isr: list[int]) -> str:
    """``offline`` (no leader), ``under-replicated`` (the ISR lacks a replica) or ``ok``, as
    kafka-topics.sh --unavailable-partitions / --under-replicated-partitions tell them."""
    if leader < 0:
        return "offline"
    if len(isr) < len(replicas):
        return "under-replicated"
    return "ok"


@topics_group.command("describe")
@click.argument("topics", nargs=-1)
@click.option("--offsets/--no-offsets", default=True, show_default=True, help="Show log start/end offsets.")
@click.option(
    "--under-replicated-partitions",
    "under_replicated",
    is_flag=True,
    help="Only partitions whose ISR lacks a replica (offline ones included).",
)
@click.option(
    "--unavailable-partitions", "unavailable", is_flag=True, help="Only partitions without a leader."
)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@client_options
def describe_command(
    client: ClientOptions,
    topics: tuple[str, ...],
    offsets: bool,
    under_replicated: bool,
    unavailable: bool,
    fmt: str,
) -> None:
    """Describe TOPICS (all non-internal topics if none given): partitions, leaders, replicas, ISR, offline
    replicas and each partition's status (ok, under-replicated, offline), configs."""
    admin = client.admin()
    metadata = client.cluster_metadata(admin)
    live = set(metadata.brokers)
    if not topics:
        topics = tuple(sorted(name for name in metadata.topics if not name.startswith("__")))
    described: list[_TopicRow] = []
    for topic in topics:
        meta = _topic_metadata(client, admin, topic)
        partitions = sorted(meta.partitions.values(), key=lambda p: p.id)
        marks = _offsets(client, admin, topic, [p.id for p in partitions]) if offsets else {}
        overrides = _topic_overrides(client, admin, topic)
        rows: list[_PartitionRow] = []
        for partition in partitions:
            replicas, isr = list(partition.replicas), list(partition.isrs)
            status = _status(partition.leader, replicas, isr)
            if (unavailable and status != "offline") or (under_replicated and status == "ok"):
                continue
            entry: _PartitionRow = {
                "partition": partition.id,
                "leader": partition.leader,
                "replicas": replicas,
                "isr": isr,
                "offline_replicas": [r for r in replicas if r not in live],
                "status": status,
            }
            if offsets:
                entry["log_start_offset"], entry["log_end_offset"] = marks[partition.id]
            rows.append(entry)
        described.append({"topic": topic, "partitions": rows, "configs": overrides})
    if fmt == "json":
        out_console.print_json(json.dumps(described))
        return
    for item in described:
        parts = item["partitions"]
        replication = len(parts[0]["replicas"]) if parts else 0
        configs = item["configs"]
        config_text = "?" if configs is None else ",".join(f"{k}={v}" for k, v in configs.items()) or "-"
        title = (
            f"Topic: {item['topic']}  PartitionCount: {len(parts)}  ReplicationFactor: {replication}  "
            f"Configs: {config_text}"
        )
        columns = ["Partition", "Leader", "Replicas", "ISR", "Offline", "Status"] + (
            ["Log start", "Log end"] if offsets else []
        )
        table = make_table(*columns, title=title, title_justify="left")
        for p in parts:
            row = [
                str(p["partition"]),
                str(p["leader"]),
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                ",".join(map(str, p["offline_replicas"])) or "-",
                p["status"],
            ]
            if offsets:
                row += [str(p["log_start_offset"]), str(p["log_end_offset"])]
            table.add_row(*row)
        out_console.print(table)


@topics_group.command("alter")
@click.argument("topic")
@click.option("--partitions", "-p", type=click.IntRange(min=1), help="New (larger) partition count.")
@click.option(
    "--config", "-c", "configs", multiple=True, metavar="KEY=VALUE", help="Set a topic config (repeatable)."
)
@click.option(
    "--delete-config", "-d", "deletes", multiple=True, metavar="KEY", help="Remove a topic config override."
)
@client_options
def alter_command(
    client: ClientOptions,
    topic: str,
    partitions: int | None,
    configs: tuple[str, ...],
    deletes: tuple[str, ...],
) -> None:
    """Change TOPIC's partition count and/or config overrides."""
    from tidelog.cli._kafka import NewPartitions

    sets = parse_key_values(configs, "--config")
    if partitions is None and not sets and not deletes:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    admin = client.admin()
    meta = _topic_metadata(client, admin, topic)
    if partitions is not None:
        current = len(meta.partitions)
        if partitions < current:
            fail(f"topic {topic!r} has {current} partitions; the count can only be increased")
        if partitions > current:
            futures = admin.create_partitions(
                [NewPartitions(topic, partitions)],
                operation_timeout=client.timeout,
                request_timeout=client.timeout,
            )
            wait_result(client, futures[topic], f"cannot add partitions to {topic!r}")
            err_console.print(f"Topic {topic} now has {partitions} partitions.")
    if sets or deletes:
        alter_configs(client, admin, "topic", topic, sets, deletes)


@topics_group.command("delete")
@click.argument("topics", nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed if a topic does not exist.")
@client_options
def delete_command(client: ClientOptions, topics: tuple[str, ...], if_exists: bool) -> None:
    """Delete TOPICS."""
    admin = client.admin()
    metadata = client.cluster_metadata(admin)
    existing = [t for t in topics if t in metadata.topics]
    for topic in topics:
        if topic not in metadata.topics:
            if if_exists:
                err_console.print(f"Topic {topic} does not exist.")
                continue
            fail(f"unknown topic {topic!r}")
    if not existing:
        return
    futures = admin.delete_topics(existing, operation_timeout=client.timeout, request_timeout=client.timeout)
    with progress_bar("topics", show=show_progress() and len(existing) > 1) as bar:
        task = bar.add_task("deleting topics", total=len(existing))
        for topic in existing:
            wait_result(client, futures[topic], f"cannot delete topic {topic!r}")
            bar.console.print(f"Deleted topic {topic}.")
            bar.advance(task)
