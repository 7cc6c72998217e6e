"""Partition reassignment (KIP-455) as Kafka's ZooKeeper-mode controller does it, as pure decisions: the
replica sets of a move, when it is complete, and the partition state that completes (or cancels) it.

A partition's assignment during a move is Kafka's ``ReplicaAssignment``: ``replicas`` (RS) is the full set,
the target replicas first, then the original ones not in the target; ``adding`` (AR) are the target
replicas the partition did not have; ``removing`` (RR) are the original ones the target drops. So
``origin`` (ORS) = RS - AR and ``target`` (TRS) = RS - RR, whatever moves came before.

Invariants:

- :meth:`PartitionReassignment.reassign_to` is relative to the *original* replicas: a new target while a
  move is in progress replaces it (replicas added for the first move and not wanted by the second are
  dropped at once); a target equal to the original replicas is a cancellation.
- A move is complete when every target replica is in the ISR (Kafka's ``isReassignmentComplete``).
- The completing state (:func:`completed_state`) keeps the leader if it is a live target replica, else
  elects the first live target replica in the ISR (Kafka's reassign-partition leader election), takes
  the removed replicas out of the ISR (never emptying it) and always starts a new leader epoch, so every
  replica learns the final set at a fence. With no target replica able to lead, the partition is left
  without a leader (a cancellation whose original replicas all fell out of the ISR).
- Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .leader_and_isr import NO_LEADER, LeaderAndIsr

__all__ = ["PartitionReassignment", "completed_state", "invalid_target"]


def _distinct(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """One partition's replica assignment with a move's pending additions and removals (module docstring)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        """The replicas before the move (ORS)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas after the move (TRS)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> PartitionReassignment:
        """The assignment of a move from the original replicas to ``target`` (Kafka's ``reassignTo``)."""
        origin = self.origin
        full = _distinct([*target, *origin])
        return PartitionReassignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )

    def cancelled(self) -> PartitionReassignment:
        """Back to the original replicas, nothing pending."""
        return PartitionReassignment(self.origin)

    def completed(self) -> PartitionReassignment:
        """The target replicas, nothing pending."""
        return PartitionReassignment(self.target)

    def is_complete(self, isr: Collection[int]) -> bool:
        return all(r in isr for r in self.target)


def invalid_target(
    current: PartitionReassignment, target: Sequence[int], live: Collection[int]
) -> str | None:
    """Why ``target`` cannot be a partition's new replica list (Kafka's ``validateReplicas``), else None."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {list(target)}"
    adding = current.reassign_to(target).adding
    if any(r not in live for r in adding):
        return (
            f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
            f"live broker list: {sorted(live)}"
        )
    return None


def completed_state(current: LeaderAndIsr, target: Sequence[int], live: Collection[int]) -> LeaderAndIsr:
    """The partition state that ends a move to ``target`` (module docstring): a new leader epoch, the
    leader a live target replica in the ISR, the ISR without replicas outside ``target``."""
    if current.leader in target and current.leader in live:
        leader = current.leader
    else:
        leader = next((r for r in target if r in live and r in current.isr), NO_LEADER)
    isr = tuple(r for r in current.isr if r in target) or current.isr
    return current.new_leader_and_isr(leader, isr)
