"""What ``tidelog brokers list`` shows of each broker, merged from what the wire and ZooKeeper tell.

Pure: snapshots come in (:class:`WireSnapshot` from DescribeCluster and Metadata, :class:`ZkSnapshot` from
``/brokers/ids/N``, ``/controller`` and ``/controller_epoch``), rows go out; no I/O.

Invariants:

- The brokers listed are every broker any source names: registered ones (DescribeCluster, or
  ``/brokers/ids`` when ZooKeeper is read) and every id in a partition's replica list. A broker named only
  by replica lists is not alive: it is assigned partitions but not registered (stopped, crashed, or its
  ZooKeeper session expired). A broker neither registered nor assigned anything is unknown to Kafka too.
- With ZooKeeper read, it is the source of truth for who is alive, each broker's endpoints (every listener,
  by name), rack, broker epoch (the czxid of its registration, KIP-380) and the controller; without it,
  alive means listed by the answering broker's DescribeCluster, the one endpoint is the listener the
  client reached (its name is not on the wire) and the broker epoch is unknown (None), as Kafka's
  Metadata and DescribeCluster do not carry it.
- Partitions led, hosted (replicas) and hosted but out of the ISR come from Metadata, named
  ``topic-partition`` in (topic, partition) order; internal topics are counted like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

__all__ = [
    "BrokerEndpoint",
    "BrokerRow",
    "ClusterView",
    "PartitionState",
    "RegisteredBroker",
    "WireSnapshot",
    "ZkSnapshot",
    "build_view",
    "view_json",
]


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One endpoint; ``listener`` and ``security_protocol`` are None when only the wire was read."""

    host: str | None
    port: int
    listener: str | None = None
    security_protocol: str | None = None

    def text(self) -> str:
        host = self.host or ""
        address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        return f"{self.listener}://{address}" if self.listener else address


@dataclass(frozen=True, slots=True)
class RegisteredBroker:
    """A registered broker as one source tells it; ``broker_epoch`` None: not known to that source."""

    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None
    broker_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WireSnapshot:
    """DescribeCluster (cluster id, controller, registered brokers) and Metadata (every partition)."""

    cluster_id: str | None
    controller_id: int  # -1: none known
    brokers: Sequence[RegisteredBroker]
    partitions: Sequence[PartitionState]


@dataclass(frozen=True, slots=True)
class ZkSnapshot:
    """``/brokers/ids/N`` of every registered broker, ``/controller`` and ``/controller_epoch``."""

    brokers: Sequence[RegisteredBroker]
    controller_id: int  # -1: no controller now
    controller_epoch: int | None


@dataclass(frozen=True, slots=True)
class BrokerRow:
    broker_id: int
    alive: bool
    is_controller: bool
    rack: str | None
    endpoints: tuple[BrokerEndpoint, ...]
    broker_epoch: int | None
    leader_of: tuple[str, ...]
    replica_of: tuple[str, ...]
    out_of_isr: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int
    controller_epoch: int | None
    from_zookeeper: bool
    brokers: tuple[BrokerRow, ...] = field(default=())


def build_view(wire: WireSnapshot, zk: ZkSnapshot | None = None) -> ClusterView:
    """The rows of every broker any source names (module docstring), by id."""
    registered: Mapping[int, RegisteredBroker] = {
        b.broker_id: b for b in (zk.brokers if zk is not None else wire.brokers)
    }
    controller_id = zk.controller_id if zk is not None else wire.controller_id
    led: dict[int, list[tuple[str, int]]] = {}
    hosted: dict[int, list[tuple[str, int]]] = {}
    lagging: dict[int, list[tuple[str, int]]] = {}
    for state in wire.partitions:
        tp = (state.topic, state.partition)
        if state.leader >= 0:
            led.setdefault(state.leader, []).append(tp)
        for replica in state.replicas:
            hosted.setdefault(replica, []).append(tp)
            if replica not in state.isr:
                lagging.setdefault(replica, []).append(tp)
    ids = sorted(set(registered) | set(hosted) | set(led))
    rows = []
    for broker_id in ids:
        known = registered.get(broker_id)
        rows.append(
            BrokerRow(
                broker_id=broker_id,
                alive=known is not None,
                is_controller=broker_id == controller_id,
                rack=known.rack if known is not None else None,
                endpoints=known.endpoints if known is not None else (),
                broker_epoch=known.broker_epoch if known is not None else None,
                leader_of=_names(led.get(broker_id, ())),
                replica_of=_names(hosted.get(broker_id, ())),
                out_of_isr=_names(lagging.get(broker_id, ())),
            )
        )
    return ClusterView(
        cluster_id=wire.cluster_id,
        controller_id=controller_id,
        controller_epoch=zk.controller_epoch if zk is not None else None,
        from_zookeeper=zk is not None,
        brokers=tuple(rows),
    )


def _names(partitions: Iterable[tuple[str, int]]) -> tuple[str, ...]:
    return tuple(f"{topic}-{partition}" for topic, partition in sorted(partitions))


class EndpointJson(TypedDict):
    listener: str | None
    security_protocol: str | None
    host: str | None
    port: int


class BrokerJson(TypedDict):
    id: int
    alive: bool
    controller: bool
    rack: str | None
    endpoints: list[EndpointJson]
    broker_epoch: int | None
    leader_partitions: list[str]
    replica_partitions: list[str]
    out_of_isr_partitions: list[str]


class ClusterJson(TypedDict):
    cluster_id: str | None
    controller_id: int
    controller_epoch: int | None
    source: str
    brokers: list[BrokerJson]


def view_json(view: ClusterView) -> ClusterJson:
    """The ``--json`` document: one object per broker, partitions named ``topic-partition``."""
    return {
        "cluster_id": view.cluster_id,
        "controller_id": view.controller_id,
        "controller_epoch": view.controller_epoch,
        "source": "zookeeper" if view.from_zookeeper else "wire",
        "brokers": [
            {
                "id": row.broker_id,
                "alive": row.alive,
                "controller": row.is_controller,
                "rack": row.rack,
                "endpoints": [
                    {
                        "listener": e.listener,
                        "security_protocol": e.security_protocol,
                        "host": e.host,
                        "port": e.port,
                    }
                    for e in row.endpoints
                ],
                "broker_epoch": row.broker_epoch,
                "leader_partitions": list(row.leader_of),
                "replica_partitions": list(row.replica_of),
                "out_of_isr_partitions": list(row.out_of_isr),
            }
            for row in view.brokers
        ],
    }
