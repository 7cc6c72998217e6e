"""The cluster's controller (Kafka 3.3's ZooKeeper-mode ``KafkaController``): one broker, elected through
``/controller``, decides every partition's leader and writes it to the partition's state znode, where
the brokers watch it (see ARCHITECTURE.md, *Cluster mode*: decisions are delivered by ZooKeeper, not by controller RPCs).

Every broker runs a :class:`Controller`; it campaigns whenever ``/controller`` is absent. The winner of an
epoch (:meth:`KafkaZkClient.elect_controller`: exactly one per epoch) loads the cluster from ZooKeeper
and handles, one event at a time (:mod:`.controller_events`):

- **broker failures** (an id leaves ``/brokers/ids``, or comes back with a larger broker epoch: a bounce
  is a failure then a start-up): partitions it led get a new leader (first live ISR member in assignment
  order, unclean only where ``unclean.leader.election.enable`` allows it), or lose their leader if none
  can lead; it leaves the ISR of the partitions it followed, never emptying one;
- **broker start-ups**: partitions without a leader, and new partitions that had no live replica, are
  elected / initialised again;
- **new topics and partitions**: the first state (leader = first live replica, ISR = the live replicas,
  leader epoch 0);
- **topic deletions** (``/admin/delete_topics/T``, if ``delete.topic.enable``): the topic's znodes go
  in one multi, then ``/config/topics/T``, then the marker last, so a controller elected midway finishes
  the job;
- **controlled shutdown** requests, **preferred leader elections** (periodic when
  ``auto.leader.rebalance.enable``) and **ElectLeaders**;
- **partition reassignments** (AlterPartitionReassignments / ListPartitionReassignments, KIP-455):
  :mod:`.reassignments`.

Invariants:

- **Never from a stale view.** Every partition-state write is a read-modify-write: the controller reads
  the state znode, decides on what it read, and writes conditionally on the partition epoch it read
  (:meth:`KafkaZkClient.update_leader_and_isr`); partitions whose state moved meanwhile (a leader's ISR
  write) are read again and decided again (Kafka's retry loop), never overwritten.
- **Fenced.** Every write is fenced by ``/controller_epoch``'s version; a :class:`ControllerMovedError`
  (or a state stamped by a newer controller epoch) makes this controller resign at once: it stops acting,
  drops its view and cancels its watches. It also never writes from a ZooKeeper session other than the
  one it was elected in.
- **Session expiry** resigns at once (the ephemeral ``/controller`` died with the session); the
  controller campaigns again once the new session is up.
- **Leader epochs** rise by one on every leader change (and on every controller ISR change, as Kafka's
  controller does); a failover rewrites no partition whose leader is alive.
- Every decision is logged at INFO in Kafka's words
  (``Partition t-0 elected leader 2 with ISR [2,3] at leader epoch 5 (offline partition election)``).

Not done (Kafka's controller does them): the pre-KIP-455 ``/admin/reassign_partitions`` znode (moves are
made through the API only), log-directory failures,
KIP-704's RECOVERING state after an unclean election (written as RECOVERED, as before Kafka 3.2), feature
versioning. ``/isr_change_notification`` is read and cleared, but only to refresh the view: leaders need
not write it, since the controller never decides on a cached ISR.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.replication.controller_context import ControllerContext
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.reassignment import PartitionReassignment
from tidelog.server.clock import SYSTEM_CLOCK, Clock
from tidelog.server.config import BrokerConfig
from tidelog.server.zk import paths
from tidelog.server.zk.client import ControllerEpoch, KafkaZkClient
from tidelog.server.zk.errors import ControllerMovedError, ZkError, ZkSessionExpiredError
from tidelog.server.zk.session import Watch, ZnodeStat
from tidelog.server.zk.zk_data import TopicAssignment, ZkDataError, decode_topic_assignment

from .controller_events import (
    AlterPartitionReassignments,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    BrokerNotAvailableError,
    ConfigChange,
    ControlledShutdown,
    ControllerChange,
    ControllerEvent,
    ControllerEventManager,
    ElectionType,
    Expire,
    IsrChangeNotification,
    ListPartitionReassignments,
    LogDirEventNotification,
    NotControllerError,
    PartitionModifications,
    PartitionReassignmentIsrChange,
    Reelect,
    ReplicaLeaderElection,
    Resign,
    StaleBrokerEpochError,
    Startup,
    TopicChange,
    TopicDeletion,
)
from .log_dir_events import process_log_dir_events
from .partition_state_writer import PartitionStateWriter, StateChanges, ids
from .reassignments import PartitionReassigner

__all__ = [
    "UNKNOWN_BROKER_EPOCH",
    "BrokerNotAvailableError",
    "Controller",
    "ControllerConfig",
    "ElectionType",
    "NotControllerError",
    "StaleBrokerEpochError",
]

log = logging.getLogger("tidelog.controller")

UNKNOWN_BROKER_EPOCH = -1
"""A ControlledShutdown without a broker epoch (versions before 2): not checked, as in Kafka."""

_UNCLEAN_KEY = "unclean.leader.election.enable"


@dataclass(frozen=True)
class ControllerConfig:
    """The broker configs the controller reads (Kafka's names and defaults)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    delete_topic_enable: bool = True

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ControllerConfig:
        return cls(
            unclean_leader_election_enable=config.unclean_leader_election_enable,
            auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds=config.leader_imbalance_check_interval_seconds,
            leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
            delete_topic_enable=config.delete_topic_enable,
        )


class Controller:
    """One broker's controller: campaigns for ``/controller`` and, while it holds it, runs the cluster.

    ``start()`` once; ``stop()`` at shutdown (it resigns if active, so another broker takes over at once).
    The request methods (:meth:`controlled_shutdown`, :meth:`elect_leaders`, :meth:`resign`) run through
    the event queue and raise :class:`NotControllerError` when this broker is not the active controller.
    """

    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        *,
        config: ControllerConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._clock = clock
        self.config = config if config is not None else ControllerConfig()
        self.context = ControllerContext()
        self._states = PartitionStateWriter(zk, self.context, broker_id, self._writable)
        self._events = ControllerEventManager(self._process)
        self._reassignments = PartitionReassigner(
            zk,
            self.context,
            self._states,
            broker_id,
            self._writable,
            lambda tp: self._events.put(PartitionReassignmentIsrChange(tp)),
        )
        self._controller_epoch: ControllerEpoch | None = None
        self._session_id: int | None = None
        self._active_controller_id: int | None = None
        self._started = False
        self._stopped = False
        self._controller_watch: Watch | None = None
        self._watches: list[Watch] = []
        self._topic_watches: dict[str, Watch] = {}
        self._broker_watches: dict[int, Watch] = {}
        self._rebalance_task: asyncio.Task[None] | None = None

    # ---- public API ----

    @property
    def is_active(self) -> bool:
        """This broker is the controller (and has not learnt otherwise)."""
        return self._controller_epoch is not None

    @property
    def epoch(self) -> int | None:
        """The controller epoch this broker won, while it is the active controller."""
        return self._controller_epoch.epoch if self._controller_epoch is not None else None

    @property
    def controller_epoch(self) -> ControllerEpoch | None:
        """The epoch and ``/controller_epoch`` version that fence this controller's writes, while active."""
        return self._controller_epoch

    @property
    def active_controller_id(self) -> int | None:
        """The controller as this broker last saw ``/controller`` (None: none elected)."""
        return self._active_controller_id

    async def start(self) -> None:
        """Start campaigning (call once, from the event loop that runs the ZooKeeper session)."""
        if self._started:
            raise RuntimeError("the controller is already started")
        self._started = True
        self.zk.session.on_expired(self._on_session_expired)
        self.zk.session.on_new_session(self._on_new_session)
        self._events.start()
        self._events.put(Startup())

    async def stop(self) -> None:
        """Stop campaigning and resign if active (deleting ``/controller``, so another broker takes over
        without waiting for this broker's session to end). Pending requests get NOT_CONTROLLER."""
        if self._stopped:
            return
        self._stopped = True
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        epoch = self._controller_epoch
        await self._events.close()
        self._resign_locally()
        if epoch is not None:
            with contextlib.suppress(ZkError, TimeoutError):
                async with asyncio.timeout(self.zk.session.session_timeout_ms / 1000):
                    await self.zk.resign_controller(epoch)

    async def resign(self) -> None:
        """Step down now (Kafka's ``triggerControllerMove``): drop the view, delete ``/controller``. The
        brokers campaign again at once, this one included, so any of them may win the next epoch."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._events.put(Resign(future))
        await future

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int = UNKNOWN_BROKER_EPOCH
    ) -> set[TopicPartition]:
        """Kafka's ``doControlledShutdown``: move leadership off ``broker_id`` (partitions with more than
        one replica) and take it out of the ISRs it follows; returns the partitions it still leads (those
        no other ISR member could take, and its single-replica ones).

        Raises :class:`NotControllerError`, :class:`StaleBrokerEpochError` (``broker_epoch`` older than
        its registration) or :class:`BrokerNotAvailableError` (not registered).
        """
        future: asyncio.Future[set[TopicPartition]] = asyncio.get_running_loop().create_future()
        self._events.put(ControlledShutdown(broker_id, broker_epoch, future))
        return await future

    async def elect_leaders(
        self, partitions: Collection[TopicPartition], election_type: ElectionType
    ) -> dict[TopicPartition, LeaderAndIsr | KafkaProtocolError]:
        """ElectLeaders: per partition its new state, or the error (ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_TOPIC_EXCEPTION while the topic is being deleted). Raises :class:`NotControllerError`."""
        future: asyncio.Future[dict[TopicPartition, LeaderAndIsr | KafkaProtocolError]] = (
            asyncio.get_running_loop().create_future()
        )
        self._events.put(ReplicaLeaderElection(tuple(partitions), election_type, future))
        return await future

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, KafkaProtocolError | None]:
        """AlterPartitionReassignments: start, replace or cancel (None) moves; per partition None or the
        error (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS).
        Raises :class:`NotControllerError`."""
        future: asyncio.Future[dict[TopicPartition, KafkaProtocolError | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self._events.put(AlterPartitionReassignments(dict(reassignments), future))
        return await future

    async def list_partition_reassignments(
        self, partitions: Collection[TopicPartition] | None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """ListPartitionReassignments: the moves in progress (of ``partitions``; None: all). Raises
        :class:`NotControllerError`."""
        future: asyncio.Future[dict[TopicPartition, PartitionReassignment]] = (
            asyncio.get_running_loop().create_future()
        )
        self._events.put(ListPartitionReassignments(partitions, future))
        return await future

    def update_config(self, config: ControllerConfig) -> None:
        """New (dynamic) broker configs: unclean election may now be allowed, the rebalance timer changes."""
        self.config = config
        if self.is_active:
            self._schedule_rebalance()
            self._events.put(ConfigChange())

    # ---- session and /controller listeners (on the loop; they only queue events) ----

    def _on_session_expired(self, _old_session_id: int) -> None:
        if self._stopped:
            return
        if self.is_active:
            log.warning("[Controller id=%d] ZooKeeper session expired: resigning", self.broker_id)
            self._resign_locally()
        self._events.put(Expire())

    def _on_new_session(self, _new_session_id: int) -> None:
        if not self._stopped:
            self._events.put(Reelect())

    def _on_controller_znode(self, controller_id: int | None) -> None:
        self._active_controller_id = controller_id
        self._events.put(ControllerChange())

    # ---- event processing ----

    async def _process(self, event: ControllerEvent) -> None:
        future = getattr(event, "future", None)
        try:
            await self._handle(event)
        except (ControllerMovedError, ZkSessionExpiredError) as exc:
            if self.is_active:
                log.info("[Controller id=%d] Controller moved (%s): resigning", self.broker_id, exc)
                self._resign_locally()
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_exception(NotControllerError(f"broker {self.broker_id} is not the controller"))
        except KafkaProtocolError as exc:
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_exception(exc)
            else:
                raise

    async def _handle(self, event: ControllerEvent) -> None:
        match event:
            case Startup():
                if self._controller_watch is None:
                    self._controller_watch = self.zk.watch_controller(self._on_controller_znode)
                await self._maybe_resign_and_elect()
            case ControllerChange() | Reelect():
                await self._maybe_resign_and_elect()
            case Expire():
                self._resign_locally()
            case Resign(future=future):
                await self._trigger_controller_move()
                if not future.done():
                    future.set_result(None)
            case BrokerChange():
                await self._process_broker_change()
            case TopicChange():
                await self._process_topic_change()
            case PartitionModifications(topic=topic):
                await self._process_partition_modifications(topic)
            case TopicDeletion():
                await self._process_topic_deletion()
            case IsrChangeNotification():
                await self._process_isr_change_notification()
            case LogDirEventNotification():  # issue 15 hook: a broker's failed log dir
                if self.is_active:
                    await process_log_dir_events(self.zk, self.context, self._states, self._writable())
            case ConfigChange():
                if self.is_active:
                    await self._elect_offline(
                        self.context.offline_partitions(), reason="offline partition election"
                    )
            case AutoPreferredReplicaLeaderElection():
                await self._check_and_trigger_auto_leader_rebalance()
            case ControlledShutdown(broker_id=broker_id, broker_epoch=broker_epoch, future=future):
                remaining = await self._do_controlled_shutdown(broker_id, broker_epoch)
                if not future.done():
                    future.set_result(remaining)
            case ReplicaLeaderElection(partitions=partitions, election_type=kind, future=future):
                results = await self._process_replica_leader_election(partitions, kind)
                if not future.done():
                    future.set_result(results)
            case AlterPartitionReassignments(reassignments=reassignments, future=future):
                if not self.is_active:
                    raise NotControllerError(f"broker {self.broker_id} is not the controller")
                altered = await self._reassignments.alter(reassignments)
                if not future.done():
                    future.set_result(altered)
            case ListPartitionReassignments(partitions=partitions, future=future):
                if not self.is_active:
                    raise NotControllerError(f"broker {self.broker_id} is not the controller")
                if not future.done():
                    future.set_result(self._reassignments.in_progress(partitions))
            case PartitionReassignmentIsrChange(tp=tp):
                if self.is_active:
                    await self._reassignments.on_isr_change(tp)

    # ---- election and resignation ----

    async def _maybe_resign_and_elect(self) -> None:
        if self._stopped:
            return
        controller_id = await self.zk.get_controller_id()
        self._active_controller_id = controller_id
        if self.is_active and controller_id != self.broker_id:
            log.info(
                "[Controller id=%d] Controller moved to broker %s: resigning", self.broker_id, controller_id
            )
            self._resign_locally()
        if controller_id is None:
            await self._elect()

    async def _elect(self) -> None:
        session_id = self.zk.session.session_id
        if session_id is None:
            return  # expired: Reelect comes with the new session
        won = await self.zk.elect_controller(self.broker_id, timestamp_ms=self._clock.now_ms())
        if won is None:
            self._active_controller_id = await self.zk.get_controller_id()
            log.debug(
                "[Controller id=%d] Broker %s has been elected as the controller",
                self.broker_id,
                self._active_controller_id,
            )
            return
        if self.zk.session.session_id != session_id:
            return  # the session ended meanwhile and took /controller with it
        self._controller_epoch = won
        self._session_id = session_id
        self._active_controller_id = self.broker_id
        log.info(
            "[Controller id=%d] %d successfully elected as the controller. Epoch incremented to %d and "
            "epoch zk version is now %d",
            self.broker_id,
            self.broker_id,
            won.epoch,
            won.zk_version,
        )
        try:
            await self._on_controller_failover()
        except (ControllerMovedError, ZkSessionExpiredError):
            raise
        except Exception:
            log.exception(
                "[Controller id=%d] Error while electing or becoming controller on broker %d. "
                "Trigger controller movement immediately",
                self.broker_id,
                self.broker_id,
            )
            await self._trigger_controller_move()

    async def _trigger_controller_move(self) -> None:
        epoch = self._controller_epoch
        if epoch is None:
            return
        self._resign_locally()
        with contextlib.suppress(ControllerMovedError):
            await self.zk.resign_controller(epoch)

    def _resign_locally(self) -> None:
        """Kafka's ``onControllerResignation``: stop acting, cancel the watches and timers, drop the view."""
        was_active = self.is_active
        self._controller_epoch = None
        self._session_id = None
        if self._active_controller_id == self.broker_id:
            self._active_controller_id = None
        for watch in [*self._watches, *self._topic_watches.values(), *self._broker_watches.values()]:
            watch.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        self._broker_watches.clear()
        self._reassignments.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        self.context.clear()
        if was_active:
            log.info("[Controller id=%d] Resigned", self.broker_id)

    def _writable(self) -> ControllerEpoch:
        """The epoch to fence a write with; :class:`ControllerMovedError` if this broker may not write."""
        epoch = self._controller_epoch
        if epoch is None or self.zk.session.session_id != self._session_id:
            raise ControllerMovedError(f"broker {self.broker_id} is no longer the active controller")
        return epoch

    # ---- failover ----

    async def _on_controller_failover(self) -> None:
        """Kafka's ``onControllerFailover``: watch, load the cluster, then bring partitions online."""
        epoch = self._writable()
        context = self.context
        context.clear()
        context.epoch = epoch.epoch
        # Watch before reading: a change made while we read is then an event handled after the load.
        put = self._events.put
        self._watches = [
            self.zk.watch_live_broker_ids(lambda _ids: put(BrokerChange())),
            self.zk.watch_topics(lambda _topics: put(TopicChange())),
            self.zk.watch_topic_deletions(lambda _topics: put(TopicDeletion())),
            self.zk.watch_config_change_notifications(lambda _changes: put(ConfigChange())),
            self.zk.watch_isr_change_notifications(lambda _changes: put(IsrChangeNotification())),
            self.zk.watch_log_dir_events(lambda _events: put(LogDirEventNotification())),  # issue 15 hook
        ]
        brokers = await self.zk.get_live_brokers()
        context.add_live_brokers({broker_id: b.broker_epoch for broker_id, b in brokers.items()})
        self._watch_brokers(brokers)
        await self._add_topics(await self.zk.get_all_topics())
        context.leadership.update(await self.zk.get_partition_states(context.partitions()))
        deletions = await self.zk.get_topic_deletions()
        if self.config.delete_topic_enable:
            context.topics_to_delete.update(deletions)
        log.info(
            "[Controller id=%d] Ready to serve as the new controller with epoch %d: live brokers [%s], "
            "%d topics, %d partitions, topics to delete [%s]",
            self.broker_id,
            epoch.epoch,
            ids(sorted(context.live_broker_epochs)),
            len(context.all_topics),
            len(context.partitions()),
            ",".join(sorted(context.topics_to_delete)),
        )
        await self._trigger_online_partition_state_change()
        await self._process_topic_deletion()
        await self._reassignments.resume()
        self._schedule_rebalance()

    def _schedule_rebalance(self) -> None:
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_timer())

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_seconds)
            self._events.put(AutoPreferredReplicaLeaderElection())

    # ---- watches on brokers and topics ----

    def _watch_brokers(self, registered: Collection[int]) -> None:
        """A data watch per registered broker: a broker that registers again from a new session (a bounce)
        may leave ``/brokers/ids``' children unchanged, its znode's creation is not. (None once resigned:
        a handler that resumes after its controller resigned sets no watch that nothing would cancel.)"""
        if not self.is_active:
            return
        for broker_id in list(self._broker_watches):
            if broker_id not in registered:
                self._broker_watches.pop(broker_id).cancel()
        for broker_id in registered:
            if broker_id not in self._broker_watches:
                self._broker_watches[broker_id] = self.zk.session.watch_data(
                    paths.broker_path(broker_id), self._broker_znode_callback(broker_id)
                )

    def _broker_znode_callback(self, broker_id: int) -> Callable[[tuple[bytes, ZnodeStat] | None], None]:
        def changed(found: tuple[bytes, ZnodeStat] | None) -> None:
            known = self.context.live_broker_epochs.get(broker_id)
            if found is None or known is None or int(found[1].czxid) != known:
                self._events.put(BrokerChange())

        return changed

    def _watch_topic(self, topic: str) -> None:
        if topic in self._topic_watches or not self.is_active:
            return

        def changed(found: tuple[bytes, ZnodeStat] | None) -> None:
            if found is None:
                return  # deleted: the topics' children watch says so
            try:
                assignment = decode_topic_assignment(topic, found[0])
            except ZkDataError:
                self._events.put(PartitionModifications(topic))
                return
            known = self.context.assignments.get(topic)
            if (
                known is None
                or assignment.partitions.keys() - known.keys()
                or assignment.topic_id != self.context.topic_ids.get(topic)
            ):
                self._events.put(PartitionModifications(topic))

        self._topic_watches[topic] = self.zk.session.watch_data(paths.topic_path(topic), changed)

    def _unwatch_topic(self, topic: str) -> None:
        watch = self._topic_watches.pop(topic, None)
        if watch is not None:
            watch.cancel()

    async def _add_topics(self, topics: Iterable[str]) -> list[str]:
        """Watch and load topics into the view (assigning a topic id to a topic without one, as Kafka's
        controller does); returns those loaded (a topic deleted meanwhile or unreadable is left out)."""
        wanted = sorted(topics)
        for topic in wanted:
            self._watch_topic(topic)
        found = await asyncio.gather(
            *(self.zk.get_topic_assignment(topic) for topic in wanted), return_exceptions=True
        )
        loaded: list[str] = []
        for topic, assignment in zip(wanted, found, strict=True):
            if isinstance(assignment, ZkDataError):
                log.error("[Controller id=%d] Ignoring topic %s: %s", self.broker_id, topic, assignment)
                continue
            if isinstance(assignment, BaseException):
                raise assignment
            if assignment is None:
                self._unwatch_topic(topic)
                continue
            if assignment.topic_id is None:
                assignment = await self._assign_topic_id(assignment)
            self.context.add_topic(
                topic, assignment.topic_id, {p: a.replicas for p, a in assignment.partitions.items()}
            )
            self._reassignments.track(assignment)
            loaded.append(topic)
        return loaded

    async def _assign_topic_id(self, assignment: TopicAssignment) -> TopicAssignment:
        with_id = replace(assignment, topic_id=uuid.uuid4())
        log.info(
            "[Controller id=%d] Assigning topic ID %s to topic %s",
            self.broker_id,
            with_id.topic_id,
            assignment.topic,
        )
        await self.zk.set_topic_assignment(with_id, self._writable())
        return with_id

    # ---- partition state changes ----

    async def _trigger_online_partition_state_change(self, topic: str | None = None) -> None:
        """Kafka's ``triggerOnlinePartitionStateChange``: new partitions get their first state, partitions
        without a live leader an election."""
        new = self.context.new_partitions(topic)
        if new:
            await self._states.create_initial_states(new)
        offline = self.context.offline_partitions(topic)
        if offline:
            await self._elect_offline(offline, reason="offline partition election")

    async def _elect_offline(
        self,
        partitions: Iterable[TopicPartition],
        *,
        reason: str,
        offline_followers: Collection[int] = (),
    ) -> StateChanges:
        """Offline partitions get a leader (unclean only where the topic's or the default config allows
        it) or lose their dead one; ``offline_followers`` leave the ISRs they are in."""
        context = self.context
        unclean: dict[str, bool] = {}

        async def prepare(states: Mapping[TopicPartition, LeaderAndIsr]) -> None:
            for tp, state in states.items():
                if tp.topic not in unclean and context.needs_unclean_check(state):
                    unclean[tp.topic] = await self._unclean_leader_election_enabled(tp.topic)

        def decide(tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | None:
            return context.decide_offline(
                tp, state, unclean=unclean.get(tp.topic, False), offline_followers=offline_followers
            )

        return await self._states.update(partitions, decide, reason=reason, prepare=prepare)

    async def _unclean_leader_election_enabled(self, topic: str) -> bool:
        """``/config/topics/T``'s ``unclean.leader.election.enable``, else the controller's config."""
        try:
            overrides = await self.zk.get_topic_config(topic)
        except ZkDataError as exc:
            log.error("[Controller id=%d] Unreadable config of topic %s: %s", self.broker_id, topic, exc)
            return False
        value = overrides.get(_UNCLEAN_KEY)
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    # ---- brokers ----

    async def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        brokers = await self.zk.get_live_brokers()
        current = {broker_id: broker.broker_epoch for broker_id, broker in brokers.items()}
        context = self.context
        self._watch_brokers(current)
        changes = context.broker_changes(current)
        if not changes:
            return
        log.info(
            "[Controller id=%d epoch=%d] Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, "
            "all live brokers: %s",
            self.broker_id,
            context.epoch,
            ids(changes.new),
            ids(changes.dead),
            ids(changes.bounced),
            ids(sorted(current)),
        )
        failed = sorted({*changes.dead, *changes.bounced})
        if failed:
            context.remove_live_brokers(failed)
            await self._on_broker_failure(failed)
        started = sorted({*changes.new, *changes.bounced})
        if started:
            context.add_live_brokers({broker_id: current[broker_id] for broker_id in started})
            await self._on_broker_startup(started)
        log.info(
            "[Controller id=%d epoch=%d] Updated broker epochs cache: %s",
            self.broker_id,
            context.epoch,
            dict(sorted(context.live_broker_epochs.items())),
        )

    async def _on_broker_failure(self, dead: Collection[int]) -> None:
        """Kafka's ``onBrokerFailure``: partitions they led are elected again (or go offline), they leave
        the ISRs they followed in."""
        log.info("[Controller id=%d] Broker failure callback for %s", self.broker_id, ids(dead))
        context = self.context
        partitions = [
            tp
            for tp in context.partitions_on_brokers(dead)
            if tp in context.leadership and not context.is_queued_for_deletion(tp.topic)
        ]
        await self._elect_offline(partitions, reason=f"broker {ids(dead)} failed", offline_followers=dead)

    async def _on_broker_startup(self, started: Collection[int]) -> None:
        """Kafka's ``onBrokerStartup``: partitions that could not have a leader (or a first state) may now."""
        log.info("[Controller id=%d] New broker startup callback for %s", self.broker_id, ids(started))
        await self._trigger_online_partition_state_change()

    # ---- topics ----

    async def _process_topic_change(self) -> None:
        if not self.is_active:
            return
        topics = await self.zk.get_all_topics()
        context = self.context
        new = topics - context.all_topics
        deleted = context.all_topics - topics
        for topic in deleted:
            context.remove_topic(topic)
            self._unwatch_topic(topic)
        loaded = await self._add_topics(new)
        if not new and not deleted:
            return
        log.info(
            "[Controller id=%d epoch=%d] New topics: [%s], deleted topics: [%s], new partition replica "
            "assignment [%s]",
            self.broker_id,
            context.epoch,
            ",".join(sorted(new)),
            ",".join(sorted(deleted)),
            ", ".join(f"{tp}: [{ids(context.replicas(tp))}]" for t in loaded for tp in context.partitions(t)),
        )
        await self._on_new_partition_creation([tp for t in loaded for tp in context.new_partitions(t)])

    async def _on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        if partitions:
            log.info(
                "[Controller id=%d] New partition creation callback for %s",
                self.broker_id,
                ",".join(str(tp) for tp in partitions),
            )
            await self._states.create_initial_states(partitions)

    async def _process_partition_modifications(self, topic: str) -> None:
        context = self.context
        if not self.is_active or topic not in context.all_topics:
            return
        assignment = await self.zk.get_topic_assignment(topic)
        if assignment is None:
            return  # deleted: a TopicChange follows
        known_id = context.topic_ids.get(topic)
        if assignment.topic_id is not None and known_id is not None and assignment.topic_id != known_id:
            log.info(
                "[Controller id=%d] Topic %s was deleted and created again (topic id %s, was %s)",
                self.broker_id,
                topic,
                assignment.topic_id,
                known_id,
            )
            context.remove_topic(topic)
            loaded = await self._add_topics([topic])
            await self._on_new_partition_creation([tp for t in loaded for tp in context.new_partitions(t)])
            return
        added = {
            partition: a.replicas
            for partition, a in assignment.partitions.items()
            if not context.has_partition(TopicPartition(topic, partition))
        }
        if not added:
            return
        if context.is_queued_for_deletion(topic):
            log.warning(
                "[Controller id=%d] Skipping adding partitions %s for topic %s since it is currently being deleted",
                self.broker_id,
                ids(sorted(added)),
                topic,
            )
            return
        log.info(
            "[Controller id=%d] New partitions to be added %s",
            self.broker_id,
            ", ".join(f"{topic}-{p}: [{ids(r)}]" for p, r in sorted(added.items())),
        )
        context.add_partitions(topic, added)
        await self._on_new_partition_creation([TopicPartition(topic, p) for p in sorted(added)])

    async def _process_topic_deletion(self) -> None:
        """Delete every topic marked in ``/admin/delete_topics`` (or drop the markers when deletion is
        disabled). Each deletion is idempotent: the topic's znodes (one multi), its config, the marker
        last; a controller elected after any step finds the marker and repeats the rest."""
        if not self.is_active:
            return
        markers = await self.zk.get_topic_deletions()
        if not markers:
            return
        context = self.context
        if not self.config.delete_topic_enable:
            log.info(
                "[Controller id=%d] Removing %s since delete topic is disabled",
                self.broker_id,
                ",".join(markers),
            )
            await self.zk.delete_topic_deletions(markers, self._writable())
            return
        log.info(
            "[Controller id=%d] Starting topic deletion for topics %s", self.broker_id, ",".join(markers)
        )
        context.topics_to_delete.update(markers)
        for topic in markers:
            epoch = self._writable()
            await self.zk.delete_topic_znode(topic, epoch)
            await self.zk.delete_topic_config(topic, epoch)
            await self.zk.delete_topic_deletions([topic], epoch)
            context.remove_topic(topic)
            self._unwatch_topic(topic)
            log.info("[Controller id=%d] Deletion of topic %s successfully completed", self.broker_id, topic)
        # A topic created again under the same name right away may leave /brokers/topics' children
        # looking unchanged to its watch: look again.
        self._events.put(TopicChange())

    async def _process_isr_change_notification(self) -> None:
        """Kafka's ``processIsrChangeNotification``: leaders that announce their ISR writes in
        ``/isr_change_notification`` get the view's states refreshed; the notifications are deleted. (The
        controller never decides on a cached ISR, so this only keeps the view and ZooKeeper tidy.)"""
        if not self.is_active:
            return
        sequence_numbers = await self.zk.get_isr_change_notifications()
        if not sequence_numbers:
            return
        changed = await self.zk.get_partitions_from_isr_change_notifications(sequence_numbers)
        known = [tp for tp in changed if tp in self.context.leadership]
        self.context.leadership.update(await self.zk.get_partition_states(known))
        await self.zk.delete_isr_change_notifications(sequence_numbers, self._writable())

    # ---- controlled shutdown ----

    async def _do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        if not self.is_active:
            raise NotControllerError("Controller moved to another broker. Aborting controlled shutdown")
        context = self.context
        cached_epoch = context.live_broker_epochs.get(broker_id)
        if broker_epoch != UNKNOWN_BROKER_EPOCH and cached_epoch is not None and broker_epoch < cached_epoch:
            message = (
                f"Received controlled shutdown request from an old broker epoch {broker_epoch} for broker "
                f"{broker_id}. Current broker epoch is {cached_epoch}."
            )
            log.info("[Controller id=%d] %s", self.broker_id, message)
            raise StaleBrokerEpochError(message)
        log.info("[Controller id=%d] Shutting down broker %d", self.broker_id, broker_id)
        if broker_id not in context.live_or_shutting_down_broker_ids:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        context.shutting_down_broker_ids.add(broker_id)
        partitions = [
            tp
            for tp in context.partitions_on_brokers([broker_id])
            if len(context.replicas(tp)) > 1
            and tp in context.leadership
            and not context.is_queued_for_deletion(tp.topic)
        ]
        await self._states.update(
            partitions,
            lambda tp, state: context.decide_controlled_shutdown(tp, state, broker_id),
            reason=f"controlled shutdown of broker {broker_id}",
        )
        return context.partition_leaders_on_broker(broker_id)

    # ---- preferred and unclean elections ----

    async def _check_and_trigger_auto_leader_rebalance(self) -> None:
        if not self.is_active:
            return
        candidates = [  # a partition being moved gets its leader when the move completes (as in Kafka)
            tp
            for tp in self.context.preferred_replica_imbalance(
                self.config.leader_imbalance_per_broker_percentage
            )
            if tp not in self._reassignments.ongoing
        ]
        if candidates:
            log.debug(
                "[Controller id=%d] Automatic preferred replica leader election for %s",
                self.broker_id,
                ",".join(str(tp) for tp in candidates),
            )
            await self._states.update(
                candidates, self.context.decide_preferred, reason="preferred replica election"
            )

    async def _process_replica_leader_election(
        self, partitions: Collection[TopicPartition], election_type: ElectionType
    ) -> dict[TopicPartition, LeaderAndIsr | KafkaProtocolError]:
        if not self.is_active:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        context = self.context
        results: dict[TopicPartition, LeaderAndIsr | KafkaProtocolError] = {}
        electable: list[TopicPartition] = []
        for tp in dict.fromkeys(partitions):
            if not context.has_partition(tp):
                results[tp] = KafkaProtocolError(
                    f"The partition {tp} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif context.is_queued_for_deletion(tp.topic):
                results[tp] = KafkaProtocolError(
                    f"Deletion of topic {tp.topic} is in progress", ErrorCode.INVALID_TOPIC_EXCEPTION
                )
            else:
                electable.append(tp)
        preferred = election_type is ElectionType.PREFERRED
        decide = context.decide_preferred if preferred else context.decide_unclean
        reason = "preferred replica election" if preferred else "unclean leader election"
        outcome = await self._states.update(electable, decide, reason=reason)
        unavailable = (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            if preferred
            else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        )
        for tp in electable:
            if tp in outcome.written:
                results[tp] = outcome.written[tp]
                continue
            state = outcome.unchanged.get(tp)
            if state is not None and (
                state.leader in context.replicas(tp)[:1]
                if preferred
                else state.leader in context.live_or_shutting_down_broker_ids
            ):
                results[tp] = KafkaProtocolError(
                    "Leader election not needed for topic partition.", ErrorCode.ELECTION_NOT_NEEDED
                )
            else:
                results[tp] = KafkaProtocolError(
                    f"Failed to elect leader for partition {tp} under strategy {reason}", unavailable
                )
        return results
