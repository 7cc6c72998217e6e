"""``tidelog share-groups describe`` (the job of ``kafka-share-groups.sh --describe --members``), over
ShareGroupDescribe with tidelog's own wire client (confluent-kafka's AdminClient has no share-group admin).

Invariants: ``describe`` shows each group's state and epoch, then its members with client id, host, member
epoch and assigned partitions; a group that does not exist is an error (exit 1) naming it, after the groups
before it are shown. An unreachable broker is ``Error: ...`` (exit 1), never a traceback.
"""

from __future__ import annotations

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console
from tidelog.cli._common import table as make_table
from tidelog.cli._txn_wire import no_librdkafka_properties, open_wire

__all__ = ["share_groups_group"]


@click.group("share-groups")
def share_groups_group() -> None:
    """Share groups (KIP-932 queues): describe their members and assignments."""


@share_groups_group.command("describe")
@click.argument("groups", nargs=-1, required=True)
@client_options
def describe_command(groups: tuple[str, ...], client: ClientOptions) -> None:
    """Members of share GROUPS, with their assigned partitions."""
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse

    no_librdkafka_properties(client)
    with open_wire(client) as wire:
        answer = wire.call(
            ShareGroupDescribeRequest(group_ids=list(groups)), 0, expect=ShareGroupDescribeResponse
        )
    missing = []
    for group in answer.groups:
        if group.error_code != ErrorCode.NONE:
            missing.append(f"{group.group_id} ({ErrorCode.name_of(group.error_code)})")
            continue
        table = make_table(
            "member",
            "client id",
            "host",
            "epoch",
            "partitions",
            title=f"share group {group.group_id}: {group.group_state}, epoch {group.group_epoch}",
        )
        for member in sorted(group.members, key=lambda m: m.member_id):
            assigned = ", ".join(
                f"{t.topic_name}:{','.join(str(p) for p in t.partitions)}"
                for t in member.assignment.topic_partitions
            )
            table.add_row(
                member.member_id, member.client_id, member.client_host, str(member.member_epoch), assigned
            )
        out_console.print(table)
    if missing:
        fail(f"share group not found: {', '.join(missing)}")
