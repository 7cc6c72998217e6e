"""Share group pages (KIP-932 queues): the list, and one group's members, share-partitions and held records.

Invariants: reads only (ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets with tidelog's pending
tag, ListOffsets), through :mod:`tidelog.client.share_groups` as ``tidelog share-groups`` reads them; resets
and deletes are left to that command. Each share-partition shows its start offset and the log's end: the
records from one to the other are the group's backlog (those held in flight included). The group id
travels as a query parameter (any string is a legal group id).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from tidelog.client.share_groups import (
    Connect,
    ShareGroupNotFoundError,
    describe_share_group,
    list_share_groups,
    pending_records,
)
from tidelog.client.wire import WireClient, WireError
from tidelog.console.kafka import BadRequestError, ConsoleError, NotFoundError
from tidelog.console.web import ConsoleState, page, state
from tidelog.console.wire import wire_connection, wire_security

__all__ = ["SharePartitionRow", "share_group_detail", "share_groups"]


@dataclass(frozen=True)
class SharePartitionRow:
    topic: str
    partition: int
    start: int
    end: int
    """The log end offset; -1 when the leader could not say."""
    backlog: int | None
    held: int


def _connector(console: ConsoleState) -> tuple[list[str], Connect]:
    cluster = console.gateway.cluster(with_offsets=False)
    addresses = [f"{b.host}:{b.port}" for b in cluster.brokers]
    if not addresses:
        raise ConsoleError("the cluster lists no brokers")
    security = wire_security(console.gateway.settings)
    timeout = console.gateway.timeout

    @contextmanager
    def connect(address: str) -> Iterator[WireClient]:
        host, _, port = address.rpartition(":")
        with wire_connection(host, int(port), timeout, security) as connection:
            yield connection

    return addresses, connect


def share_groups(request: Request) -> Response:
    console = state(request)
    addresses, connect = _connector(console)
    try:
        groups = list_share_groups(addresses, connect)
    except WireError as exc:
        raise ConsoleError(str(exc)) from None
    return page(request, "share_groups.html", groups=groups)


def share_group_detail(request: Request) -> Response:
    console = state(request)
    group_id = request.query_params.get("id")
    if not group_id:
        raise BadRequestError("no group id")
    addresses, connect = _connector(console)
    with connect(addresses[0]) as bootstrap:
        try:
            group = describe_share_group(bootstrap, group_id, connect)
            held = pending_records(bootstrap, group_id, connect)
        except ShareGroupNotFoundError as exc:
            raise NotFoundError(str(exc)) from None
        except WireError as exc:
            raise ConsoleError(str(exc)) from None
    ends = console.gateway.watermarks((t, p) for t, p, _start in group.start_offsets)
    partitions = []
    for t, p, start in group.start_offsets:
        end = ends.get((t, p), (-1, -1))[1]
        held_here = sum(r.last_offset - r.first_offset + 1 for r in held if (r.topic, r.partition) == (t, p))
        backlog = max(0, end - start) if end >= 0 and start >= 0 else None
        partitions.append(SharePartitionRow(t, p, start, end, backlog, held_here))
    held_count = sum(r.last_offset - r.first_offset + 1 for r in held)
    return page(
        request, "share_group.html", group=group, partitions=partitions, held=held, held_count=held_count
    )
