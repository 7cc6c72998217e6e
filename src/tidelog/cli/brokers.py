"""``tidelog brokers``: the cluster's brokers. ``brokers list`` shows each broker's id, rack, endpoints,
broker epoch, whether it is the controller and alive (registered), and the partitions it leads and hosts;
``brokers drain ID`` (:mod:`tidelog.cli.brokers_drain`) moves every replica off a broker.

Invariants:

- Read-only: DescribeCluster and Metadata on the wire, and with ``--zookeeper`` plain reads of
  ``/brokers/ids/N``, ``/controller`` and ``/controller_epoch`` (nothing is created, not even a chroot).
- Broker epochs are ZooKeeper's (the czxid of ``/brokers/ids/N``, KIP-380) and on no client-facing wire
  message: without ``--zookeeper`` the column shows ``-`` and a note says how to get them, never a guess.
- A broker that is assigned replicas but not registered (stopped, crashed) is listed as not alive; what is
  merged from where is :mod:`tidelog.cli._brokers_view`'s.
- Unreachable brokers or ZooKeeper end in one error line, exit 1.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from tidelog.cli._common import (
    ClientOptions,
    client_options,
    err_console,
    fail,
    out_console,
    table,
    wait_result,
)
from tidelog.cli.brokers_drain import drain_command

if TYPE_CHECKING:
    from tidelog.cli._brokers_view import BrokerRow, ClusterView, WireSnapshot, ZkSnapshot

__all__ = ["brokers_group"]

EPOCH_NOTE = (
    "broker epochs are kept in ZooKeeper (the czxid of /brokers/ids/N), not on the wire: add "
    "--zookeeper HOST:PORT[/chroot] to show them and every listener by name"
)


@click.group("brokers")
def brokers_group() -> None:
    """The cluster's brokers."""


brokers_group.add_command(drain_command)


@brokers_group.command("list")
@click.option(
    "--zookeeper",
    metavar="HOST:PORT[/chroot]",
    help="The cluster's zookeeper.connect: adds broker epochs, every listener and the controller epoch, "
    "and takes who is alive from the registrations themselves.",
)
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Short for --format json.")
@client_options
def list_command(client: ClientOptions, zookeeper: str | None, fmt: str, as_json: bool) -> None:
    """Each broker: id, rack, endpoints, broker epoch, controller, partitions led and hosted, alive."""
    from tidelog.cli._brokers_view import build_view, view_json

    wire = _read_wire(client)
    zk = _read_zookeeper(zookeeper, client.timeout, client.verbose) if zookeeper else None
    view = build_view(wire, zk)
    if as_json or fmt == "json":
        out_console.print_json(json.dumps(view_json(view)))
        return
    _print_table(view)
    if zk is None:
        err_console.print(f"[dim]note: {escape(EPOCH_NOTE)}[/]")


def _print_table(view: ClusterView) -> None:
    controller = str(view.controller_id) if view.controller_id >= 0 else "none"
    if view.controller_epoch is not None:
        controller += f" (epoch {view.controller_epoch})"
    title = f"Cluster: {view.cluster_id or '?'}  Controller: {controller}"
    result = table(
        "ID",
        "Rack",
        "Endpoints",
        "Epoch",
        "Controller",
        "Leader of",
        "Replicas",
        "Not in ISR",
        "Alive",
        title=title,
        title_justify="left",
    )
    for row in view.brokers:
        result.add_row(
            str(row.broker_id),
            row.rack or "-",
            "\n".join(e.text() for e in row.endpoints) or "-",
            str(row.broker_epoch) if row.broker_epoch is not None else "-",
            "yes" if row.is_controller else "",
            str(len(row.leader_of)),
            str(len(row.replica_of)),
            str(len(row.out_of_isr)),
            _alive(row),
        )
    out_console.print(result)


def _alive(row: BrokerRow) -> str:
    return "yes" if row.alive else "[bold red]no[/] (not registered)"


def _read_wire(client: ClientOptions) -> WireSnapshot:
    from tidelog.cli._brokers_view import BrokerEndpoint, PartitionState, RegisteredBroker, WireSnapshot

    admin = client.admin()
    described = wait_result(
        client, admin.describe_cluster(request_timeout=client.timeout), "cannot describe the cluster"
    )
    metadata = client.cluster_metadata(admin)
    brokers = [
        RegisteredBroker(node.id, (BrokerEndpoint(node.host, node.port),), node.rack or None)
        for node in described.nodes
    ]
    partitions = [
        PartitionState(name, p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
        for name, topic in metadata.topics.items()
        if topic.error is None
        for p in topic.partitions.values()
    ]
    controller = described.controller
    return WireSnapshot(
        cluster_id=described.cluster_id,
        controller_id=controller.id if controller is not None else -1,
        brokers=brokers,
        partitions=partitions,
    )


def _read_zookeeper(connect: str, timeout: float, verbose: bool) -> ZkSnapshot:
    """Plain reads through kazoo (no session of the broker's kind, no writes)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException, NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from tidelog.cli._brokers_view import BrokerEndpoint, RegisteredBroker, ZkSnapshot
    from tidelog.server.zk import paths
    from tidelog.server.zk.zk_data import ZkDataError, decode_broker_registration, decode_controller

    logging.getLogger("kazoo").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    zk = KazooClient(hosts=connect, timeout=timeout, connection_retry={"max_tries": 1})
    try:
        zk.start(timeout=timeout)
    except (KazooTimeoutError, KazooException, OSError) as exc:
        zk.close()
        fail(f"cannot reach ZooKeeper at {connect} within {timeout:g} s ({exc or type(exc).__name__})")
    try:
        try:
            ids = sorted(int(child) for child in zk.get_children(paths.BROKER_IDS))
        except NoNodeError:
            fail(
                f"ZooKeeper at {connect} has no {paths.BROKER_IDS}: is this the cluster's zookeeper.connect?"
            )
        brokers = []
        for broker_id in ids:
            try:
                data, stat = zk.get(paths.broker_path(broker_id))
            except NoNodeError:
                continue  # unregistered between the listing and the read
            registration = decode_broker_registration(broker_id, data)
            endpoints = tuple(
                BrokerEndpoint(e.host, e.port, e.listener_name, e.security_protocol)
                for e in registration.endpoints
            )
            brokers.append(RegisteredBroker(broker_id, endpoints, registration.rack, int(stat.czxid)))
        try:
            controller_id = decode_controller(zk.get(paths.CONTROLLER)[0]).broker_id
        except NoNodeError:
            controller_id = -1
        try:
            controller_epoch: int | None = int(zk.get(paths.CONTROLLER_EPOCH)[0])
        except NoNodeError:
            controller_epoch = None
    except (ZkDataError, ValueError) as exc:
        fail(f"unexpected content in ZooKeeper at {connect}: {exc}")
    except (KazooException, KazooTimeoutError) as exc:
        fail(f"reading ZooKeeper at {connect} failed: {exc or type(exc).__name__}")
    finally:
        zk.stop()
        zk.close()
    return ZkSnapshot(brokers=brokers, controller_id=controller_id, controller_epoch=controller_epoch)
