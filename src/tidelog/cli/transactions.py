"""``tidelog transactions list|describe`` (the jobs of ``kafka-transactions.sh list`` and ``describe``);
the group also holds ``describe-producers``, ``find-hanging`` and ``abort``
(:mod:`tidelog.cli.transactions_hanging`).

confluent-kafka's AdminClient has no ListTransactions/DescribeTransactions, so these commands speak the
protocol themselves (:mod:`tidelog.client.wire`, tidelog's codec): ``list`` asks every broker of the cluster
(Metadata) for the transactions it coordinates; ``describe`` finds each transactional id's coordinator
(FindCoordinator, key type TRANSACTION) and asks it.

Invariants:
- ``list`` shows transactional id, coordinator, producer id and state, sorted by transactional id;
  ``--state`` and ``--producer-id`` filter on the broker (unknown state names are refused before any
  request), ``--min-duration`` keeps transactions running longer than that (ListTransactions v1).
- ``describe`` shows state, producer id and epoch, timeout, start time and duration of the current
  transaction, and its partitions; an unknown transactional id is an error (exit 1) naming it, as in
  Kafka's tool; several ids are described in order, all before the error exit.
- An unreachable broker is ``Error: cannot reach broker ...`` (exit 1), never a traceback; ``-X`` (a
  librdkafka property) is refused here with exit 2, as these commands do not use librdkafka.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console, print_error
from tidelog.cli._common import table as make_table
from tidelog.cli._txn_wire import describe_transaction, no_librdkafka_properties, open_wire
from tidelog.cli.transactions_hanging import abort_command, describe_producers_command, find_hanging_command
from tidelog.protocol.errors import ErrorCode

if TYPE_CHECKING:  # the codec loads the generated messages (~0.3 s): imported when a command runs
    from tidelog.client.wire import WireClient

__all__ = ["transactions_group"]

STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
    "Dead",
)


@click.group("transactions")
def transactions_group() -> None:
    """List and describe transactions; find and abort hanging ones (open on a partition, never ended)."""


transactions_group.add_command(describe_producers_command)
transactions_group.add_command(find_hanging_command)
transactions_group.add_command(abort_command)


# ---- list --------------------------------------------------------------------------------------------


@dataclass
class _Listed:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@transactions_group.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(STATES, case_sensitive=False),
    help="Only transactions in this state (repeatable).",
)
@click.option(
    "--producer-id", "producer_ids", multiple=True, type=int, help="Only this producer id (repeatable)."
)
@click.option(
    "--min-duration",
    "min_duration_ms",
    type=click.IntRange(min=0),
    default=None,
    metavar="MS",
    help="Only transactions running longer than MS milliseconds.",
)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "plain", "json"]), default="table", show_default=True
)
@client_options
def list_command(
    client: ClientOptions,
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    min_duration_ms: int | None,
    fmt: str,
) -> None:
    """List the transactions every broker coordinates."""
    from tidelog.client.wire import WireError
    from tidelog.protocol.messages import (
        ListTransactionsRequest,
        ListTransactionsResponse,
        MetadataRequest,
        MetadataResponse,
    )

    no_librdkafka_properties(client)
    canonical = {s.lower(): s for s in STATES}
    request = ListTransactionsRequest(
        state_filters=[canonical[s.lower()] for s in states],
        producer_id_filters=list(producer_ids),
        duration_filter=-1 if min_duration_ms is None else min_duration_ms,
    )
    listed: list[_Listed] = []
    with open_wire(client) as bootstrap:
        try:
            metadata = bootstrap.call(
                MetadataRequest(topics=[]),
                bootstrap.version_for(MetadataRequest, 12),
                expect=MetadataResponse,
            )
            brokers = [(b.node_id, b.host, b.port) for b in metadata.brokers]
            for node_id, host, port in sorted(brokers):
                with open_wire(client, f"{host}:{port}") as wire:
                    version = wire.version_for(ListTransactionsRequest)
                    if min_duration_ms is not None and version < 1:
                        fail(f"broker {node_id} cannot filter by duration (ListTransactions v1 needed)")
                    response = wire.call(request, version, expect=ListTransactionsResponse)
                    if response.error_code != ErrorCode.NONE:
                        fail(
                            f"cannot list transactions of broker {node_id}: {ErrorCode.name_of(response.error_code)}"
                        )
                    listed.extend(
                        _Listed(t.transactional_id, node_id, t.producer_id, t.transaction_state)
                        for t in response.transaction_states
                    )
        except WireError as exc:
            fail(str(exc))
    listed.sort(key=lambda t: (t.transactional_id, t.coordinator))
    if fmt == "json":
        out_console.print_json(json.dumps([asdict(t) for t in listed]))
    elif fmt == "plain":
        for t in listed:
            click.echo(t.transactional_id)
    else:
        table = make_table(
            "Transactional Id",
            "Coordinator",
            "Producer Id",
            "State",
            title=f"{len(listed)} transaction(s) on {client.bootstrap_server}",
        )
        for t in listed:
            table.add_row(t.transactional_id, str(t.coordinator), str(t.producer_id), t.state)
        out_console.print(table)


# ---- describe ----------------------------------------------------------------------------------------


@dataclass
class _Described:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None
    duration_ms: int | None
    partitions: list[str] = field(default_factory=list)


def _describe_one(client: ClientOptions, wire: WireClient, transactional_id: str) -> _Described | str:
    """The description, or the error text for this id."""
    node_id, state = describe_transaction(client, wire, transactional_id)
    error = state.error_code
    if error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return f"transactional id {transactional_id!r} not found"
    if error != ErrorCode.NONE:
        return f"cannot describe {transactional_id!r}: {ErrorCode.name_of(error)}"
    started = state.transaction_start_time_ms if state.transaction_start_time_ms >= 0 else None
    return _Described(
        transactional_id=transactional_id,
        coordinator=node_id,
        state=state.transaction_state,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        timeout_ms=state.transaction_timeout_ms,
        start_time_ms=started,
        duration_ms=None if started is None else max(int(time.time() * 1000) - started, 0),
        partitions=[f"{t.topic}-{p}" for t in state.topics for p in t.partitions],
    )


@transactions_group.command("describe")
@click.argument("transactional_ids", nargs=-1, required=True)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@client_options
def describe_command(client: ClientOptions, transactional_ids: tuple[str, ...], fmt: str) -> None:
    """Describe the current transaction of each TRANSACTIONAL_ID."""
    from tidelog.client.wire import WireError

    no_librdkafka_properties(client)
    described: list[_Described] = []
    errors: list[str] = []
    with open_wire(client) as wire:
        for transactional_id in dict.fromkeys(transactional_ids):
            try:
                outcome = _describe_one(client, wire, transactional_id)
            except WireError as exc:
                fail(str(exc))
            if isinstance(outcome, str):
                errors.append(outcome)
            else:
                described.append(outcome)
    if fmt == "json":
        out_console.print_json(json.dumps([asdict(d) for d in described]))
    elif described:
        table = make_table(
            "Transactional Id",
            "Coordinator",
            "State",
            "Producer Id",
            "Epoch",
            "Timeout (ms)",
            "Started",
            "Duration (ms)",
            "Partitions",
            title="Transactions",
        )
        for d in described:
            started = (
                "-"
                if d.start_time_ms is None
                else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.start_time_ms / 1000))
            )
            table.add_row(
                d.transactional_id,
                str(d.coordinator),
                d.state,
                str(d.producer_id),
                str(d.producer_epoch),
                str(d.timeout_ms),
                started,
                "-" if d.duration_ms is None else str(d.duration_ms),
                ", ".join(d.partitions) or "-",
            )
        out_console.print(table)
    for message in errors[:-1]:
        print_error(message)
    if errors:
        fail(errors[-1])
