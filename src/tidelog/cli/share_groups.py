"""``tidelog share-groups list|describe|pending|reset-offsets|delete`` (the jobs of ``kafka-share-groups.sh``,
plus Redis's XPENDING), over tidelog's own wire client: confluent-kafka's AdminClient has no share-group
admin.

Invariants:
- ``list`` prints the share groups' ids, one a line, sorted (ListGroups v5, type ``share``).
- ``describe`` shows each group's state and epoch, then its members with client id, host, member epoch and
  assigned partitions, then each share-partition's start offset (DescribeShareGroupOffsets); a group that
  does not exist is an error (exit 1) naming it, after the groups before it are shown.
- ``pending`` shows the acquired records (DescribeShareGroupOffsets with tidelog's pending tag, see
  :mod:`tidelog.protocol.share_pending`): offsets, member, delivery count, lock time left.
- ``reset-offsets`` computes new start offsets (earliest, latest, a time, an exact offset, clamped into the
  log as Kafka's tool does) and only shows them unless ``--execute`` (AlterShareGroupOffsets); it refuses
  (exit 1, nothing changed) while the group has members.
- ``delete`` deletes a share group without members and its state (DeleteGroups), and refuses a group id
  that is not a share group's.
In a cluster any broker may be the bootstrap one: group-level requests (ShareGroupDescribe, Describe- and
AlterShareGroupOffsets, DeleteGroups) go to the group's coordinator (FindCoordinator, key type GROUP),
``list`` asks every broker (ListGroups answers a broker's own groups) and merges, ListOffsets and ``pending``
ask each partition's leader (acquired records live on the share-partition leaders).
An unreachable broker is ``Error: ...`` (exit 1), never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console
from tidelog.cli._common import table as make_table
from tidelog.cli._txn_wire import (
    no_librdkafka_properties,
    open_wire,
    partition_leaders,
)

if TYPE_CHECKING:  # the codec loads the generated messages: imported when a command runs
    from tidelog.client.share_groups import Connect
    from tidelog.client.wire import WireClient

__all__ = ["share_groups_group"]


@click.group("share-groups")
def share_groups_group() -> None:
    """Share groups (KIP-932 queues): list, describe, pending records, reset offsets, delete."""


def _connect(client: ClientOptions) -> Connect:
    """Opens connections to other brokers as the command's bootstrap one (``fail`` when one cannot)."""

    def connect(address: str) -> WireClient:
        return open_wire(client, address)

    return connect


@share_groups_group.command("list")
@client_options
def list_command(client: ClientOptions) -> None:
    """The share groups' ids, one a line."""
    from tidelog.client.share_groups import list_share_groups
    from tidelog.client.wire import WireError

    no_librdkafka_properties(client)
    with open_wire(client) as wire:
        brokers, _topics = partition_leaders(wire, [])
    try:
        found = list_share_groups(brokers.values(), _connect(client))
    except WireError as exc:
        fail(str(exc))
    for group_id in found:
        click.echo(group_id)


@contextmanager
def _coordinator(client: ClientOptions, wire: WireClient, group: str) -> Iterator[WireClient]:
    """A connection to ``group``'s coordinator (``wire`` itself when it is the one)."""
    from tidelog.client.share_groups import coordinator_of
    from tidelog.client.wire import WireError

    try:
        with coordinator_of(wire, group, _connect(client)) as coordinator:
            yield coordinator
    except WireError as exc:
        fail(str(exc))


@share_groups_group.command("describe")
@click.argument("groups", nargs=-1, required=True)
@client_options
def describe_command(groups: tuple[str, ...], client: ClientOptions) -> None:
    """Members of share GROUPS, with their assigned partitions, and the share-partitions' start offsets."""
    from tidelog.client.share_groups import ShareGroupNotFoundError, describe_share_group
    from tidelog.client.wire import WireError
    from tidelog.protocol.errors import ErrorCode

    no_librdkafka_properties(client)
    missing: list[str] = []
    for group_id in groups:
        with open_wire(client) as bootstrap:
            try:
                group = describe_share_group(bootstrap, group_id, _connect(client))
            except ShareGroupNotFoundError as exc:
                missing.append(f"{exc.group_id} ({ErrorCode.name_of(exc.error_code)})")
                continue
            except WireError as exc:
                fail(str(exc))
        table = make_table(
            "member",
            "client id",
            "host",
            "epoch",
            "partitions",
            title=f"share group {group.group_id}: {group.state}, epoch {group.epoch}",
        )
        for member in group.members:
            assigned = ", ".join(f"{t}:{','.join(str(p) for p in ps)}" for t, ps in member.assignment)
            table.add_row(
                member.member_id, member.client_id, member.client_host, str(member.member_epoch), assigned
            )
        out_console.print(table)
        if group.start_offsets:
            starts = make_table(
                "topic", "partition", "start offset", title=f"start offsets of {group.group_id}"
            )
            for topic, partition, start in group.start_offsets:
                starts.add_row(topic, str(partition), str(start))
            out_console.print(starts)
    if missing:
        fail(f"share group not found: {', '.join(missing)}")


@share_groups_group.command("pending")
@click.argument("group")
@click.option("--topic", "-t", "topic", metavar="TOPIC", help="Only this topic's share-partitions.")
@client_options
def pending_command(group: str, topic: str | None, client: ClientOptions) -> None:
    """Records of GROUP acquired by its members and not yet acknowledged (Redis's XPENDING)."""
    from tidelog.client.share_groups import pending_records
    from tidelog.client.wire import WireError

    no_librdkafka_properties(client)
    with open_wire(client) as bootstrap:
        try:
            found = pending_records(bootstrap, group, _connect(client), topic=topic)
        except WireError as exc:
            fail(str(exc))
    table = make_table(
        "topic",
        "partition",
        "offsets",
        "member",
        "deliveries",
        "lock left",
        title=f"pending records of {group}",
    )
    for r in found:
        span = str(r.first_offset) if r.first_offset == r.last_offset else f"{r.first_offset}-{r.last_offset}"
        table.add_row(
            r.topic,
            str(r.partition),
            span,
            r.member_id,
            str(r.delivery_count),
            f"{r.lock_remaining_ms / 1000:.1f} s",
        )
    out_console.print(table)


def _partition_count(wire: WireClient, topic: str) -> int:
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import MetadataRequest, MetadataResponse

    meta = wire.call(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
        12,
        expect=MetadataResponse,
    )
    found = meta.topics[0] if meta.topics else None
    if found is None or found.error_code != ErrorCode.NONE:
        fail(f"unknown topic {topic!r}")
    return len(found.partitions)


def _parse_topic(wire: WireClient, text: str) -> tuple[str, list[int]]:
    """``topic`` (all its partitions) or ``topic:0,2``."""
    topic, sep, rest = text.partition(":")
    if not topic:
        raise click.BadParameter(f"{text!r}: expected TOPIC or TOPIC:PARTITION,...", param_hint="--topic")
    count = _partition_count(wire, topic)
    if not sep:
        return topic, list(range(count))
    try:
        partitions = sorted({int(p) for p in rest.split(",") if p.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r}: partitions must be integers", param_hint="--topic") from None
    for p in partitions:
        if not 0 <= p < count:
            fail(f"topic {topic!r} has no partition {p}")
    return topic, partitions


def _list_offsets(
    client: ClientOptions, bootstrap: WireClient, chosen: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    """ListOffsets at ``timestamp`` (-2 earliest, -1 latest) for each partition, asked of its leader."""
    brokers, metadata = partition_leaders(bootstrap, sorted({t for t, _p in chosen}))
    leaders = {(t, p.partition_index): p.leader_id for t, info in metadata.items() for p in info.partitions}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp in chosen:
        leader = leaders.get(tp, -1)
        if leader not in brokers:
            fail(f"cannot look up offsets of {tp[0]}-{tp[1]}: no leader")
        by_leader.setdefault(leader, []).append(tp)
    found: dict[tuple[str, int], int] = {}
    for leader, led in sorted(by_leader.items()):
        with open_wire(client, brokers[leader]) as wire:
            found.update(_list_offsets_at(wire, led, timestamp))
    return found


def _list_offsets_at(
    wire: WireClient, chosen: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

    by_topic: dict[str, list[int]] = {}
    for t, p in chosen:
        by_topic.setdefault(t, []).append(p)
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=t,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for p in ps
                ],
            )
            for t, ps in by_topic.items()
        ],
    )
    answer = wire.call(request, 7, expect=ListOffsetsResponse)
    found = {}
    for answered in answer.topics:
        for at in answered.partitions:
            if at.error_code != ErrorCode.NONE:
                fail(
                    f"cannot look up offsets of {answered.name}-{at.partition_index}: "
                    f"{ErrorCode.name_of(at.error_code)}"
                )
            found[(answered.name, at.partition_index)] = at.offset
    return found


@share_groups_group.command("reset-offsets")
@click.option("--group", "-g", required=True, help="The share group.")
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    required=True,
    metavar="TOPIC[:P,...]",
    help="Topic (all its partitions, or the listed ones) to reset (repeatable).",
)
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-datetime", metavar="MS|ISO-8601", help="Reset to the first offset at or after this time.")
@click.option("--to-offset", type=int, metavar="OFFSET", help="Reset to this offset.")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Apply the new offsets.")
@client_options
def reset_offsets_command(
    client: ClientOptions,
    group: str,
    topics: tuple[str, ...],
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    dry_run: bool,
    execute: bool,
) -> None:
    """Reset the start offsets of share GROUP (a dry run unless --execute; the group must have no members)."""
    from tidelog.cli.consume import parse_timestamp
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsResponse,
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
    )

    given = [to_earliest, to_latest, to_datetime is not None, to_offset is not None]
    if sum(given) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset")
    if dry_run and execute:
        raise click.UsageError("give --dry-run or --execute, not both")
    timestamp = parse_timestamp(to_datetime) if to_datetime is not None else None
    no_librdkafka_properties(client)
    with open_wire(client) as bootstrap, _coordinator(client, bootstrap, group) as wire:
        described = wire.call(
            ShareGroupDescribeRequest(group_ids=[group]), 0, expect=ShareGroupDescribeResponse
        )
        members = described.groups[0].members if described.groups[0].error_code == ErrorCode.NONE else []
        if members:
            fail(
                f"cannot reset offsets of share group {group!r}: it has {len(members)} member(s); "
                "offsets can only be reset while the group has none (stop its consumers first)"
            )
        chosen = sorted({(t, p) for text in topics for t, ps in [_parse_topic(wire, text)] for p in ps})
        earliest = _list_offsets(client, bootstrap, chosen, -2)
        latest = _list_offsets(client, bootstrap, chosen, -1)
        if to_earliest:
            wanted = dict(earliest)
        elif to_latest:
            wanted = dict(latest)
        elif timestamp is not None:
            wanted = {
                tp: (o if o >= 0 else latest[tp])
                for tp, o in _list_offsets(client, bootstrap, chosen, timestamp).items()
            }
        else:
            assert to_offset is not None
            wanted = dict.fromkeys(chosen, to_offset)
        new = {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in wanted.items()}
        if execute:
            by_topic: dict[str, list[int]] = {}
            for t, p in chosen:
                by_topic.setdefault(t, []).append(p)
            request = AlterShareGroupOffsetsRequest(
                group_id=group,
                topics=[
                    AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(
                        topic_name=t,
                        partitions=[
                            AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition(
                                partition_index=p, start_offset=new[(t, p)]
                            )
                            for p in ps
                        ],
                    )
                    for t, ps in by_topic.items()
                ],
            )
            answer = wire.call(request, 0, expect=AlterShareGroupOffsetsResponse)
            if answer.error_code != ErrorCode.NONE:
                fail(f"cannot reset offsets of share group {group!r}: {ErrorCode.name_of(answer.error_code)}")
            for result in answer.responses:
                for refused in result.partitions:
                    if refused.error_code != ErrorCode.NONE:
                        fail(
                            f"cannot reset {result.topic_name}-{refused.partition_index} of share group "
                            f"{group!r}: {ErrorCode.name_of(refused.error_code)}"
                        )
    title = (
        "New start offsets"
        if execute
        else "New start offsets (dry run: nothing changed; --execute applies them)"
    )
    table = make_table("group", "topic", "partition", "new offset", title=title)
    for (t, p), offset in sorted(new.items()):
        table.add_row(group, t, str(p), str(offset))
    out_console.print(table)


@share_groups_group.command("delete")
@click.option("--group", "-g", "groups", multiple=True, required=True, help="A share group (repeatable).")
@client_options
def delete_command(groups: tuple[str, ...], client: ClientOptions) -> None:
    """Delete share groups that have no members, with their state."""
    from tidelog.client.share_groups import share_group_offsets
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse

    no_librdkafka_properties(client)
    results: list[DeleteGroupsResponse.DeletableGroupResult] = []
    with open_wire(client) as bootstrap:
        for group in groups:
            with _coordinator(client, bootstrap, group) as wire:
                found = share_group_offsets(wire, group, topics=[])
            if found.error_code != ErrorCode.NONE:
                fail(f"share group not found: {group} ({ErrorCode.name_of(found.error_code)})")
        for group in groups:  # each at its coordinator
            with _coordinator(client, bootstrap, group) as wire:
                answer = wire.call(DeleteGroupsRequest(groups_names=[group]), 2, expect=DeleteGroupsResponse)
            results.extend(answer.results)
    for result in results:
        if result.error_code == ErrorCode.NON_EMPTY_GROUP:
            fail(f"cannot delete share group {result.group_id!r}: it has members (NON_EMPTY_GROUP)")
        if result.error_code != ErrorCode.NONE:
            fail(f"cannot delete share group {result.group_id!r}: {ErrorCode.name_of(result.error_code)}")
        click.echo(f"Deleted share group {result.group_id}.")
