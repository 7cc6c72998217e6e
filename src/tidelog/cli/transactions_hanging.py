"""``tidelog transactions describe-producers|find-hanging|abort``: the tools for hanging transactions
(KIP-664, the jobs of ``kafka-transactions.sh`` of the same names).

A *hanging* transaction is one open on a partition (a transactional batch with no COMMIT/ABORT marker
after it) that no transaction coordinator will ever end. It holds the partition's last stable offset back,
so read_committed consumers stall there. These commands speak the protocol themselves
(:mod:`tidelog.cli._txn_wire`): DescribeProducers and WriteTxnMarkers go to the partition's leader.

Invariants (Kafka's ``TransactionsCommand``):

- ``describe-producers`` shows every producer the partition's log knows, by producer id: epoch, the
  coordinator epoch of its last marker, last sequence, last timestamp (ms) and the start offset of its
  open transaction; an absent coordinator epoch or start offset is ``-`` in the table, null in JSON.
- ``find-hanging`` looks at every partition of the user topics (or of ``--topic`` [``--partition``], or
  those with a replica on ``--broker-id``). A *candidate* is a producer with an open transaction whose last
  timestamp is more than ``--max-transaction-timeout`` minutes (default 15, Kafka's) ago; it is hanging
  when no coordinator lists a transactional id for its producer id (ListTransactions on every broker), or
  the id is not found (DescribeTransactions), or the id's transaction does not include that partition.
  Rows are sorted by topic, partition and start offset; finding some is not an error (exit 0).
- ``abort`` finds the producer whose open transaction starts at ``--start-offset`` (DescribeProducers)
  and sends the leader an ABORT marker for its producer id and epoch and its coordinator epoch (0 when it
  has none: a marker from coordinator epoch 0 is never fenced by a producer that saw no marker).
  ``--producer-id`` with ``--producer-epoch`` and ``--coordinator-epoch`` names the producer instead. No
  open transaction at that offset, or a marker the broker refuses, is ``Error: ...`` naming the
  partition (exit 1); bad option combinations exit 2.
- A partition or topic that does not exist is an error naming it (exit 1); Metadata is asked with
  auto-creation off, so no command creates a topic.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import click

from tidelog.cli._common import ClientOptions, client_options, err_console, fail, out_console
from tidelog.cli._common import table as make_table
from tidelog.cli._txn_wire import (
    describe_transaction,
    no_librdkafka_properties,
    open_wire,
    partition_leaders,
)
from tidelog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tidelog.client.wire import WireClient
    from tidelog.protocol.messages import DescribeProducersResponse

__all__ = ["abort_command", "describe_producers_command", "find_hanging_command"]

DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15
"""Kafka's default for ``find-hanging --max-transaction-timeout`` (``transaction.max.timeout.ms``)."""
_MAX_PARTITIONS_PER_REQUEST = 500
"""Kafka's ``FindHangingTransactionsCommand.MAX_BATCH_SIZE``: DescribeProducers asks this many at most."""

_FORMAT = click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)


def _absent(value: int) -> int | None:
    return None if value < 0 else value


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---- the leaders and their producers -----------------------------------------------------------------


@dataclass(frozen=True)
class _Partition:
    topic: str
    partition: int
    leader: str | None
    """host:port of the leader, None when Metadata names none (the bootstrap broker is asked then)."""


def _partitions(
    wire: WireClient, topic: str | None, partition: int | None, broker_id: int | None
) -> list[_Partition]:
    """The partitions to look at: ``topic`` (just ``partition`` if given) or every user topic; only those
    with a replica on ``broker_id`` if given. A topic scan of an unknown topic fails naming it; a single
    partition Metadata does not know is kept (with no leader) for the broker to answer about."""
    brokers, topics = partition_leaders(wire, None if topic is None else [topic])
    found = topics.get(topic) if topic is not None else None
    if topic is not None and partition is not None and broker_id is None:
        known = found.partitions if found is not None and found.error_code == ErrorCode.NONE else []
        leaders = [brokers.get(p.leader_id) for p in known if p.partition_index == partition]
        return [_Partition(topic, partition, leaders[0] if leaders else None)]
    if topic is not None:
        if found is None or found.error_code != ErrorCode.NONE:
            fail(
                f"topic {topic!r}: {'does not exist' if found is None else ErrorCode.name_of(found.error_code)}"
            )
        selected = [(topic, found)]
    else:
        selected = [(name, t) for name, t in sorted(topics.items()) if not t.is_internal]
    return [
        _Partition(name, p.partition_index, brokers.get(p.leader_id))
        for name, t in selected
        for p in sorted(t.partitions, key=lambda p: p.partition_index)
        if (partition is None or p.partition_index == partition)
        and (broker_id is None or broker_id in p.replica_nodes)
    ]


def _describe_producers(
    client: ClientOptions, bootstrap: WireClient, partitions: Iterable[_Partition]
) -> dict[tuple[str, int], list[DescribeProducersResponse.ProducerState]]:
    """The active producers of each partition, asked of its leader; a partition error fails naming it."""
    from tidelog.protocol.messages import DescribeProducersRequest, DescribeProducersResponse

    by_leader: dict[str | None, list[_Partition]] = {}
    for p in partitions:
        by_leader.setdefault(p.leader, []).append(p)
    producers: dict[tuple[str, int], list[DescribeProducersResponse.ProducerState]] = {}
    for leader, wanted in by_leader.items():
        with _leader(client, bootstrap, leader) as wire:
            for start in range(0, len(wanted), _MAX_PARTITIONS_PER_REQUEST):
                chunk = wanted[start : start + _MAX_PARTITIONS_PER_REQUEST]
                topics: dict[str, list[int]] = {}
                for p in chunk:
                    topics.setdefault(p.topic, []).append(p.partition)
                request = DescribeProducersRequest(
                    topics=[
                        DescribeProducersRequest.TopicRequest(name=name, partition_indexes=indexes)
                        for name, indexes in topics.items()
                    ]
                )
                response = wire.call(request, expect=DescribeProducersResponse)
                for t in response.topics:
                    for answer in t.partitions:
                        if answer.error_code != ErrorCode.NONE:
                            detail = f" ({answer.error_message})" if answer.error_message else ""
                            fail(
                                f"cannot describe the producers of partition {t.name}-{answer.partition_index}"
                                f" on {wire.address}: {ErrorCode.name_of(answer.error_code)}{detail}"
                            )
                        producers[(t.name, answer.partition_index)] = list(answer.active_producers)
    return producers


@contextlib.contextmanager
def _leader(client: ClientOptions, bootstrap: WireClient, leader: str | None) -> Iterator[WireClient]:
    """A connection to ``leader`` (the bootstrap one when it is that broker, or when no leader is known:
    the broker then answers with the partition's error)."""
    if leader is None or leader == bootstrap.address:
        yield bootstrap
        return
    with open_wire(client, leader) as wire:
        yield wire


# ---- describe-producers ------------------------------------------------------------------------------


@dataclass
class _Producer:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int | None
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int | None


@click.command("describe-producers")
@click.option("--topic", required=True, help="The topic.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="The partition.")
@_FORMAT
@client_options
def describe_producers_command(client: ClientOptions, topic: str, partition: int, fmt: str) -> None:
    """Show the producers a partition's log knows, with their open transactions."""
    from tidelog.client.wire import WireError

    no_librdkafka_properties(client)
    with open_wire(client) as bootstrap:
        try:
            (target,) = _partitions(bootstrap, topic, partition, None)
        except WireError as exc:
            fail(str(exc))
        states = _describe_producers(client, bootstrap, [target])[(topic, partition)]
    producers = [
        _Producer(
            producer_id=s.producer_id,
            producer_epoch=s.producer_epoch,
            coordinator_epoch=_absent(s.coordinator_epoch),
            last_sequence=s.last_sequence,
            last_timestamp=s.last_timestamp,
            current_txn_start_offset=_absent(s.current_txn_start_offset),
        )
        for s in states
    ]
    if fmt == "json":
        out_console.print_json(json.dumps([asdict(p) for p in producers]))
        return
    table = make_table(
        "Producer Id",
        "Epoch",
        "Coordinator Epoch",
        "Last Sequence",
        "Last Timestamp",
        "Current Txn Start Offset",
        title=f"{len(producers)} producer(s) of {topic}-{partition}",
    )
    for p in producers:
        table.add_row(
            str(p.producer_id),
            str(p.producer_epoch),
            _cell(p.coordinator_epoch),
            str(p.last_sequence),
            str(p.last_timestamp),
            _cell(p.current_txn_start_offset),
        )
    out_console.print(table)


# ---- find-hanging ------------------------------------------------------------------------------------


@dataclass
class _Hanging:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int | None
    start_offset: int
    last_timestamp: int
    duration_min: int


def _transactional_ids(
    client: ClientOptions, bootstrap: WireClient, producer_ids: set[int]
) -> dict[int, str]:
    """producer id -> transactional id, from ListTransactions (filtered by producer id) on every broker."""
    from tidelog.protocol.messages import (
        ListTransactionsRequest,
        ListTransactionsResponse,
        MetadataRequest,
        MetadataResponse,
    )

    metadata = bootstrap.call(
        MetadataRequest(topics=[]), bootstrap.version_for(MetadataRequest, 12), expect=MetadataResponse
    )
    request = ListTransactionsRequest(producer_id_filters=sorted(producer_ids))
    found: dict[int, str] = {}
    for b in sorted(metadata.brokers, key=lambda b: b.node_id):
        with open_wire(client, f"{b.host}:{b.port}") as wire:
            response = wire.call(request, expect=ListTransactionsResponse)
            if response.error_code != ErrorCode.NONE:
                fail(
                    f"cannot list the transactions of broker {b.node_id}: {ErrorCode.name_of(response.error_code)}"
                )
            for listed in response.transaction_states:
                if listed.producer_id in producer_ids:
                    found[listed.producer_id] = listed.transactional_id
    return found


def _coordinator_partitions(
    client: ClientOptions, bootstrap: WireClient, transactional_ids: Iterable[str]
) -> dict[str, set[tuple[str, int]] | None]:
    """transactional id -> the partitions its coordinator has in its transaction (None: id not found)."""
    result: dict[str, set[tuple[str, int]] | None] = {}
    for transactional_id in sorted(set(transactional_ids)):
        _node, state = describe_transaction(client, bootstrap, transactional_id)
        if state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            result[transactional_id] = None
        elif state.error_code != ErrorCode.NONE:
            fail(
                f"cannot describe transactional id {transactional_id!r}: {ErrorCode.name_of(state.error_code)}"
            )
        else:
            result[transactional_id] = {(t.topic, p) for t in state.topics for p in t.partitions}
    return result


@click.command("find-hanging")
@click.option(
    "--max-transaction-timeout",
    "max_timeout_minutes",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
    show_default=True,
    metavar="MINUTES",
    help="Only transactions whose producer wrote nothing for longer than this (the largest "
    "transaction.timeout.ms any producer may use).",
)
@click.option("--topic", default=None, help="Only this topic (default: every topic but the internal ones).")
@click.option("--partition", type=click.IntRange(min=0), default=None, help="Only this partition of --topic.")
@click.option("--broker-id", type=int, default=None, help="Only partitions with a replica on this broker.")
@_FORMAT
@client_options
def find_hanging_command(
    client: ClientOptions,
    max_timeout_minutes: int,
    topic: str | None,
    partition: int | None,
    broker_id: int | None,
    fmt: str,
) -> None:
    """Find transactions left open on a partition that no coordinator will end."""
    from tidelog.client.wire import WireError

    no_librdkafka_properties(client)
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    max_timeout_ms = max_timeout_minutes * 60_000
    hanging: list[_Hanging] = []
    with open_wire(client) as bootstrap:
        try:
            partitions = _partitions(bootstrap, topic, partition, broker_id)
            producers = _describe_producers(client, bootstrap, partitions)
            now = int(time.time() * 1000)
            candidates = [
                (tp, s)
                for tp, states in producers.items()
                for s in states
                if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_timeout_ms
            ]
            if candidates:
                ids = _transactional_ids(client, bootstrap, {s.producer_id for _, s in candidates})
                ongoing = _coordinator_partitions(client, bootstrap, ids.values())
                for tp, s in candidates:
                    transactional_id = ids.get(s.producer_id)
                    in_transaction = ongoing.get(transactional_id) if transactional_id is not None else None
                    if in_transaction is not None and tp in in_transaction:
                        continue  # the coordinator will write this partition's marker
                    hanging.append(
                        _Hanging(
                            topic=tp[0],
                            partition=tp[1],
                            producer_id=s.producer_id,
                            producer_epoch=s.producer_epoch,
                            coordinator_epoch=_absent(s.coordinator_epoch),
                            start_offset=s.current_txn_start_offset,
                            last_timestamp=s.last_timestamp,
                            duration_min=(now - s.last_timestamp) // 60_000,
                        )
                    )
        except WireError as exc:
            fail(str(exc))
    hanging.sort(key=lambda h: (h.topic, h.partition, h.start_offset))
    if fmt == "json":
        out_console.print_json(json.dumps([asdict(h) for h in hanging]))
        return
    table = make_table(
        "Topic",
        "Partition",
        "Producer Id",
        "Epoch",
        "Coordinator Epoch",
        "Start Offset",
        "Last Timestamp",
        "Duration (min)",
        title=f"{len(hanging)} hanging transaction(s)",
    )
    for h in hanging:
        table.add_row(
            h.topic,
            str(h.partition),
            str(h.producer_id),
            str(h.producer_epoch),
            _cell(h.coordinator_epoch),
            str(h.start_offset),
            str(h.last_timestamp),
            str(h.duration_min),
        )
    out_console.print(table)


# ---- abort -------------------------------------------------------------------------------------------


@click.command("abort")
@click.option("--topic", required=True, help="The topic.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="The partition.")
@click.option(
    "--start-offset",
    type=click.IntRange(min=0),
    default=None,
    help="First offset of the open transaction to abort (its producer is looked up).",
)
@click.option("--producer-id", type=click.IntRange(min=0), default=None, help="Or: the producer id ...")
@click.option(
    "--producer-epoch", type=click.IntRange(0, 32767), default=None, help="... its producer epoch ..."
)
@click.option("--coordinator-epoch", type=int, default=None, help="... and coordinator epoch.")
@client_options
def abort_command(
    client: ClientOptions,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
) -> None:
    """Abort a hanging transaction on one partition (writes an ABORT marker)."""
    from tidelog.client.wire import WireError

    no_librdkafka_properties(client)
    given: tuple[int, int, int] | None = None
    if producer_id is not None:
        if start_offset is not None:
            raise click.UsageError("give either --start-offset or --producer-id, not both")
        if producer_epoch is None or coordinator_epoch is None:
            raise click.UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
        given = (producer_id, producer_epoch, coordinator_epoch)
    elif start_offset is None:
        raise click.UsageError(
            "name the transaction with --start-offset, or with --producer-id, --producer-epoch and "
            "--coordinator-epoch"
        )
    elif producer_epoch is not None or coordinator_epoch is not None:
        raise click.UsageError("--producer-epoch and --coordinator-epoch go with --producer-id")
    name = f"{topic}-{partition}"
    with open_wire(client) as bootstrap:
        try:
            (target,) = _partitions(bootstrap, topic, partition, None)
            if given is None:
                assert start_offset is not None
                given = _open_transaction_at(client, bootstrap, target, start_offset)
            pid, epoch, coordinator = given
            with _leader(client, bootstrap, target.leader) as wire:
                error = _write_abort_marker(wire, target, pid, epoch, max(coordinator, 0))
        except WireError as exc:
            fail(str(exc))
    what = f"the transaction of producer {pid} (epoch {epoch}) on partition {name}"
    if error != ErrorCode.NONE:
        fail(f"cannot abort {what}: {ErrorCode.name_of(error)}")
    err_console.print(f"Aborted {what}.")


def _open_transaction_at(
    client: ClientOptions, bootstrap: WireClient, target: _Partition, start_offset: int
) -> tuple[int, int, int]:
    """(producer id, epoch, coordinator epoch) of the producer whose open transaction starts there."""
    states = _describe_producers(client, bootstrap, [target])[(target.topic, target.partition)]
    found = next((s for s in states if s.current_txn_start_offset == start_offset), None)
    if found is None:
        fail(
            f"no open transaction starts at offset {start_offset} of partition {target.topic}-{target.partition}"
        )
    return found.producer_id, found.producer_epoch, found.coordinator_epoch


def _write_abort_marker(
    wire: WireClient, target: _Partition, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> int:
    """Send the partition's leader an ABORT marker; returns the partition's error code."""
    from tidelog.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=False,
        topics=[
            WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                name=target.topic, partition_indexes=[target.partition]
            )
        ],
        coordinator_epoch=coordinator_epoch,
    )
    response = wire.call(WriteTxnMarkersRequest(markers=[marker]), expect=WriteTxnMarkersResponse)
    (error,) = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
    return int(error)
