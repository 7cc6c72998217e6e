"""The controller's view of the cluster (Kafka's ``ControllerContext``) and the decisions it makes from it.

The controller loads this view from ZooKeeper when it is elected, keeps it current with the events it
handles and its own writes, and drops it when it resigns. It holds the live brokers with their broker
epochs, the brokers shutting down, every topic's id and replica assignment, the last partition state the
controller read or wrote, and the topics queued for deletion.

Invariants:

- **It selects, ZooKeeper decides.** A partition's leader and leader epoch change only by the
  controller's writes, so the cached *leader* is exact while this controller is active; the ISR is not
  (a leader shrinks and expands it with its own conditional writes). The controller therefore uses the
  view to pick which partitions to look at, then re-reads each partition's state and decides on what it
  read (the ``decide_*`` functions here take that fresh state).
- **Live means registered and not shutting down** (Kafka's ``liveBrokerIds``): a broker in controlled
  shutdown still has its ``/brokers/ids/N`` but is never chosen as a leader or put in a new ISR.
- **A topic queued for deletion is out of every election and initialisation**, so a deletion that
  stopped midway (a controller failover) is never undone by giving its partitions new states.
- A bounced broker (same id, larger broker epoch: it registered from a new ZooKeeper session) is a
  failure followed by a start-up.
- Pure: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidelog.protocol import TopicPartition

from .leader_and_isr import (
    NO_LEADER,
    LeaderAndIsr,
    controlled_shutdown_election,
    initial_leader_and_isr,
    offline_partition_election,
    preferred_replica_election,
    remove_replicas_from_isr,
)

__all__ = ["BrokerChanges", "ControllerContext"]


@dataclass(frozen=True)
class BrokerChanges:
    """What a new read of ``/brokers/ids`` means against the view (Kafka's ``processBrokerChange``)."""

    new: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    bounced: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.new or self.dead or self.bounced)


@dataclass
class ControllerContext:
    """The active controller's view of the cluster (see the module docstring)."""

    epoch: int = 0
    live_broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID | None] = field(default_factory=dict)
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)

    def clear(self) -> None:
        self.epoch = 0
        self.live_broker_epochs.clear()
        self.shutting_down_broker_ids.clear()
        self.topic_ids.clear()
        self.assignments.clear()
        self.leadership.clear()
        self.topics_to_delete.clear()

    # ---- brokers ----

    @property
    def live_broker_ids(self) -> frozenset[int]:
        """Registered and not shutting down: the brokers that may lead or join a new ISR."""
        return frozenset(self.live_broker_epochs.keys() - self.shutting_down_broker_ids)

    @property
    def live_or_shutting_down_broker_ids(self) -> frozenset[int]:
        return frozenset(self.live_broker_epochs)

    def broker_changes(self, current: Mapping[int, int]) -> BrokerChanges:
        """Compare the registered brokers (id -> broker epoch) with the view."""
        known = self.live_broker_epochs
        return BrokerChanges(
            new=tuple(sorted(current.keys() - known.keys())),
            dead=tuple(sorted(known.keys() - current.keys())),
            bounced=tuple(sorted(b for b in current.keys() & known.keys() if current[b] > known[b])),
        )

    def add_live_brokers(self, epochs: Mapping[int, int]) -> None:
        self.live_broker_epochs.update(epochs)

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self.live_broker_epochs.pop(broker_id, None)
            self.shutting_down_broker_ids.discard(broker_id)

    # ---- topics and assignments ----

    @property
    def all_topics(self) -> frozenset[str]:
        return frozenset(self.assignments)

    def add_topic(
        self, topic: str, topic_id: uuid.UUID | None, partitions: Mapping[int, Sequence[int]]
    ) -> None:
        self.topic_ids[topic] = topic_id
        self.assignments[topic] = {p: tuple(replicas) for p, replicas in sorted(partitions.items())}

    def add_partitions(self, topic: str, partitions: Mapping[int, Sequence[int]]) -> None:
        self.assignments.setdefault(topic, {}).update({p: tuple(r) for p, r in partitions.items()})

    def remove_topic(self, topic: str) -> None:
        for partition in self.assignments.pop(topic, {}):
            self.leadership.pop(TopicPartition(topic, partition), None)
        self.topic_ids.pop(topic, None)
        self.topics_to_delete.discard(topic)

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        """The partition's assigned replicas in preference order (empty for an unknown partition)."""
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def has_partition(self, tp: TopicPartition) -> bool:
        return tp.partition in self.assignments.get(tp.topic, {})

    def partitions(self, topic: str | None = None) -> list[TopicPartition]:
        """Every known partition (of ``topic``), in topic and partition order."""
        topics = [topic] if topic is not None else sorted(self.assignments)
        return [TopicPartition(t, p) for t in topics for p in sorted(self.assignments.get(t, {}))]

    def partitions_on_brokers(self, broker_ids: Collection[int]) -> list[TopicPartition]:
        """The partitions with a replica on any of ``broker_ids`` (Kafka's ``partitionsOnBroker``)."""
        return [tp for tp in self.partitions() if any(r in broker_ids for r in self.replicas(tp))]

    def is_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    # ---- partition states ----

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {tp for tp, state in self.leadership.items() if state.leader == broker_id}

    def new_partitions(self, topic: str | None = None) -> list[TopicPartition]:
        """Assigned partitions without a state znode yet (Kafka's NewPartition), not being deleted."""
        return [
            tp
            for tp in self.partitions(topic)
            if tp not in self.leadership and not self.is_queued_for_deletion(tp.topic)
        ]

    def offline_partitions(self, topic: str | None = None) -> list[TopicPartition]:
        """Partitions whose leader is none or not registered (Kafka's OfflinePartition), not being deleted.
        A broker in controlled shutdown still leads what it could not hand over."""
        registered = self.live_or_shutting_down_broker_ids
        return [
            tp
            for tp in self.partitions(topic)
            if (state := self.leadership.get(tp)) is not None
            and state.leader not in registered
            and not self.is_queued_for_deletion(tp.topic)
        ]

    def initial_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        return initial_leader_and_isr(self.replicas(tp), self.live_broker_ids, self.epoch)

    # ---- decisions on a freshly read state ----

    def decide_offline(
        self,
        tp: TopicPartition,
        current: LeaderAndIsr,
        *,
        unclean: bool,
        offline_followers: Collection[int] = (),
    ) -> LeaderAndIsr | None:
        """Kafka's ``onReplicasBecomeOffline`` for one partition. If its leader is gone (none, or not
        registered): elect a new one among the live replicas (:func:`offline_partition_election`, unclean
        only if allowed); if none can lead, the partition loses its leader and the ISR its unregistered
        members (never emptied). If its leader is there, the ``offline_followers`` in its ISR that are
        gone leave it. None: nothing to write."""
        registered = self.live_or_shutting_down_broker_ids
        if current.leader not in registered:
            live = self.live_broker_ids
            elected = offline_partition_election(self.replicas(tp), current, live, unclean=unclean)
            if elected is not None:
                return elected
            return remove_replicas_from_isr(current, [r for r in current.isr if r not in registered])
        leaving = [r for r in current.isr if r in offline_followers and r not in registered]
        return remove_replicas_from_isr(current, leaving) if leaving else None

    def needs_unclean_check(self, current: LeaderAndIsr) -> bool:
        """True when only an unclean election could give the partition a leader: its leader is gone and no
        ISR member is live."""
        live = self.live_broker_ids
        return current.leader not in self.live_or_shutting_down_broker_ids and not any(
            r in live for r in current.isr
        )

    def decide_controlled_shutdown(
        self, tp: TopicPartition, current: LeaderAndIsr, broker_id: int
    ) -> LeaderAndIsr | None:
        """A broker shutting down: where it leads, the first live ISR member not shutting down takes over
        (the ISR loses the brokers shutting down); where it follows, it leaves the ISR (never emptying it).
        None: nothing to write (no other replica can lead, or it is not in the ISR)."""
        if current.leader == broker_id:
            return controlled_shutdown_election(
                self.replicas(tp),
                current,
                self.live_or_shutting_down_broker_ids,
                self.shutting_down_broker_ids,
            )
        if broker_id in current.isr:
            return remove_replicas_from_isr(current, [broker_id])
        return None

    def decide_preferred(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        """Leadership back to the preferred replica if it is live and in the ISR (and not leading yet)."""
        return preferred_replica_election(self.replicas(tp), current, self.live_broker_ids)

    def decide_unclean(self, tp: TopicPartition, current: LeaderAndIsr) -> LeaderAndIsr | None:
        """ElectLeaders(UNCLEAN): a partition without a live leader gets one, from outside the ISR if need be."""
        if current.leader in self.live_or_shutting_down_broker_ids:
            return None
        return offline_partition_election(self.replicas(tp), current, self.live_broker_ids, unclean=True)

    # ---- preferred leaders ----

    def preferred_replica_imbalance(self, imbalance_percentage: int) -> list[TopicPartition]:
        """Kafka's ``checkAndTriggerAutoLeaderRebalance``: for each broker, the partitions whose preferred
        (first assigned) replica it is; if the fraction of them it does not lead is above
        ``imbalance_percentage`` %, those it does not lead are candidates for a preferred election if it is
        live. Whether it is in the ISR is left to :meth:`decide_preferred` on the state read then: the
        cached ISR misses the leaders' own ISR expansions. Partitions being deleted are left out."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self.partitions():
            replicas = self.replicas(tp)
            if replicas and not self.is_queued_for_deletion(tp.topic):
                by_preferred.setdefault(replicas[0], []).append(tp)
        live = self.live_broker_ids
        candidates: list[TopicPartition] = []
        for broker_id, partitions in sorted(by_preferred.items()):
            not_led = [
                tp
                for tp in partitions
                if (state := self.leadership.get(tp)) is not None and state.leader != broker_id
            ]
            if broker_id in live and len(not_led) / len(partitions) > imbalance_percentage / 100:
                candidates += not_led
        return candidates

    def leader_of(self, tp: TopicPartition) -> int:
        state = self.leadership.get(tp)
        return state.leader if state is not None else NO_LEADER
