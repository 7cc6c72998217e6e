"""Which brokers hold a new topic's (or new partitions') replicas (Kafka's
``AdminUtils.assignReplicasToBrokers``), and the checks of an assignment a client gives.

Invariants:

- Every partition gets ``replication_factor`` distinct brokers; the first is its preferred leader.
- Without racks the first replicas go round the brokers from a start index and the followers are shifted so
  that leaders and followers spread evenly (Kafka's rack-unaware placement). With racks (every broker must
  have one, or none may) brokers are ordered alternating racks and each partition's replicas go to as many
  different racks as there are, then to as many different brokers (Kafka's rack-aware placement).
- The start index and shift are random unless fixed (tests, and new partitions of a topic continue from
  its partition count so they spread like the first ones).
- Pure: the randomness comes in as a ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

__all__ = ["AssignmentError", "assign_replicas_to_brokers", "check_assignment"]


class AssignmentError(ValueError):
    """The replicas cannot be placed (a message in Kafka's words); ``invalid_replication_factor`` tells
    INVALID_REPLICATION_FACTOR from INVALID_REPLICA_ASSIGNMENT / INVALID_PARTITIONS."""

    def __init__(self, message: str, *, invalid_replication_factor: bool = False) -> None:
        super().__init__(message)
        self.invalid_replication_factor = invalid_replication_factor


def _replica_index(first: int, shift: int, index: int, brokers: int) -> int:
    return (first + 1 + (shift + index) % (brokers - 1)) % brokers


def assign_replicas_to_brokers(
    brokers: Mapping[int, str | None],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    fixed_start_index: int = -1,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Replicas for partitions ``start_partition`` .. ``start_partition + num_partitions - 1`` on ``brokers``
    (broker id -> rack or None)."""
    if num_partitions <= 0:
        raise AssignmentError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise AssignmentError("Replication factor must be larger than 0.", invalid_replication_factor=True)
    if replication_factor > len(brokers):
        raise AssignmentError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
            invalid_replication_factor=True,
        )
    rng = rng or random.Random()
    racks = {b: r for b, r in brokers.items() if r is not None}
    if racks and len(racks) != len(brokers):
        raise AssignmentError("Not all brokers have rack information for replica rack aware assignment.")
    ordered = _rack_alternated(racks) if racks else sorted(brokers)
    count = len(ordered)
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(count)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(count)
    rack_count = len(set(racks.values()))
    result: dict[int, tuple[int, ...]] = {}
    for partition in range(max(start_partition, 0), max(start_partition, 0) + num_partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ordered[first]]
        if not racks:
            replicas += [
                ordered[_replica_index(first, shift, j, count)] for j in range(replication_factor - 1)
            ]
        else:
            used_racks = {racks[ordered[first]]}
            k = 0
            while len(replicas) < replication_factor:
                broker = ordered[_replica_index(first, shift * rack_count, k, count)]
                rack = racks[broker]
                k += 1
                if (rack not in used_racks or len(used_racks) == rack_count) and (
                    broker not in replicas or len(replicas) == count
                ):
                    replicas.append(broker)
                    used_racks.add(rack)
        result[partition] = tuple(replicas)
    return result


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered one per rack in turn (racks by name, brokers by id within a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    while len(result) < len(racks):
        result.extend(queue.pop(0) for queue in queues if queue)
    return result


def check_assignment(
    assignment: Mapping[int, Sequence[int]], live_brokers: Sequence[int], *, first_partition: int = 0
) -> None:
    """An assignment a client gave (CreateTopics / CreatePartitions): partitions numbered from
    ``first_partition`` without gaps, the same replication factor for all, no broker twice in a partition,
    every broker alive. Raises :class:`AssignmentError` naming the problem."""
    if not assignment:
        raise AssignmentError("The assignment is empty.")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise AssignmentError(f"Partitions must be numbered {expected[0]}..{expected[-1]} without gaps.")
    factors = {len(replicas) for replicas in assignment.values()}
    if len(factors) != 1 or 0 in factors:
        raise AssignmentError("All partitions should have the same number of replicas, and at least one.")
    for partition, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise AssignmentError(
                f"Duplicate brokers not allowed in replica assignment of partition {partition}."
            )
        unknown = sorted(set(replicas) - set(live_brokers))
        if unknown:
            raise AssignmentError(
                f"Replica assignment of partition {partition} names unknown brokers {unknown}."
            )
