"""``tidelog reassign generate|execute|verify|cancel``: the job of ``kafka-reassign-partitions.sh`` (KIP-455),
with its option names and JSON files, over AlterPartitionReassignments / ListPartitionReassignments.

- ``generate --topics-to-move-json-file F --broker-list 1,2,3``: prints the current assignment of those
  topics and a proposed one over the listed brokers (Kafka's placement, rack-aware when every listed
  broker has a rack); nothing is changed.
- ``execute --reassignment-json-file F``: prints the current assignment of the plan's partitions (save
  it: it is the rollback plan), then starts the moves; refused while other moves are in progress unless
  ``--additional``. ``--throttle R`` first limits the moves' replication to R bytes/s per broker
  (:mod:`._reassign_throttle`).
- ``verify --reassignment-json-file F``: per partition, complete or still in progress (with the replicas
  being added and whether they are in the ISR yet), or not moving but with another replica list; once
  no move of the plan is in progress, it removes the replication throttles (as Kafka's does, throttled or
  not) unless ``--preserve-throttles``.
- ``cancel --reassignment-json-file F``: cancels the plan's moves in progress; each partition goes back to
  its original replicas.

Invariants: the requests go to the controller, found through Metadata and looked up again when a broker
answers NOT_CONTROLLER (until ``--timeout``); a malformed file or an unknown partition is refused before
anything is sent; a partition the controller refuses is printed with its reason and the command exits 1.
The confluent-kafka client lacks these APIs: they go through :mod:`tidelog.client.wire`, so only the
connection's security properties are taken from ``-X`` / ``--command-config``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console
from tidelog.cli._reassign_plan import PlanError, format_plan, read_plan, read_topics_to_move
from tidelog.cli._reassign_throttle import clear_throttles, set_throttles
from tidelog.cli._txn_wire import WIRE_PROPERTIES, open_wire

if TYPE_CHECKING:
    from tidelog.client.wire import WireClient
    from tidelog.protocol.schema import Request, Response

__all__ = ["reassign_group"]

R = TypeVar("R", bound="Response")

_PLAN_FILE = click.option(
    "--reassignment-json-file",
    "plan_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Kafka\'s plan: {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}.',
)


@dataclass(frozen=True)
class _Partition:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class _Cluster:
    brokers: dict[int, tuple[str, str | None]]  # id -> (host:port, rack)
    controller_id: int
    topics: dict[str, dict[int, _Partition] | None]  # None: the topic does not exist

    def assignment(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, ...]]:
        found = {}
        for topic, partition in partitions:
            described = self.topics.get(topic)
            if described is None or partition not in described:
                fail(f"partition {topic}-{partition} does not exist")
            found[(topic, partition)] = described[partition].replicas
        return found

    def addresses(self) -> dict[int, str]:
        """host:port of each live broker."""
        return {broker: address for broker, (address, _rack) in self.brokers.items()}


@click.group("reassign")
def reassign_group() -> None:
    """Move partition replicas between brokers (kafka-reassign-partitions.sh)."""


@reassign_group.command("generate")
@click.option(
    "--topics-to-move-json-file",
    "topics_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Kafka\'s topics file: {"version":1,"topics":[{"topic":..}]}.',
)
@click.option("--broker-list", required=True, help="Brokers to place the replicas on, e.g. 2,3,4.")
@client_options
def generate_command(client: ClientOptions, topics_file: Path, broker_list: str) -> None:
    """Propose a plan moving the topics' replicas onto --broker-list (changes nothing)."""
    import random

    from tidelog.replication.replica_assignment import AssignmentError, assign_replicas_to_brokers

    try:
        topics = read_topics_to_move(topics_file)
    except PlanError as exc:
        raise click.UsageError(str(exc)) from None
    brokers = _broker_ids(broker_list)
    cluster = _describe(client, topics)
    unknown = sorted(set(brokers) - set(cluster.brokers))
    if unknown:
        fail(f"brokers {', '.join(map(str, unknown))} are not in the cluster")
    racks = {b: cluster.brokers[b][1] for b in brokers}
    placement: dict[int, str | None] = racks if all(racks.values()) else dict.fromkeys(brokers)
    current: dict[tuple[str, int], tuple[int, ...]] = {}
    proposed: dict[tuple[str, int], tuple[int, ...]] = {}
    for topic in topics:
        partitions = cluster.topics.get(topic)
        if not partitions:
            fail(f"topic {topic!r} does not exist")
        for index, partition in partitions.items():
            current[(topic, index)] = partition.replicas
        factor = len(partitions[min(partitions)].replicas)
        try:
            placed = assign_replicas_to_brokers(placement, len(partitions), factor, rng=random.Random())
        except AssignmentError as exc:
            fail(f"cannot place topic {topic!r} on brokers {broker_list}: {exc}")
        proposed.update({(topic, p): replicas for p, replicas in placed.items()})
    out_console.print("Current partition replica assignment")
    out_console.print(format_plan(current), markup=False)
    out_console.print()
    out_console.print("Proposed partition reassignment configuration")
    out_console.print(format_plan(proposed), markup=False)


@reassign_group.command("execute")
@_PLAN_FILE
@click.option(
    "--additional", is_flag=True, help="Start these moves although others are in progress (else refused)."
)
@click.option(
    "--throttle",
    type=click.IntRange(min=1),
    default=None,
    help="Limit the moves' replication to this many bytes/s per broker; verify removes it once done.",
)
@client_options
def execute_command(client: ClientOptions, plan_file: Path, additional: bool, throttle: int | None) -> None:
    """Start the plan's moves; prints the current assignment first (the rollback plan)."""
    plan = _plan(plan_file)
    if not additional and _list(client, None):
        fail(
            "Cannot execute because there is an existing partition assignment. Use --additional to override "
            "this and create a new partition assignment in addition to the existing one."
        )
    cluster = _describe(client, sorted({topic for topic, _p in plan}))
    current = cluster.assignment(plan)
    out_console.print("Current partition replica assignment")
    out_console.print()
    out_console.print(format_plan(current), markup=False)
    out_console.print()
    out_console.print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        set_throttles(client, cluster.addresses(), current, plan, throttle)
    errors = _alter(client, dict(plan))
    started = [_name(tp) for tp in sorted(plan) if tp not in errors]
    if started:
        out_console.print(f"Successfully started partition reassignments for {','.join(started)}")
    if errors:
        fail(
            "Error reassigning partitions: "
            + "; ".join(f"{_name(tp)}: {e}" for tp, e in sorted(errors.items()))
        )


@reassign_group.command("verify")
@_PLAN_FILE
@click.option("--preserve-throttles", is_flag=True, help="Leave the replication throttles on once complete.")
@client_options
def verify_command(client: ClientOptions, plan_file: Path, preserve_throttles: bool) -> None:
    """Report each of the plan's moves: complete or still in progress."""
    plan = _plan(plan_file)
    moving = _list(client, plan)
    cluster = _describe(client, sorted({topic for topic, _p in plan}))
    current = cluster.assignment(plan)
    out_console.print("Status of partition reassignment:")
    complete = True
    for tp, target in sorted(plan.items()):
        name = _name(tp)
        if tp in moving:
            replicas, adding, removing = moving[tp]
            described = cluster.topics[tp[0]]
            isr = described[tp[1]].isr if described is not None else ()
            caught_up = [r for r in adding if r in isr]
            complete = False
            out_console.print(
                f"Reassignment of partition {name} is still in progress: replicas {_ids(replicas)}, "
                f"adding {_ids(adding)} ({len(caught_up)}/{len(adding)} in the ISR), removing {_ids(removing)}."
            )
        elif current[tp] == target:
            out_console.print(f"Reassignment of partition {name} is completed.")
        else:
            out_console.print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{_ids(current[tp])} rather than {_ids(target)}."
            )
    if (
        complete and not preserve_throttles
    ):  # Kafka's rule: the throttles come off once no move is in progress
        brokers = {b for replicas in plan.values() for b in replicas}
        clear_throttles(client, cluster.addresses(), brokers, {topic for topic, _p in plan})


@reassign_group.command("cancel")
@_PLAN_FILE
@client_options
def cancel_command(client: ClientOptions, plan_file: Path) -> None:
    """Cancel the plan's moves in progress (each partition goes back to its original replicas)."""
    plan = _plan(plan_file)
    moving = _list(client, plan)
    if not moving:
        out_console.print("None of the specified partition reassignments are active.")
        return
    errors = _alter(client, dict.fromkeys(sorted(moving)))
    cancelled = [_name(tp) for tp in sorted(moving) if tp not in errors]
    if cancelled:
        out_console.print(f"Successfully cancelled partition reassignments for: {','.join(cancelled)}")
    if errors:
        fail(
            "Error cancelling reassignments: "
            + "; ".join(f"{_name(tp)}: {e}" for tp, e in sorted(errors.items()))
        )


# ---- helpers ----


def _name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def _ids(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in values) or "none"


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.UsageError(f"--broker-list {text!r}: expected broker ids like 1,2,3") from None
    if not ids or len(set(ids)) != len(ids):
        raise click.UsageError(f"--broker-list {text!r}: expected distinct broker ids like 1,2,3")
    return ids


def _plan(path: Path) -> dict[tuple[str, int], tuple[int, ...]]:
    try:
        return read_plan(path)
    except PlanError as exc:
        raise click.UsageError(str(exc)) from None


def _describe(client: ClientOptions, topics: list[str]) -> _Cluster:
    """Brokers, the controller and the topics' assignments and ISRs (Metadata)."""
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import MetadataRequest, MetadataResponse

    unused = sorted(set(client.properties) - WIRE_PROPERTIES)
    if unused:
        raise click.UsageError(
            f"reassign takes only the connection's security properties, not {', '.join(unused)}"
        )
    with open_wire(client) as wire:
        response = _wire_call(
            wire,
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=False,
            ),
            MetadataResponse,
            highest=12,
        )
    described: dict[str, dict[int, _Partition] | None] = {}
    for topic in response.topics:
        if topic.name is None:
            continue
        if topic.error_code != ErrorCode.NONE:
            described[topic.name] = None
            continue
        described[topic.name] = {
            p.partition_index: _Partition(tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in topic.partitions
        }
    return _Cluster(
        {b.node_id: (f"{b.host}:{b.port}", b.rack) for b in response.brokers},
        response.controller_id,
        described,
    )


def _wire_call(wire: WireClient, body: Request, expect: type[R], highest: int | None = None) -> R:
    from tidelog.client.wire import WireError

    try:
        return wire.call(body, wire.version_for(type(body), highest), expect=expect)
    except WireError as exc:
        fail(str(exc))


def _on_controller(client: ClientOptions, body: Request, expect: type[R]) -> R:
    """Send ``body`` to the controller, looking it up again after NOT_CONTROLLER until ``--timeout``."""
    from tidelog.protocol.errors import ErrorCode

    deadline = time.monotonic() + client.timeout
    while True:
        cluster = _describe(client, [])
        found = cluster.brokers.get(cluster.controller_id)
        if found is not None:
            with open_wire(client, found[0]) as controller:
                response = _wire_call(controller, body, expect)
            error = getattr(response, "error_code", ErrorCode.NONE)
            if error != ErrorCode.NOT_CONTROLLER:
                if error != ErrorCode.NONE:
                    message = getattr(response, "error_message", None) or ErrorCode.name_of(error)
                    fail(f"the controller refused the request: {ErrorCode.name_of(error)}: {message}")
                return response
        if time.monotonic() > deadline:
            fail(f"no controller answered within {client.timeout:g} s")
        time.sleep(0.2)


def _alter(
    client: ClientOptions, reassignments: Mapping[tuple[str, int], tuple[int, ...] | None]
) -> dict[tuple[str, int], str]:
    """AlterPartitionReassignments; the partitions refused, with their error."""
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
    )

    by_topic: dict[str, list[AlterPartitionReassignmentsRequest.ReassignablePartition]] = {}
    for (topic, partition), replicas in sorted(reassignments.items()):
        by_topic.setdefault(topic, []).append(
            AlterPartitionReassignmentsRequest.ReassignablePartition(
                partition_index=partition, replicas=None if replicas is None else list(replicas)
            )
        )
    request = AlterPartitionReassignmentsRequest(
        timeout_ms=int(client.timeout * 1000),
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=partitions)
            for topic, partitions in by_topic.items()
        ],
    )
    response = _on_controller(client, request, AlterPartitionReassignmentsResponse)
    return {
        (topic.name, p.partition_index): f"{ErrorCode.name_of(p.error_code)}: {p.error_message or ''}".rstrip(
            ": "
        )
        for topic in response.responses
        for p in topic.partitions
        if p.error_code != ErrorCode.NONE
    }


def _list(
    client: ClientOptions, partitions: Iterable[tuple[str, int]] | None
) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """ListPartitionReassignments of ``partitions`` (None: all): (replicas, adding, removing) of those
    moving."""
    from tidelog.protocol.messages import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions or ()):
        by_topic.setdefault(topic, []).append(partition)
    request = ListPartitionReassignmentsRequest(
        timeout_ms=int(client.timeout * 1000),
        topics=None
        if partitions is None
        else [
            ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(name=t, partition_indexes=p)
            for t, p in by_topic.items()
        ],
    )
    response = _on_controller(client, request, ListPartitionReassignmentsResponse)
    return {
        (topic.name, p.partition_index): (
            list(p.replicas),
            list(p.adding_replicas),
            list(p.removing_replicas),
        )
        for topic in response.topics
        for p in topic.partitions
    }
