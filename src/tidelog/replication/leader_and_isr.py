"""A partition's leadership as the cluster stores it (the ``/brokers/topics/T/partitions/P/state`` znode,
Kafka's ``LeaderAndIsr``), and the controller's decisions about it (Kafka's
``PartitionLeaderElectionAlgorithms`` and ``ReplicaStateMachine``'s ISR removal).

Invariants:

- Every leader change raises ``leader_epoch`` by one; an ISR change made by the leader itself keeps the
  leader epoch and raises only the partition epoch (the znode version, assigned by ZooKeeper).
- The ISR is never emptied: removing the last member leaves it there, with no leader (-1), so the broker
  that had the latest data is the one that can come back as leader.
- A new leader is the first replica in assignment order that is alive and in the ISR (and, for a
  controlled shutdown, not shutting down); with none, the partition has no leader and goes offline,
  unless unclean leader election is enabled, which takes the first live replica in assignment order and
  makes the ISR that replica alone (data the old ISR had may be lost: that is what "unclean" means).
- The controller epoch is stamped by the writer (the controller's ZooKeeper client) when it writes.
- Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "NO_LEADER",
    "RECOVERED",
    "RECOVERING",
    "LeaderAndIsr",
    "controlled_shutdown_election",
    "initial_leader_and_isr",
    "offline_partition_election",
    "preferred_replica_election",
    "remove_replica_from_isr",
    "remove_replicas_from_isr",
]

NO_LEADER = -1
RECOVERED = 0
"""Kafka's ``LeaderRecoveryState.RECOVERED``: the leader has all committed data (the normal state)."""
RECOVERING = 1
"""``RECOVERING``: an unclean election's leader, which may lack committed data (KIP-704)."""


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state znode with its version (Kafka's ``LeaderIsrAndControllerEpoch``).

    ``controller_epoch`` is the epoch of the controller that made the leadership decision (the writer
    stamps it); ``partition_epoch`` is the znode's version: every conditional write names it and gets the
    next one."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int = 0
    leader_recovery_state: int = RECOVERED

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    def new_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """A leader change (also to no leader, or a forced epoch bump): the leader epoch goes up by one."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr))

    def with_isr(self, isr: Sequence[int]) -> LeaderAndIsr:
        """An ISR change by the leader: same leader and leader epoch."""
        return replace(self, isr=tuple(isr))


def initial_leader_and_isr(
    assignment: Sequence[int], live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """A new partition's first state (Kafka's NewPartition -> OnlinePartition): the leader is the first live
    replica in assignment order, the ISR every live replica in assignment order, leader epoch 0. None when
    no assigned replica is alive (the partition waits for one)."""
    isr = tuple(replica for replica in assignment if replica in live)
    if not isr:
        return None
    return LeaderAndIsr(leader=isr[0], leader_epoch=0, isr=isr, controller_epoch=controller_epoch)


def offline_partition_election(
    assignment: Sequence[int],
    current: LeaderAndIsr,
    live: Collection[int],
    *,
    unclean: bool = False,
) -> LeaderAndIsr | None:
    """A leader for a partition whose leader is gone (or that has none yet): None if no replica can lead
    (the partition stays offline). The ISR becomes its live members (the new leader among them)."""
    for replica in assignment:
        if replica in live and replica in current.isr:
            isr = [r for r in current.isr if r in live]
            return current.new_leader_and_isr(replica, isr)
    if unclean:
        for replica in assignment:
            if replica in live:
                return current.new_leader_and_isr(replica, [replica])
    return None


def controlled_shutdown_election(
    assignment: Sequence[int],
    current: LeaderAndIsr,
    live: Collection[int],
    shutting_down: Collection[int],
) -> LeaderAndIsr | None:
    """Move leadership off brokers shutting down: the first live ISR member in assignment order that is not
    shutting down; the ISR loses the brokers shutting down. None: no such replica (the leader stays)."""
    for replica in assignment:
        if replica in live and replica in current.isr and replica not in shutting_down:
            isr = [r for r in current.isr if r not in shutting_down]
            return current.new_leader_and_isr(replica, isr)
    return None


def preferred_replica_election(
    assignment: Sequence[int], current: LeaderAndIsr, live: Collection[int]
) -> LeaderAndIsr | None:
    """Give leadership back to the preferred (first assigned) replica if it is alive and in the ISR and
    not already the leader; else None."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == current.leader or preferred not in live or preferred not in current.isr:
        return None
    return current.new_leader_and_isr(preferred, current.isr)


def remove_replica_from_isr(current: LeaderAndIsr, replica: int) -> LeaderAndIsr:
    """The controller takes a replica that went offline out of the ISR (never emptying it); if it was the
    leader the partition is left without one. Always a new leader epoch, as Kafka's controller does."""
    leader = NO_LEADER if replica == current.leader else current.leader
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    return current.new_leader_and_isr(leader, isr)


def remove_replicas_from_isr(current: LeaderAndIsr, replicas: Collection[int]) -> LeaderAndIsr | None:
    """:func:`remove_replica_from_isr` for several replicas at once (taken out in ISR order), in one new
    leader epoch; None when none of them is in the ISR (nothing to write). When every ISR member goes, the
    last one stays, without a leader."""
    leader, isr = current.leader, current.isr
    for replica in current.isr:
        if replica not in replicas:
            continue
        if replica == leader:
            leader = NO_LEADER
        if len(isr) > 1:
            isr = tuple(r for r in isr if r != replica)
    if (leader, isr) == (current.leader, current.isr):
        return None
    return current.new_leader_and_isr(leader, isr)
