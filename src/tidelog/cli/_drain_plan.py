"""The plan of ``tidelog brokers drain ID``: every partition with a replica on broker ID gets a replica list
without it. Pure: the cluster's live brokers (with racks), every partition's replicas and the partitions
being moved come in; the plan, or a :class:`DrainError` saying why there is none, goes out.

Invariants:

- Only partitions with a replica on ID are in the plan; each keeps its other replicas in their order and
  gets one new replica appended, so its preferred leader (the first replica) stays unless it was ID, in
  which case the next replica becomes the preferred leader. The new replica is a live broker other than ID
  and not already in the list.
- The new replica is the candidate with the fewest replicas in the whole cluster (counting the replicas
  this plan has already placed), lowest id on a tie. When every live broker other than ID has a rack, a
  candidate on a rack the partition's other replicas are not on is taken first (as the reassign
  generator's rack-aware placement spreads racks); without such a candidate, any.
- Refused (nothing planned): ID is neither a live broker nor named in any replica list; a partition to
  move is already being moved (its move must be completed or cancelled first); fewer live brokers other
  than ID than a partition's replication factor. Every offending partition is named.
- Deterministic: the same inputs give the same plan (partitions in topic and partition order).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DrainError", "DrainPlan", "plan_drain"]

TopicPartition = tuple[str, int]


class DrainError(ValueError):
    """The broker cannot be drained now; the message says why, naming the partitions."""


@dataclass(frozen=True, slots=True)
class DrainPlan:
    """``current``: the replicas now of each partition to move (the rollback plan); ``proposed``: the same
    partitions' replicas without the broker."""

    broker_id: int
    current: dict[TopicPartition, tuple[int, ...]]
    proposed: dict[TopicPartition, tuple[int, ...]]


def _names(partitions: Collection[TopicPartition]) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in sorted(partitions))


def plan_drain(
    broker_id: int,
    live: Mapping[int, str | None],
    assignment: Mapping[TopicPartition, Sequence[int]],
    moving: Collection[TopicPartition] = (),
) -> DrainPlan:
    """The plan moving every replica off ``broker_id``. ``live``: the registered brokers and their racks
    (None: no rack); ``assignment``: every partition's replicas; ``moving``: the partitions with a move in
    progress (ListPartitionReassignments)."""
    hosted = {tp: tuple(replicas) for tp, replicas in assignment.items() if broker_id in replicas}
    if broker_id not in live and not hosted:
        known = ", ".join(str(b) for b in sorted(live)) or "none"
        raise DrainError(f"broker {broker_id} is not a known broker (live brokers: {known})")
    busy = set(hosted) & set(moving)
    if busy:
        raise DrainError(
            f"partitions being moved have a replica on broker {broker_id}: {_names(busy)}; wait until their "
            "moves complete (tidelog reassign verify) or cancel them (tidelog reassign cancel), then drain"
        )
    others = {b: rack for b, rack in live.items() if b != broker_id}
    too_few = {tp for tp, replicas in hosted.items() if len(replicas) > len(others)}
    if too_few:
        factor = max(len(hosted[tp]) for tp in too_few)
        listed = ", ".join(str(b) for b in sorted(others)) or "none"
        raise DrainError(
            f"cannot move the replicas off broker {broker_id}: partitions {_names(too_few)} need "
            f"{factor} brokers (their replication factor) and only {len(others)} live brokers other than "
            f"{broker_id} are left ({listed})"
        )
    rack_aware = bool(others) and all(rack is not None for rack in others.values())
    load = dict.fromkeys(others, 0)
    for replicas in assignment.values():
        for replica in replicas:
            if replica in load:
                load[replica] += 1
    proposed: dict[TopicPartition, tuple[int, ...]] = {}
    for tp in sorted(hosted):
        kept = [r for r in hosted[tp] if r != broker_id]
        candidates = [b for b in others if b not in kept]
        if rack_aware:
            used = {others[r] for r in kept if r in others}
            candidates = [b for b in candidates if others[b] not in used] or candidates
        chosen = min(candidates, key=lambda b: (load[b], b))
        load[chosen] += 1
        proposed[tp] = (*kept, chosen)
    return DrainPlan(broker_id, {tp: hosted[tp] for tp in sorted(hosted)}, proposed)
