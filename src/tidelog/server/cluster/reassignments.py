"""The controller's partition reassignments (KIP-455 in Kafka's ZooKeeper mode: ``KafkaController``'s
``onPartitionReassignment``), driven through ZooKeeper like everything else the controller decides.

A move of a partition from its original replicas (ORS) to target replicas (TRS):

1. The topic znode gets the full set RS = TRS + ORS with ``adding_replicas`` (TRS - ORS) and
   ``removing_replicas`` (ORS - TRS). Brokers watch it: an adding broker creates its replica and follows
   the leader (its follower fetches copy the log); the leader counts it as a follower and adds it to the
   ISR once caught up (its own conditional ISR write).
2. The controller watches the state znode of every partition being moved; once every target replica is
   in the ISR it writes the partition state that ends the move (a new leader epoch; a leader from the
   target set if the current one is not in it; the ISR without the removed replicas), then the topic znode
   with RS = TRS and no adding / removing replicas.
3. A removed broker sees the new assignment without itself, stops its replica and deletes its log
   (:class:`~tidelog.server.cluster.metadata_watcher.MetadataWatcher`).

A cancellation (a null target) ends the move at once towards the original replicas (step 2 with TRS =
ORS, not waiting for the ISR): the added replicas are removed the same way.

Invariants:

- The state of a move is in ZooKeeper only (the topic znode); a new controller finds the moves in progress
  when it loads the topics and carries them on (:meth:`PartitionReassigner.resume`).
- Every topic-znode write is fenced and conditional on the version read
  (:meth:`KafkaZkClient.update_topic_assignment`); every state write is the controller's
  read-decide-write (:class:`PartitionStateWriter`), and completeness is decided on the state read then.
- The final state is written before the final assignment: a controller that dies between the two leaves a
  move whose target replicas are all in the ISR, which the next controller completes again. (A
  cancellation interrupted that way is carried on as the original move; its caller got NOT_CONTROLLER.)
- Requests are validated as Kafka does: INVALID_REPLICA_ASSIGNMENT (empty, duplicate, negative ids, new
  replicas on brokers that are not alive), UNKNOWN_TOPIC_OR_PARTITION (unknown, or its topic being
  deleted), NO_REASSIGNMENT_IN_PROGRESS (a cancellation of a partition that is not moving).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.replication.controller_context import ControllerContext
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.reassignment import PartitionReassignment, completed_state, invalid_target
from tidelog.server.zk.client import ControllerEpoch, KafkaZkClient
from tidelog.server.zk.session import Watch
from tidelog.server.zk.zk_data import ReplicaAssignment, TopicAssignment

from .partition_state_writer import PartitionStateWriter, ids

__all__ = ["PartitionReassigner"]

log = logging.getLogger("tidelog.controller")


def _of(assignment: ReplicaAssignment) -> PartitionReassignment:
    return PartitionReassignment(
        assignment.replicas, assignment.adding_replicas, assignment.removing_replicas
    )


class PartitionReassigner:
    """The active controller's moves in progress (see the module docstring). ``on_state_change(tp)`` is
    called from a state znode's watch (it should only queue an event that calls :meth:`on_isr_change`)."""

    def __init__(
        self,
        zk: KafkaZkClient,
        context: ControllerContext,
        states: PartitionStateWriter,
        broker_id: int,
        fence: Callable[[], ControllerEpoch],
        on_state_change: Callable[[TopicPartition], None],
    ) -> None:
        self.zk = zk
        self.context = context
        self.states = states
        self.broker_id = broker_id
        self.fence = fence
        self._on_state_change = on_state_change
        self.ongoing: dict[TopicPartition, PartitionReassignment] = {}
        self._watches: dict[TopicPartition, Watch] = {}

    @property
    def _prefix(self) -> str:
        return f"[Controller id={self.broker_id} epoch={self.context.epoch}]"

    def clear(self) -> None:
        """The controller resigned: forget the moves (they stay in ZooKeeper), cancel the watches."""
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        self.ongoing.clear()

    def track(self, assignment: TopicAssignment) -> None:
        """A topic loaded into the view: remember its partitions being moved (no I/O)."""
        for partition, replicas in assignment.partitions.items():
            tp = TopicPartition(assignment.topic, partition)
            if replicas.adding_replicas or replicas.removing_replicas:
                self.ongoing[tp] = _of(replicas)
            else:
                self._forget(tp)

    async def resume(self) -> None:
        """After a failover: watch every move found in ZooKeeper and complete those already complete."""
        if self.ongoing:
            log.info(
                "%s Resuming reassignments of %s",
                self._prefix,
                ", ".join(f"{tp}: [{ids(r.target)}]" for tp, r in sorted(self.ongoing.items())),
            )
        for tp in sorted(self.ongoing):
            self._watch(tp)
            await self.on_isr_change(tp)

    def current(self, tp: TopicPartition) -> PartitionReassignment:
        found = self.ongoing.get(tp)
        return found if found is not None else PartitionReassignment(self.context.replicas(tp))

    def in_progress(
        self, partitions: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The moves in progress among ``partitions`` (None: all)."""
        wanted = sorted(self.ongoing) if partitions is None else list(dict.fromkeys(partitions))
        return {tp: self.ongoing[tp] for tp in wanted if tp in self.ongoing}

    # ---- requests ----

    async def alter(
        self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
    ) -> dict[TopicPartition, KafkaProtocolError | None]:
        """Start, replace or cancel (target None) moves; per partition None (accepted) or the error."""
        results: dict[TopicPartition, KafkaProtocolError | None] = {}
        context = self.context
        for tp, target in reassignments.items():
            if not context.has_partition(tp) or context.is_queued_for_deletion(tp.topic):
                results[tp] = KafkaProtocolError(
                    "The partition does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                continue
            current = self.current(tp)
            if target is None:
                if not current.is_being_reassigned:
                    results[tp] = KafkaProtocolError(
                        f"No reassignment in progress for partition {tp}.",
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    )
                    continue
                await self._cancel(tp, current)
                results[tp] = None
                continue
            reason = invalid_target(current, target, context.live_broker_ids)
            if reason is not None:
                results[tp] = KafkaProtocolError(reason, ErrorCode.INVALID_REPLICA_ASSIGNMENT)
                continue
            await self._start(tp, current, current.reassign_to(target))
            results[tp] = None
        return results

    async def _start(
        self, tp: TopicPartition, current: PartitionReassignment, moved: PartitionReassignment
    ) -> None:
        log.info(
            "%s Reassigning partition %s from [%s] to [%s]: replicas [%s], adding [%s], removing [%s]",
            self._prefix,
            tp,
            ids(current.origin),
            ids(moved.target),
            ids(moved.replicas),
            ids(moved.adding),
            ids(moved.removing),
        )
        await self._write_assignment(tp, moved)
        dropped = [r for r in current.replicas if r not in moved.replicas]
        if dropped:  # replicas added by the move this one replaces: out of the ISR (and leadership) at once
            live = self.context.live_broker_ids

            def drop(_tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | None:
                if state.leader not in dropped and not any(r in state.isr for r in dropped):
                    return None
                return completed_state(state, moved.replicas, live)

            await self.states.update(
                [tp], drop, reason=f"replicas {ids(dropped)} no longer wanted by the reassignment of {tp}"
            )
        self._watch(tp)
        await self.on_isr_change(tp)

    async def _cancel(self, tp: TopicPartition, current: PartitionReassignment) -> None:
        log.info(
            "%s Cancelling the reassignment of partition %s to [%s]: back to [%s]",
            self._prefix,
            tp,
            ids(current.target),
            ids(current.origin),
        )
        await self._finish(tp, current.cancelled(), reason=f"reassignment of {tp} cancelled")

    # ---- completion ----

    async def on_isr_change(self, tp: TopicPartition) -> None:
        """The partition's state changed: complete its move if every target replica is in the ISR now."""
        moving = self.ongoing.get(tp)
        if moving is None:
            self._unwatch(tp)
            return
        if not self.context.has_partition(tp):
            self._forget(tp)
            return
        complete = False

        def decide(_tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | None:
            nonlocal complete
            complete = moving.is_complete(state.isr)
            return completed_state(state, moving.target, self.context.live_broker_ids) if complete else None

        outcome = await self.states.update([tp], decide, reason=f"reassignment of {tp} completed")
        if tp in outcome.written:
            await self._write_assignment(tp, moving.completed())
            self._forget(tp)
            log.info(
                "%s Reassignment of partition %s to [%s] completed", self._prefix, tp, ids(moving.target)
            )

    async def _finish(self, tp: TopicPartition, final: PartitionReassignment, *, reason: str) -> None:
        """Write the state that ends a move with ``final.replicas`` (unconditionally), then the assignment."""
        live = self.context.live_broker_ids
        await self.states.update(
            [tp], lambda _tp, state: completed_state(state, final.replicas, live), reason=reason
        )
        await self._write_assignment(tp, final)
        self._forget(tp)

    # ---- ZooKeeper ----

    async def _write_assignment(self, tp: TopicPartition, reassignment: PartitionReassignment) -> None:
        new = ReplicaAssignment(reassignment.replicas, reassignment.adding, reassignment.removing)

        def change(assignment: TopicAssignment) -> TopicAssignment:
            return replace(assignment, partitions={**assignment.partitions, tp.partition: new})

        written = await self.zk.update_topic_assignment(tp.topic, change, self.fence())
        if written is None:
            raise KafkaProtocolError("The partition does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self.context.add_partitions(tp.topic, {tp.partition: reassignment.replicas})
        if reassignment.is_being_reassigned:
            self.ongoing[tp] = reassignment

    def _watch(self, tp: TopicPartition) -> None:
        if tp not in self._watches:
            self._watches[tp] = self.zk.watch_partition_state(tp, lambda _state: self._on_state_change(tp))

    def _unwatch(self, tp: TopicPartition) -> None:
        watch = self._watches.pop(tp, None)
        if watch is not None:
            watch.cancel()

    def _forget(self, tp: TopicPartition) -> None:
        self.ongoing.pop(tp, None)
        self._unwatch(tp)
