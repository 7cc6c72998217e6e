"""``tidelog groups list|describe|delete|reset-offsets`` (the jobs of ``kafka-consumer-groups.sh``), over AdminClient.

Invariants:
- ``describe`` shows, per partition the group has committed or been assigned, the committed offset, the log
  end offset and the lag (end - committed; ``-`` without a commit), with the member that owns it, and the
  members with their assignments; a group that does not exist is an error (exit 1), as in Kafka's tool.
- ``reset-offsets`` computes new offsets for the chosen partitions (earliest, latest, a timestamp, an exact
  offset, or a shift of the committed offset), clamped to each partition's [log start, log end] as Kafka's
  tool does; it only shows them unless ``--execute`` is given, and it refuses (exit 1, nothing changed)
  while the group has members: only an Empty (or not yet existing) group's offsets can be reset.
- ``delete`` deletes empty groups (their committed offsets go with them); each group that cannot be deleted
  is reported and makes the command exit 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import click

from tidelog.cli._common import (
    ClientOptions,
    client_options,
    err_console,
    fail,
    kafka_error_text,
    out_console,
    print_error,
    wait_result,
)
from tidelog.cli._common import table as make_table
from tidelog.cli._progress import progress_bar, show_progress
from tidelog.cli.consume import parse_timestamp

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, MemberDescription, OffsetSpec

__all__ = ["groups_group"]

# Kafka's names for group states (kafka-consumer-groups.sh prints these).
_STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "UNKOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
_STATE_CHOICES = {v.lower(): k for k, v in _STATE_NAMES.items() if k != "UNKOWN"}
_INACTIVE = ("Empty", "Dead")


def state_name(state: object) -> str:
    name = getattr(state, "name", str(state))
    return _STATE_NAMES.get(name, name)


@click.group("groups")
def groups_group() -> None:
    """List, describe, delete consumer groups and reset their offsets."""


# ---- list --------------------------------------------------------------------------------------------


@groups_group.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(sorted(_STATE_CHOICES), case_sensitive=False),
    help="Only groups in this state (repeatable).",
)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "plain", "json"]), default="table", show_default=True
)
@client_options
def list_command(client: ClientOptions, states: tuple[str, ...], fmt: str) -> None:
    """List consumer groups."""
    from confluent_kafka import ConsumerGroupState

    admin = client.admin()
    client.cluster_metadata(admin)
    kwargs: dict[str, object] = {"request_timeout": client.timeout}
    if states:
        kwargs["states"] = {ConsumerGroupState[_STATE_CHOICES[s.lower()]] for s in states}
    result = wait_result(client, admin.list_consumer_groups(**kwargs), "cannot list groups")
    for error in result.errors:
        fail(f"cannot list groups: {kafka_error_text(error)}")
    groups = sorted(
        (
            g.group_id,
            state_name(g.state),
            getattr(getattr(g, "type", None), "name", "UNKNOWN").lower(),
        )
        for g in result.valid
    )
    if fmt == "json":
        out_console.print_json(json.dumps([{"group": g, "state": s, "type": t} for g, s, t in groups]))
    elif fmt == "plain":
        for group, _state, _type in groups:
            click.echo(group)
    else:
        table = make_table(
            "Group", "State", "Type", title=f"{len(groups)} group(s) on {client.bootstrap_server}"
        )
        for row in groups:
            table.add_row(*row)
        out_console.print(table)


# ---- describe ----------------------------------------------------------------------------------------


class _MemberRow(TypedDict):
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[list[str | int]]


class _OffsetRow(TypedDict):
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int
    lag: int | None
    member_id: str | None
    host: str | None
    client_id: str | None


class _ResetRow(TypedDict):
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int


@dataclass
class _Described:
    group: str
    state: str
    assignor: str
    members: list[_MemberRow]
    offsets: list[_OffsetRow]

    def as_json(self) -> dict[str, object]:
        return {
            "group": self.group,
            "state": self.state,
            "assignor": self.assignor,
            "members": self.members,
            "offsets": self.offsets,
        }


def _describe_group(client: ClientOptions, admin: AdminClient, group: str) -> ConsumerGroupDescription:
    futures = admin.describe_consumer_groups([group], request_timeout=client.timeout)
    description: ConsumerGroupDescription = wait_result(
        client, futures[group], f"cannot describe group {group!r}"
    )
    return description


def _committed(client: ClientOptions, admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """Committed offsets of every partition of ``group`` (only those with a commit)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=client.timeout
    )
    result = wait_result(client, futures[group], f"cannot fetch the offsets of group {group!r}")
    committed: dict[tuple[str, int], int] = {}
    for tp in result.topic_partitions:
        if tp.error is not None:
            fail(f"offsets of group {group!r}, {tp.topic}-{tp.partition}: {kafka_error_text(tp.error)}")
        if tp.offset >= 0:
            committed[(tp.topic, tp.partition)] = tp.offset
    return committed


def _list_offsets(
    client: ClientOptions, admin: AdminClient, partitions: list[tuple[str, int]], spec: OffsetSpec, what: str
) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=client.timeout
    )
    return {
        (tp.topic, tp.partition): wait_result(
            client, future, f"cannot look up {what} of {tp.topic}-{tp.partition}"
        ).offset
        for tp, future in futures.items()
    }


def _latest(
    client: ClientOptions, admin: AdminClient, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    from tidelog.cli._kafka import OffsetSpec

    return _list_offsets(client, admin, partitions, OffsetSpec.latest(), "the log end offset")


def _earliest(
    client: ClientOptions, admin: AdminClient, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    from tidelog.cli._kafka import OffsetSpec

    return _list_offsets(client, admin, partitions, OffsetSpec.earliest(), "the log start offset")


def describe(client: ClientOptions, admin: AdminClient, group: str) -> _Described:
    description = _describe_group(client, admin, group)
    state = state_name(description.state)
    committed = _committed(client, admin, group)
    if state == "Dead" and not committed:
        fail(f"consumer group {group!r} does not exist")
    owners: dict[tuple[str, int], MemberDescription] = {}
    members: list[_MemberRow] = []
    for member in sorted(description.members, key=lambda m: m.member_id):
        assigned = sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
        owners.update(dict.fromkeys(assigned, member))
        members.append(
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "host": member.host,
                "assignment": [list(tp) for tp in assigned],
            }
        )
    partitions = sorted(set(committed) | set(owners))
    log_end = _latest(client, admin, partitions)
    offsets: list[_OffsetRow] = []
    for tp in partitions:
        owner = owners.get(tp)
        current = committed.get(tp)
        end = log_end[tp]
        offsets.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": None if current is None or end < 0 else max(end - current, 0),
                "member_id": owner.member_id if owner is not None else None,
                "host": owner.host if owner is not None else None,
                "client_id": owner.client_id if owner is not None else None,
            }
        )
    return _Described(group, state, description.partition_assignor or "", members, offsets)


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _print_described(described: _Described) -> None:
    count = len(described.members)
    details = f"{described.state}, {count} member(s)"
    if described.assignor:
        details += f", assignor {described.assignor}"
    out_console.print(f"Consumer group [bold]{described.group}[/] ({details})")
    offsets = make_table(
        "Topic",
        "Partition",
        "Current offset",
        "Log end offset",
        "Lag",
        "Consumer id",
        "Host",
        "Client id",
        title="Offsets",
        title_justify="left",
    )
    for row in described.offsets:
        offsets.add_row(
            row["topic"],
            str(row["partition"]),
            _dash(row["current_offset"]),
            _dash(row["log_end_offset"]),
            _dash(row["lag"]),
            _dash(row["member_id"]),
            _dash(row["host"]),
            _dash(row["client_id"]),
        )
    out_console.print(offsets)
    if not described.members:
        out_console.print(f"Consumer group '{described.group}' has no active members.")
        return
    members = make_table(
        "Consumer id",
        "Group instance id",
        "Host",
        "Client id",
        "#Partitions",
        "Assignment",
        title="Members",
        title_justify="left",
    )
    for member in described.members:
        members.add_row(
            member["member_id"],
            _dash(member["group_instance_id"]),
            member["host"],
            member["client_id"],
            str(len(member["assignment"])),
            ", ".join(f"{t}-{p}" for t, p in member["assignment"]) or "-",
        )
    out_console.print(members)


@groups_group.command("describe")
@click.argument("groups", nargs=-1, required=True)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@client_options
def describe_command(client: ClientOptions, groups: tuple[str, ...], fmt: str) -> None:
    """Describe GROUPS: state, members and assignments, committed offsets, log end offsets and lag."""
    admin = client.admin()
    client.cluster_metadata(admin)
    described = [describe(client, admin, group) for group in groups]
    if fmt == "json":
        out_console.print_json(json.dumps([d.as_json() for d in described]))
        return
    for item in described:
        _print_described(item)


# ---- delete ------------------------------------------------------------------------------------------


_DELETE_ERRORS = {
    "GROUP_ID_NOT_FOUND": "it does not exist",
    "NON_EMPTY_GROUP": "it has active members (stop its consumers first)",
}


@groups_group.command("delete")
@click.argument("groups", nargs=-1, required=True)
@client_options
def delete_command(client: ClientOptions, groups: tuple[str, ...]) -> None:
    """Delete GROUPS (empty groups only) and their committed offsets."""
    from confluent_kafka import KafkaException

    admin = client.admin()
    client.cluster_metadata(admin)
    futures = admin.delete_consumer_groups(list(groups), request_timeout=client.timeout)
    failed = 0
    for group in groups:
        try:
            futures[group].result(timeout=client.timeout + 5)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            name = str(error.name()) if error is not None and hasattr(error, "name") else ""
            reason = _DELETE_ERRORS.get(name) or kafka_error_text(exc)
            print_error(f"cannot delete group {group!r}: {reason}")
            failed += 1
            continue
        except TimeoutError:
            client.unreachable("request timed out")
        err_console.print(f"Deleted group {group}.")
    if failed:
        raise SystemExit(1)


# ---- reset-offsets -----------------------------------------------------------------------------------


def _parse_topic(text: str) -> tuple[str, list[int] | None]:
    """``topic`` or ``topic:0,2,5``."""
    topic, sep, rest = text.partition(":")
    if not topic:
        raise click.BadParameter(f"{text!r}: expected TOPIC or TOPIC:PARTITION,...", param_hint="--topic")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in rest.split(",") if p.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r}: partitions must be integers", param_hint="--topic") from None
    if not partitions:
        raise click.BadParameter(f"{text!r}: no partitions after ':'", param_hint="--topic")
    return topic, partitions


def _partitions_to_reset(
    client: ClientOptions,
    admin: AdminClient,
    topics: tuple[str, ...],
    all_topics: bool,
    committed: dict[tuple[str, int], int],
) -> list[tuple[str, int]]:
    if all_topics:
        if not committed:
            fail("--all-topics: the group has no committed offsets")
        return sorted(committed)
    metadata = client.cluster_metadata(admin)
    chosen: set[tuple[str, int]] = set()
    for text in topics:
        topic, partitions = _parse_topic(text)
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            fail(f"unknown topic {topic!r}")
        existing = set(meta.partitions)
        for p in partitions if partitions is not None else sorted(existing):
            if p not in existing:
                fail(f"topic {topic!r} has no partition {p}")
            chosen.add((topic, p))
    return sorted(chosen)


@groups_group.command("reset-offsets")
@click.argument("group")
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="Topic (all its partitions, or the listed ones) to reset (repeatable).",
)
@click.option("--all-topics", is_flag=True, help="Every partition the group has committed offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-datetime", metavar="MS|ISO-8601", help="Reset to the first offset at or after this time.")
@click.option("--to-offset", type=int, metavar="OFFSET", help="Reset to this offset.")
@click.option("--shift-by", type=int, metavar="N", help="Move the committed offset by N (negative: back).")
@click.option("--execute", is_flag=True, help="Apply the new offsets (default: only show them).")
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@client_options
def reset_offsets_command(
    client: ClientOptions,
    group: str,
    topics: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
    execute: bool,
    fmt: str,
) -> None:
    """Reset the committed offsets of GROUP (a dry run unless --execute; the group must be inactive)."""
    chosen = [
        name
        for name, given in (
            ("--to-earliest", to_earliest),
            ("--to-latest", to_latest),
            ("--to-datetime", to_datetime is not None),
            ("--to-offset", to_offset is not None),
            ("--shift-by", shift_by is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by"
        )
    if bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    timestamp = parse_timestamp(to_datetime) if to_datetime is not None else None

    admin = client.admin()
    client.cluster_metadata(admin)
    description = _describe_group(client, admin, group)
    state = state_name(description.state)
    if state not in _INACTIVE:
        fail(
            f"cannot reset offsets of group {group!r}: it is {state} with {len(description.members)} "
            f"member(s); offsets can only be reset while the group is inactive (stop its consumers first)"
        )
    committed = _committed(client, admin, group)
    partitions = _partitions_to_reset(client, admin, topics, all_topics, committed)
    earliest = _earliest(client, admin, partitions)
    latest = _latest(client, admin, partitions)
    if to_earliest:
        wanted = dict(earliest)
    elif to_latest:
        wanted = dict(latest)
    elif timestamp is not None:
        from tidelog.cli._kafka import OffsetSpec

        found = _list_offsets(
            client, admin, partitions, OffsetSpec.for_timestamp(timestamp), "offsets by time"
        )
        wanted = {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
    elif to_offset is not None:
        wanted = dict.fromkeys(partitions, to_offset)
    else:
        assert shift_by is not None
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            fail(
                "cannot shift partitions without a committed offset: "
                + ", ".join(f"{t}-{p}" for t, p in missing)
            )
        wanted = {tp: committed[tp] + shift_by for tp in partitions}
    # Kafka's tool clamps every new offset into the partition's log.
    new = {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in wanted.items()}
    rows: list[_ResetRow] = [
        {"topic": t, "partition": p, "current_offset": committed.get((t, p)), "new_offset": new[(t, p)]}
        for t, p in partitions
    ]
    if execute:
        _alter(client, admin, group, new)
    if fmt == "json":
        out_console.print_json(json.dumps({"group": group, "executed": execute, "offsets": rows}))
    else:
        title = "New offsets" if execute else "New offsets (dry run: nothing changed; --execute applies them)"
        table = make_table("Group", "Topic", "Partition", "Current offset", "New offset", title=title)
        for row in rows:
            table.add_row(
                group,
                row["topic"],
                str(row["partition"]),
                _dash(row["current_offset"]),
                str(row["new_offset"]),
            )
        out_console.print(table)
    if execute:
        err_console.print(f"Reset {len(rows)} partition(s) of group {group}.")


_RESET_CHUNK = 200
"""Partitions per OffsetCommit when resetting: many partitions go in several requests (the bar advances)."""


def _alter(
    client: ClientOptions, admin: AdminClient, group: str, offsets: dict[tuple[str, int], int]
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    items = sorted(offsets.items())
    chunks = [items[i : i + _RESET_CHUNK] for i in range(0, len(items), _RESET_CHUNK)]
    with progress_bar("partitions", show=show_progress() and len(chunks) > 1) as bar:
        task = bar.add_task(f"resetting {group}", total=len(items))
        for chunk in chunks:
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in chunk])
            futures = admin.alter_consumer_group_offsets([request], request_timeout=client.timeout)
            result = wait_result(client, futures[group], f"cannot reset offsets of group {group!r}")
            for tp in result.topic_partitions:
                if tp.error is not None:
                    fail(
                        f"cannot reset {tp.topic}-{tp.partition} of group {group!r}: {kafka_error_text(tp.error)}"
                    )
            bar.advance(task, len(chunk))
