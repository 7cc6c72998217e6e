"""The controller's writes of partition states (the ZooKeeper side of Kafka's ``PartitionStateMachine`` and
``ReplicaStateMachine``): first states of new partitions, and read-decide-write for every later change.

Invariants:

- **Decided on what was read.** :meth:`PartitionStateWriter.update` reads each partition's state znode,
  hands it to the caller's decision, and writes the result conditionally on the partition epoch it read
  (fenced by the controller epoch). A partition whose state moved meanwhile (the leader's own ISR write:
  BADVERSION) is read and decided again, as Kafka's retry loop, until nothing is left to retry; a decision
  is never written over a state it did not see.
- **Fenced twice.** Before reading and before writing it asks the controller for its epoch (``fence``),
  which raises :class:`ControllerMovedError` once the controller resigned; a state stamped by a newer
  controller epoch than ours raises it too (another controller is active).
- New partitions get their state with a create (never an overwrite): one that exists already (made by an
  earlier controller) is read instead.
- The controller's view (:class:`ControllerContext`) gets every state read or written; every written
  state is logged at INFO in Kafka's words (an unclean election at WARNING).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tidelog.protocol import TopicPartition
from tidelog.replication.controller_context import ControllerContext
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.server.zk.client import ControllerEpoch, KafkaZkClient
from tidelog.server.zk.errors import ControllerMovedError, ZkError

__all__ = ["PartitionStateWriter", "StateChanges", "describe_state_change"]

log = logging.getLogger("tidelog.controller")

Decide = Callable[[TopicPartition, LeaderAndIsr], LeaderAndIsr | None]
Prepare = Callable[[Mapping[TopicPartition, LeaderAndIsr]], Awaitable[None]]


def ids(values: Iterable[int]) -> str:
    """``1,2,3``: broker ids as Kafka's logs show them."""
    return ",".join(str(v) for v in values)


def describe_state_change(tp: TopicPartition, old: LeaderAndIsr | None, new: LeaderAndIsr) -> str:
    """A written partition state in Kafka's words: ``Partition t-0 elected leader 2 with ISR [2,3] at
    leader epoch 5`` (``old`` None: a new partition)."""
    isr = ids(new.isr)
    if not new.has_leader:
        return f"Partition {tp} has no leader (offline) with ISR [{isr}] at leader epoch {new.leader_epoch}"
    if old is None or new.leader != old.leader:
        elected = (
            f"Partition {tp} elected leader {new.leader} with ISR [{isr}] at leader epoch {new.leader_epoch}"
        )
        if old is not None and new.leader not in old.isr:
            return f"{elected}, an unclean election: {new.leader} was not in the ISR [{ids(old.isr)}]"
        return elected
    return (
        f"Partition {tp} ISR changed from [{ids(old.isr)}] to [{isr}] with leader {new.leader} "
        f"at leader epoch {new.leader_epoch}"
    )


@dataclass
class StateChanges:
    """What :meth:`PartitionStateWriter.update` did, per partition: written (the new state), unchanged
    (the decision was to write nothing; the state read), failed (no state znode, or ZooKeeper's error)."""

    written: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    unchanged: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    failed: dict[TopicPartition, Exception] = field(default_factory=dict)


class PartitionStateWriter:
    """Writes partition states for one controller (see the module docstring)."""

    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        broker_id: int,
        fence: Callable[[], ControllerEpoch],
    ) -> None:
        self.zk = zk
        self.context = context
        self.broker_id = broker_id
        self.fence = fence

    @property
    def _prefix(self) -> str:
        return f"[Controller id={self.broker_id} epoch={self.context.epoch}]"

    async def create_initial_states(self, partitions: Iterable[TopicPartition]) -> None:
        """NewPartition -> OnlinePartition: create each state znode (leader = first live replica, ISR =
        the live replicas, leader epoch 0). A partition with no live replica waits for a broker start-up."""
        context = self.context
        states: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in partitions:
            initial = context.initial_state(tp)
            if initial is None:
                log.warning(
                    "%s Partition %s stays new: no assigned replica is alive (assigned [%s], live brokers [%s])",
                    self._prefix,
                    tp,
                    ids(context.replicas(tp)),
                    ids(sorted(context.live_broker_ids)),
                )
                continue
            states[tp] = initial
        if not states:
            return
        outcomes = await self.zk.create_partition_states(states, self.fence())
        existing: list[TopicPartition] = []
        for tp, outcome in outcomes.items():
            if isinstance(outcome, Exception):
                existing.append(tp)
                continue
            context.leadership[tp] = outcome
            self._log_change(tp, None, outcome, "new partition")
        if existing:  # created by an earlier controller (NodeExists), or failed: take what is there
            found = await self.zk.get_partition_states(existing)
            context.leadership.update(found)
            for tp in existing:
                if tp not in found:
                    log.error(
                        "%s Failed to create the state of new partition %s: %r",
                        self._prefix,
                        tp,
                        outcomes[tp],
                    )

    async def update(
        self,
        partitions: Iterable[TopicPartition],
        decide: Decide,
        *,
        reason: str,
        prepare: Prepare | None = None,
    ) -> StateChanges:
        """Read each partition's state, ``decide`` on it (None: leave it), write the decisions conditionally
        on the partition epoch read; partitions whose state moved meanwhile are read and decided again
        (Kafka's ``doElectLeaderForPartitions`` / ``removeReplicasFromIsr`` loops). ``prepare`` sees every
        batch of states read before the decisions (to fetch what they need, e.g. topic configs)."""
        changes = StateChanges()
        remaining = list(dict.fromkeys(partitions))
        while remaining:
            epoch = self.fence()
            states = await self.zk.get_partition_states(remaining)
            for tp in remaining:
                state = states.get(tp)
                if state is None:
                    changes.failed[tp] = ZkError(f"partition {tp} has no state znode")
                    continue
                if state.controller_epoch > epoch.epoch:
                    raise ControllerMovedError(
                        f"the state of partition {tp} was written by controller epoch "
                        f"{state.controller_epoch}, after this controller's {epoch.epoch}"
                    )
                self.context.leadership[tp] = state
            if prepare is not None:
                await prepare(states)
            updates: dict[TopicPartition, LeaderAndIsr] = {}
            for tp, state in states.items():
                decided = decide(tp, state)
                if decided is None:
                    changes.unchanged[tp] = state
                else:
                    updates[tp] = decided
            if not updates:
                break
            result = await self.zk.update_leader_and_isr(updates, self.fence())
            for tp, written in result.finished.items():
                if isinstance(written, Exception):
                    changes.failed[tp] = written
                    log.error(
                        "%s Failed to write the state of partition %s (%s): %r",
                        self._prefix,
                        tp,
                        reason,
                        written,
                    )
                    continue
                self.context.leadership[tp] = written
                changes.written[tp] = written
                self._log_change(tp, states[tp], written, reason)
            for tp in result.retry:
                log.debug(
                    "%s Partition %s changed under the controller (%s): reading it again",
                    self._prefix,
                    tp,
                    reason,
                )
            remaining = list(result.retry)
        return changes

    def _log_change(
        self, tp: TopicPartition, old: LeaderAndIsr | None, new: LeaderAndIsr, reason: str
    ) -> None:
        unclean = (
            old is not None and new.has_leader and new.leader != old.leader and new.leader not in old.isr
        )
        level = logging.WARNING if unclean else logging.INFO
        log.log(level, "%s %s (%s)", self._prefix, describe_state_change(tp, old, new), reason)
