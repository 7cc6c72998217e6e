"""``tidelog brokers drain ID``: moves every replica off a broker so that it can be stopped (issue 15).

It reads every partition's replicas (internal topics included) and the moves in progress, plans a new
replica list without ID for each partition ID hosts (:mod:`tidelog.cli._drain_plan`), prints the rollback
plan and the plan in Kafka's JSON (``tidelog reassign execute`` / ``kafka-reassign-partitions.sh`` take
both), starts the moves with AlterPartitionReassignments and, with ``--wait`` (the default), follows them
until ID holds no replica.

Invariants:

- ``--dry-run`` sends nothing but reads (Metadata, ListPartitionReassignments).
- A refusal (unknown broker, moves in progress on those partitions, too few other live brokers) is one
  error line, exit 1, and nothing is started. A partition the controller refuses is printed with its reason
  and the command exits 1 after the others were started.
- A move counts as complete when the controller no longer lists it and Metadata shows a replica list
  without ID. Once every move is complete, a partition Metadata still shows led by ID gets a PREFERRED
  election (its first replica is not ID); the command ends with "Broker ID holds no replicas; it can be
  stopped." only when Metadata shows ID neither hosting nor leading anything. If that is not so within
  ``--wait-timeout`` seconds, it exits 1 naming what is left; the moves carry on in the cluster either way.
- Requests go over :mod:`tidelog.client.wire` (the controller's, through ``tidelog reassign``'s helpers);
  only the connection's security properties are taken from ``-X`` / ``--command-config``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console
from tidelog.cli._drain_plan import DrainError, DrainPlan, plan_drain
from tidelog.cli._reassign_plan import format_plan
from tidelog.cli._txn_wire import WIRE_PROPERTIES, open_wire
from tidelog.cli.reassign import _alter, _list, _name, _on_controller, _wire_call

__all__ = ["drain_command"]

TopicPartition = tuple[str, int]

_POLL_SECONDS = 0.5
_SHOWN = 5  # partitions named in a progress line


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """Metadata of every topic: the live brokers with their racks, each partition's replicas and leader."""

    live: dict[int, str | None]
    replicas: dict[TopicPartition, tuple[int, ...]]
    leaders: dict[TopicPartition, int]


@click.command("drain")
@click.argument("broker_id", metavar="ID", type=int)
@click.option("--dry-run", is_flag=True, help="Print the plan and its rollback plan; change nothing.")
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Follow the moves until the broker holds no replica (and leads nothing), or return once started.",
)
@click.option(
    "--wait-timeout",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    help="Seconds --wait follows the moves before giving up (they carry on). --timeout is per request.",
)
@client_options
def drain_command(
    client: ClientOptions, broker_id: int, dry_run: bool, wait: bool, wait_timeout: float
) -> None:
    """Move every replica off broker ID (then it can be stopped)."""
    snapshot = _snapshot(client)
    try:
        plan = plan_drain(broker_id, snapshot.live, snapshot.replicas, _list(client, None))
    except DrainError as exc:
        fail(str(exc))
    if not plan.proposed:
        if dry_run:
            out_console.print(f"Broker {broker_id} holds no replicas: nothing to move.")
        else:
            _finish(client, broker_id, time.monotonic() + wait_timeout)
        return
    _print_plan(plan)
    if dry_run:
        out_console.print(f"Dry run: nothing was moved ({len(plan.proposed)} partitions would be).")
        return
    errors = _alter(client, plan.proposed)
    started = [tp for tp in plan.proposed if tp not in errors]
    if started:
        out_console.print(
            f"Successfully started partition reassignments for {','.join(_name(tp) for tp in started)}"
        )
    if errors:
        fail(
            "Error reassigning partitions: "
            + "; ".join(f"{_name(tp)}: {e}" for tp, e in sorted(errors.items()))
        )
    if not wait:
        out_console.print(
            f"The moves carry on in the cluster: follow them with `tidelog reassign verify` on the plan "
            f"above or `tidelog brokers list`; run `tidelog brokers drain {broker_id}` again once they are "
            "complete."
        )
        return
    deadline = time.monotonic() + wait_timeout
    _follow(client, plan, deadline)
    _finish(client, broker_id, deadline)


def _print_plan(plan: DrainPlan) -> None:
    out_console.print(f"Partitions with a replica on broker {plan.broker_id}: {len(plan.current)}")
    out_console.print("Current partition replica assignment")
    out_console.print()
    out_console.print(format_plan(plan.current), markup=False)
    out_console.print()
    out_console.print("Save this to use as the --reassignment-json-file option during rollback")
    out_console.print("Proposed partition reassignment configuration")
    out_console.print()
    out_console.print(format_plan(plan.proposed), markup=False)
    out_console.print()


def _follow(client: ClientOptions, plan: DrainPlan, deadline: float) -> None:
    """Until every move is complete (not listed, and Metadata shows the replicas without the broker);
    a line each time the count of complete moves changes."""
    total = len(plan.proposed)
    shown = -1
    while True:
        moving = _list(client, plan.proposed)
        replicas = _snapshot(client).replicas
        left = [  # a partition gone from Metadata (its topic deleted) has nothing left to move
            tp for tp in plan.proposed if tp in moving or plan.broker_id in replicas.get(tp, ())
        ]
        if len(left) != shown:
            shown = len(left)
            line = f"Moves complete: {total - len(left)}/{total}"
            if left:
                names = ", ".join(_name(tp) for tp in left[:_SHOWN])
                line += f" (in progress: {names}{', ...' if len(left) > _SHOWN else ''})"
            out_console.print(line, markup=False)
        if not left:
            return
        if time.monotonic() > deadline:
            states = "; ".join(_state(tp, moving, replicas) for tp in left)
            fail(
                f"not every move off broker {plan.broker_id} completed in time ({states}); they carry on: "
                "follow them with `tidelog reassign verify` on the plan above, or undo them with "
                "`tidelog reassign cancel`"
            )
        time.sleep(_POLL_SECONDS)


def _state(
    tp: TopicPartition,
    moving: dict[TopicPartition, tuple[list[int], list[int], list[int]]],
    replicas: dict[TopicPartition, tuple[int, ...]],
) -> str:
    ids = ",".join(map(str, replicas.get(tp, ()))) or "none"
    if tp in moving:
        adding = ",".join(map(str, moving[tp][1])) or "none"
        return f"{_name(tp)}: moving, replicas {ids}, adding {adding}"
    return f"{_name(tp)}: not moving, replicas {ids}"


def _finish(client: ClientOptions, broker_id: int, deadline: float) -> None:
    """Leadership off the broker (a PREFERRED election where Metadata still shows it leading), then the
    final check: it hosts and leads nothing."""
    elected = False
    while True:
        snapshot = _snapshot(client)
        hosted = sorted(tp for tp, replicas in snapshot.replicas.items() if broker_id in replicas)
        if hosted:
            fail(
                f"broker {broker_id} still holds replicas of {', '.join(map(_name, hosted))} (partitions "
                f"created or moved onto it meanwhile?): run `tidelog brokers drain {broker_id}` again"
            )
        led = sorted(tp for tp, leader in snapshot.leaders.items() if leader == broker_id)
        if not led:
            break
        if not elected:
            _elect_preferred(client, led)
            elected = True
        if time.monotonic() > deadline:
            fail(f"broker {broker_id} still leads {', '.join(map(_name, led))}")
        time.sleep(_POLL_SECONDS)
    out_console.print(f"Broker {broker_id} holds no replicas; it can be stopped.")


def _elect_preferred(client: ClientOptions, partitions: list[TopicPartition]) -> None:
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import ElectLeadersRequest, ElectLeadersResponse

    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    request = ElectLeadersRequest(
        election_type=0,  # PREFERRED
        topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items()
        ],
        timeout_ms=int(client.timeout * 1000),
    )
    response = _on_controller(client, request, ElectLeadersResponse)
    failed = [
        f"{topic.topic}-{p.partition_id}: {ErrorCode.name_of(p.error_code)}"
        for topic in response.replica_election_results
        for p in topic.partition_result
        if p.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
    ]
    if failed:
        fail("cannot move leadership off the broker: " + "; ".join(failed))
    out_console.print(f"Elected preferred leaders of {', '.join(map(_name, partitions))}")


def _snapshot(client: ClientOptions) -> _Snapshot:
    """Metadata of every topic, internal ones included."""
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import MetadataRequest, MetadataResponse

    unused = sorted(set(client.properties) - WIRE_PROPERTIES)
    if unused:
        raise click.UsageError(
            f"brokers drain takes only the connection's security properties, not {', '.join(unused)}"
        )
    with open_wire(client) as wire:
        response = _wire_call(
            wire, MetadataRequest(topics=None, allow_auto_topic_creation=False), MetadataResponse, highest=12
        )
    replicas: dict[TopicPartition, tuple[int, ...]] = {}
    leaders: dict[TopicPartition, int] = {}
    for topic in response.topics:
        if topic.name is None or topic.error_code not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
            continue
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            replicas[tp] = tuple(p.replica_nodes)
            leaders[tp] = p.leader_id
    return _Snapshot({b.node_id: b.rack or None for b in response.brokers}, replicas, leaders)
