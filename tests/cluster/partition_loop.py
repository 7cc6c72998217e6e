"""The random partition loop: rounds of one random network partition each, healed, then waited out until the
cluster converged again, under the scenario's workload.

Each round cuts one of:

- ``isolate``: a broker from everyone (ZooKeeper, the other brokers, the clients);
- ``leader-followers``: a partition's leader from its followers (ZooKeeper and the clients still reach it);
- ``broker-zk``: a broker from ZooKeeper only;
- ``two-brokers``: two brokers from each other;
- ``one-way``: the packets from one member (a broker or ZooKeeper) to another, not the way back;

for a random duration around the ZooKeeper session timeout (half to one and a half of it, so some rounds
outlive a session and some do not), heals every cut, and waits for convergence (every broker registered,
every partition led with its whole assignment in the ISR) and for more acknowledged writes before the next
round.

Invariants: the whole plan (kinds, brokers, partitions, durations) is drawn from the scenario's seeded
``rng`` before the first round, so a seed names one sequence of faults whatever the timing; only which
broker leads a partition when its round starts is read from the cluster. Every fault and heal is a
scenario event (a failure's message lists them). The verdict is the scenario's own :meth:`verify` after
the loop.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from tests.cluster.harness import SESSION_TIMEOUT_MS, Scenario
from tests.cluster.workload import Workload

__all__ = ["KINDS", "PlannedFault", "partition_rounds", "plan", "run_partition_loop"]

KINDS = ("isolate", "leader-followers", "broker-zk", "two-brokers", "one-way")
ROUNDS = 3
SOAK_ROUNDS = 20

Member = int | str


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """One round: ``kind``, the members it names (``partition`` for ``leader-followers``) and its duration."""

    kind: str
    members: tuple[Member, ...]
    partition: int
    seconds: float

    def describe(self) -> str:
        if self.kind == "isolate":
            return f"broker {self.members[0]} isolated"
        if self.kind == "leader-followers":
            return f"partition {self.partition}'s leader cut from its followers"
        if self.kind == "broker-zk":
            return f"broker {self.members[0]} cut from ZooKeeper"
        if self.kind == "two-brokers":
            return f"brokers {self.members[0]} and {self.members[1]} cut from each other"
        return f"packets from {self.members[0]} to {self.members[1]} dropped (one way)"


def partition_rounds(config: pytest.Config) -> int:
    """Rounds per loop: ``TIDELOG_PARTITION_ROUNDS`` if set, else 3 (CI: each round is a session timeout
    or so of fault plus the convergence after it), or 20 in a soak run (``--soak`` / ``TIDELOG_SOAK``, or
    ``--cluster-soak`` / ``TIDELOG_CLUSTER_SOAK`` above 1, see ``conftest``)."""
    given = os.environ.get("TIDELOG_PARTITION_ROUNDS")
    if given:
        return max(1, int(given))
    soak = config.getoption("--cluster-soak", None) or os.environ.get("TIDELOG_CLUSTER_SOAK") or 1
    return SOAK_ROUNDS if int(soak) > 1 or config.getoption("--soak", False) else ROUNDS


def plan(rng: random.Random, rounds: int, brokers: Sequence[int], partitions: int) -> list[PlannedFault]:
    """The loop's faults, drawn from ``rng`` alone."""
    faults = []
    for _ in range(rounds):
        kind = rng.choice(KINDS)
        members: tuple[Member, ...] = ()
        partition = -1
        if kind in ("isolate", "broker-zk"):
            members = (rng.choice(list(brokers)),)
        elif kind == "leader-followers":
            partition = rng.randrange(partitions)
        elif kind == "two-brokers":
            members = tuple(rng.sample(list(brokers), 2))
        else:
            members = tuple(rng.sample([*brokers, "zk"], 2))
        seconds = round(rng.uniform(0.5, 1.5) * SESSION_TIMEOUT_MS / 1000, 1)
        faults.append(PlannedFault(kind, members, partition, seconds))
    return faults


def _cut(scenario: Scenario, fault: PlannedFault, topic: str) -> str:
    """Make the fault's cuts; returns what was cut, with the leader it found for ``leader-followers``."""
    c = scenario.c
    if fault.kind == "isolate":
        c.isolate(fault.members[0])
    elif fault.kind == "leader-followers":
        leader = scenario.leader(topic, fault.partition)
        followers = [r for r in scenario.replicas(topic, fault.partition) if r != leader]
        for follower in followers:
            c.cut(leader, follower)
        return f"{topic}-{fault.partition}'s leader {leader} cut from its followers {followers}"
    elif fault.kind == "broker-zk":
        c.cut(fault.members[0], "zk")
    elif fault.kind == "two-brokers":
        c.cut(fault.members[0], fault.members[1])
    else:
        c.cut(fault.members[0], fault.members[1], one_way=True)
    return fault.describe()


def run_partition_loop(
    scenario: Scenario,
    load: Workload,
    topic: str,
    faults: Sequence[PlannedFault],
    *,
    acks_per_round: int = 100,
) -> None:
    """Run ``faults`` one after the other (module docstring)."""
    scenario.event("plan: " + "; ".join(f"{f.describe()} {f.seconds} s" for f in faults))
    for number, fault in enumerate(faults, start=1):
        what = _cut(scenario, fault, topic)
        scenario.event(f"round {number}: {what} for {fault.seconds} s")
        time.sleep(fault.seconds)  # the fault's duration, not a synchronisation
        scenario.c.heal_all()
        scenario.event(f"round {number}: healed")
        scenario.wait_converged()
        scenario.event(f"round {number}: converged")
        load.wait_acked(acks_per_round, f"after round {number} ({what})")
