"""A cluster broker's view of ZooKeeper, kept current by watches (what Kafka's controller pushes with
UpdateMetadata and LeaderAndIsr; tidelog's brokers read it themselves: see ARCHITECTURE.md).

It keeps the :class:`~tidelog.server.metadata_cache.MetadataCache` equal to ZooKeeper — live brokers (their
endpoints, racks and broker epochs), the controller, every topic with its id, config overrides, assignment
and each partition's leader, leader epoch and ISR — and hands every partition state of a partition this
broker is assigned to the :class:`~tidelog.server.replica_manager.ReplicaManager`.

Invariants:

- Watch callbacks only enqueue; one task applies the events in order, re-reading ZooKeeper where a
  callback carries no data. A watch may skip intermediate states, never the last one: after any gap (a
  disconnection, a new session) every watch re-reads, so the view converges to ZooKeeper's.
- The ReplicaManager never sees a state older than the one it has (it ignores stale ones anyway): states
  are applied in the order their watches delivered them, each a whole znode with its version.
- A topic that disappears from ``/brokers/topics`` (deleted by the controller) is deleted here: its local
  replicas, its cache entry, and every group's committed offsets of it (the topics-deleted listeners).
- A partition reassigned away from this broker (its replicas in ``/brokers/topics/T`` no longer name it)
  has its local replica stopped and its log deleted; one reassigned to it is created and follows.
- At start, after the first full read (:meth:`MetadataWatcher.start` returns only then), local logs of
  topics ZooKeeper does not have are deleted: the cluster id was checked against ``meta.properties``
  first, so this is the cluster's truth (a topic deleted while this broker was down).
- Nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from tidelog.coordinator.common import INTERNAL_TOPICS
from tidelog.protocol import TopicPartition
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.server.dynamic_config import DynamicBrokerConfigs
from tidelog.server.metadata_cache import BrokerInfo, Endpoint, MetadataCache, PartitionInfo, TopicInfo
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.zk.client import KafkaZkClient, LiveBroker
from tidelog.server.zk.session import Watch
from tidelog.server.zk.zk_data import TopicAssignment
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

__all__ = ["MetadataWatcher"]

_DEFAULT_BROKER_ENTITY = "brokers/<default>"

log = logging.getLogger("tidelog.cluster.metadata")

TopicsDeletedListener = Callable[[list[str]], None]


@dataclass(slots=True)
class _Topic:
    assignment: TopicAssignment | None = None
    configs: dict[str, str] = field(default_factory=dict)
    states: dict[int, LeaderAndIsr] = field(default_factory=dict)
    watches: list[Watch] = field(default_factory=list)
    state_watches: dict[int, Watch] = field(default_factory=dict)


class MetadataWatcher:
    """Keeps this broker's metadata cache and replica roles equal to ZooKeeper's; see the module docstring."""

    def __init__(
        self,
        zk: KafkaZkClient,
        *,
        node_id: int,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        logs: LogManager,
        log_config: Callable[[dict[str, str]], LogConfig],
        broker_configs: DynamicBrokerConfigs | None = None,
    ) -> None:
        self._zk = zk
        self._node_id = node_id
        self._metadata = metadata
        self._replicas = replicas
        self._logs = logs
        self._log_config = log_config
        self._broker_configs = broker_configs
        self._events: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self._topics: dict[str, _Topic] = {}
        self._brokers: dict[int, LiveBroker] = {}
        self._broker_watches: dict[int, Watch] = {}
        self._watches: list[Watch] = []
        self._task: asyncio.Task[None] | None = None
        self._topics_deleted: list[TopicsDeletedListener] = []
        self._entity_config_listeners: list[Callable[[str], Awaitable[None]]] = []
        self._last_config_change = -1
        self._synced = asyncio.Event()
        self._changed = asyncio.Event()

    def add_topics_deleted_listener(self, listener: TopicsDeletedListener) -> None:
        self._topics_deleted.append(listener)

    def add_entity_config_listener(self, listener: Callable[[str], Awaitable[None]]) -> None:
        """Await ``listener(entity_path)`` for each ``users/...``, ``clients/...`` and ``groups/...`` change
        notification."""
        self._entity_config_listeners.append(listener)

    def topic_configs(self, name: str) -> Mapping[str, str] | None:
        """The topic-level configs ZooKeeper holds for ``name`` (as last loaded); None for an unknown topic."""
        topic = self._topics.get(name)
        return None if topic is None else topic.configs

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds of the metadata (checked after every applied event), at most
        ``timeout_s``; returns whether it holds."""
        deadline = asyncio.get_running_loop().time() + max(timeout_s, 0)
        while not condition():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
        return True

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read everything, set the watches, and return once the cache holds ZooKeeper's state."""
        await self._load_broker_configs()
        brokers = await self._zk.get_live_brokers()
        self._brokers = dict(brokers)
        self._publish_brokers()
        self._metadata.set_controller(await self._zk.get_controller_id() or -1)
        for topic in sorted(await self._zk.get_all_topics()):
            await self._load_topic(topic)
        self._delete_unknown_logs()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._watches = [
            self._zk.watch_live_broker_ids(lambda ids: self._events.put_nowait(("brokers", ids))),
            self._zk.watch_controller(lambda controller: self._events.put_nowait(("controller", controller))),
            self._zk.watch_topics(lambda topics: self._events.put_nowait(("topics", topics))),
            self._zk.watch_config_change_notifications(
                lambda changes: self._events.put_nowait(("config_changes", changes))
            ),
        ]
        for topic in list(self._topics):
            self._watch_topic(topic)
        self._synced.set()

    async def stop(self) -> None:
        for watch in self._all_watches():
            watch.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _all_watches(self) -> list[Watch]:
        watches = list(self._watches) + list(self._broker_watches.values())
        for topic in self._topics.values():
            watches += topic.watches + list(topic.state_watches.values())
        return watches

    async def resync(self) -> None:
        """Apply every partition state again (after this broker was fenced and registered anew)."""
        for name, topic in sorted(self._topics.items()):
            for index in sorted(topic.states):
                state = await self._zk.get_partition_state(TopicPartition(name, index))
                if state is not None:
                    topic.states[index] = state
            self._apply_topic(name)

    # -- events ----------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            kind, payload = await self._events.get()
            try:
                await self._handle(kind, payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying the cluster metadata event %s failed", kind)
            self._changed.set()

    async def _handle(self, kind: str, payload: object) -> None:
        if kind == "brokers":
            assert isinstance(payload, frozenset)
            await self._on_brokers(set(payload))
        elif kind == "broker":
            assert isinstance(payload, int)
            await self._on_broker(payload)
        elif kind == "controller":
            self._metadata.set_controller(payload if isinstance(payload, int) else -1)
        elif kind == "topics":
            assert isinstance(payload, frozenset)
            await self._on_topics(set(payload))
        elif kind == "topic":
            assert isinstance(payload, str)
            await self._on_topic_data(payload)
        elif kind == "state":
            assert isinstance(payload, tuple)
            name, index, state = payload
            self._on_state(name, index, state)
        elif kind == "config_changes":
            assert isinstance(payload, list)
            await self._on_config_changes(payload)

    async def _on_brokers(self, ids: set[int]) -> None:
        for gone in set(self._broker_watches) - ids:
            self._broker_watches.pop(gone).cancel()
            self._brokers.pop(gone, None)
        for new in ids - set(self._broker_watches):
            self._broker_watches[new] = self._zk.session.watch_data(
                f"/brokers/ids/{new}", self._on_broker_event(new)
            )
        self._publish_brokers()
        for name in list(self._topics):
            self._publish_topic(name)

    def _on_broker_event(self, broker_id: int) -> Callable[[object], None]:
        return lambda _found: self._events.put_nowait(("broker", broker_id))

    def _on_state_event(self, name: str, index: int) -> Callable[[LeaderAndIsr | None], None]:
        return lambda state: self._events.put_nowait(("state", (name, index, state)))

    async def _on_broker(self, broker_id: int) -> None:
        live = await self._zk.get_broker(broker_id)
        if live is None:
            self._brokers.pop(broker_id, None)
        else:
            self._brokers[broker_id] = live
        self._publish_brokers()
        for name in list(self._topics):
            self._publish_topic(name)

    def _publish_brokers(self) -> None:
        self._metadata.set_brokers(
            BrokerInfo(
                broker_id,
                tuple(
                    Endpoint(e.listener_name, e.host or "", e.port, e.security_protocol)
                    for e in live.registration.endpoints
                ),
                rack=live.registration.rack,
                epoch=live.broker_epoch,
            )
            for broker_id, live in self._brokers.items()
        )

    async def _on_topics(self, names: set[str]) -> None:
        deleted = sorted(set(self._topics) - names)
        for name in deleted:
            self._forget_topic(name)
        if deleted:
            for listener in self._topics_deleted:
                listener(deleted)
        for name in sorted(names - set(self._topics)):
            await self._load_topic(name)
            self._watch_topic(name)

    async def _load_topic(self, name: str) -> None:
        topic = self._topics.setdefault(name, _Topic())
        topic.assignment = await self._zk.get_topic_assignment(name)
        topic.configs = await self._zk.get_topic_config(name)
        self._replicas.update_config(name, self._log_config(topic.configs))
        if topic.assignment is not None:
            tps = [TopicPartition(name, index) for index in topic.assignment.partitions]
            states = await self._zk.get_partition_states(tps)
            topic.states = {tp.partition: state for tp, state in states.items()}
        self._apply_topic(name)

    def _watch_topic(self, name: str) -> None:
        topic = self._topics[name]
        topic.watches.append(
            self._zk.session.watch_data(
                f"/brokers/topics/{name}", lambda _found: self._events.put_nowait(("topic", name))
            )
        )
        self._watch_states(name)

    def _watch_states(self, name: str) -> None:
        topic = self._topics[name]
        if topic.assignment is None:
            return
        for index in topic.assignment.partitions:
            if index not in topic.state_watches:
                topic.state_watches[index] = self._zk.watch_partition_state(
                    TopicPartition(name, index), self._on_state_event(name, index)
                )

    async def _on_topic_data(self, name: str) -> None:
        topic = self._topics.get(name)
        if topic is None:
            return
        assignment = await self._zk.get_topic_assignment(name)
        if assignment is None:
            return  # being deleted: the topics watch says so
        if topic.assignment is not None and assignment.topic_id != topic.assignment.topic_id:
            log.info("topic %s was deleted and created again (new topic id)", name)
            self._forget_topic(name)
            for listener in self._topics_deleted:
                listener([name])
            await self._load_topic(name)
            self._watch_topic(name)
            return
        topic.assignment = assignment
        self._watch_states(name)
        self._delete_reassigned_away(name)
        self._apply_topic(name)

    def _delete_reassigned_away(self, name: str) -> None:
        """Partition reassignment: a local replica of a partition whose replicas no longer include this
        broker is stopped and its log deleted (Kafka's StopReplica with deletion, read from the topic
        znode here)."""
        assignment = self._topics[name].assignment
        if assignment is None:
            return
        for partition in list(self._replicas):
            index = partition.index
            if (
                partition.topic == name
                and index in assignment.partitions
                and self._node_id not in assignment.replicas(index)
            ):
                log.info(
                    "%s-%d: reassigned to brokers %s: stopping and deleting the local replica",
                    name,
                    index,
                    list(assignment.replicas(index)),
                )
                self._replicas.delete(name, index)

    def _on_state(self, name: str, index: int, state: LeaderAndIsr | None) -> None:
        topic = self._topics.get(name)
        if topic is None or state is None:
            return
        known = topic.states.get(index)
        if known is not None and (state.leader_epoch, state.partition_epoch) < (
            known.leader_epoch,
            known.partition_epoch,
        ):
            return
        topic.states[index] = state
        self._apply_partition(name, index)
        self._publish_topic(name)

    async def _on_config_changes(self, changes: list[str]) -> None:
        for sequence in sorted(changes):
            number = int(sequence.rsplit("_", 1)[-1])
            if number <= self._last_config_change:
                continue
            self._last_config_change = number
            entity = await self._zk.get_config_change_notification(sequence)
            if entity is not None and entity in (_DEFAULT_BROKER_ENTITY, f"brokers/{self._node_id}"):
                await self._load_broker_configs()
                continue
            if entity is not None and entity.startswith(("users/", "clients/", "groups/")):
                for listener in self._entity_config_listeners:
                    await listener(entity)
                continue
            if entity is None or not entity.startswith("topics/"):
                continue
            name = entity.split("/", 1)[1]
            topic = self._topics.get(name)
            if topic is None:
                continue
            topic.configs = await self._zk.get_topic_config(name)
            self._replicas.update_config(name, self._log_config(topic.configs))
            self._publish_topic(name)
            log.info("topic %s configs are now %s", name, topic.configs or "the defaults")

    async def _load_broker_configs(self) -> None:
        """The dynamic broker configs of ZooKeeper (the cluster default and this broker's), applied to every
        partition log (topics without an override take the new defaults)."""
        if self._broker_configs is None:
            return
        before = self._broker_configs.config
        config = self._broker_configs.replace_layers(
            await self._zk.get_entity_config("brokers", "<default>"),
            await self._zk.get_entity_config("brokers", str(self._node_id)),
        )
        if config is before:
            return
        for name, topic in self._topics.items():
            self._replicas.update_config(name, self._log_config(topic.configs))

    # -- applying --------------------------------------------------------------------------------------

    def _apply_topic(self, name: str) -> None:
        topic = self._topics[name]
        if topic.assignment is not None:
            for index in sorted(topic.assignment.partitions):
                self._apply_partition(name, index)
        self._publish_topic(name)

    def _apply_partition(self, name: str, index: int) -> None:
        topic = self._topics[name]
        state = topic.states.get(index)
        if topic.assignment is None or state is None or index not in topic.assignment.partitions:
            return
        assignment = topic.assignment.replicas(index)
        if self._node_id not in assignment:
            return
        self._replicas.apply_partition_state(
            name,
            index,
            assignment=assignment,
            state=state,
            config=self._log_config(topic.configs),
            topic_id=topic.assignment.topic_id,
            removing_replicas=topic.assignment.partitions[index].removing_replicas,
        )

    def _publish_topic(self, name: str) -> None:
        topic = self._topics.get(name)
        if topic is None or topic.assignment is None or topic.assignment.topic_id is None:
            return
        alive = set(self._brokers)
        partitions = []
        for index in range(len(topic.assignment.partitions)):
            replicas = topic.assignment.replicas(index) if index in topic.assignment.partitions else ()
            state = topic.states.get(index)
            partitions.append(
                PartitionInfo(
                    index=index,
                    leader=state.leader if state is not None and state.leader in alive else -1,
                    leader_epoch=state.leader_epoch if state is not None else -1,
                    replicas=replicas,
                    isr=state.isr if state is not None else (),
                    offline_replicas=tuple(r for r in replicas if r not in alive),
                )
            )
        self._metadata.put_topic(
            TopicInfo(
                name=name,
                topic_id=topic.assignment.topic_id,
                partitions=tuple(partitions),
                configs=dict(topic.configs),
                is_internal=name in INTERNAL_TOPICS,
            )
        )

    def _forget_topic(self, name: str) -> None:
        topic = self._topics.pop(name, None)
        if topic is None:
            return
        for watch in topic.watches + list(topic.state_watches.values()):
            watch.cancel()
        self._metadata.remove_topic(name)
        for partition in list(self._replicas):
            if partition.topic == name:
                self._replicas.delete(name, partition.index)
        log.info("topic %s deleted: its local replicas are gone", name)

    def _delete_unknown_logs(self) -> None:
        """Delete the logs ZooKeeper no longer assigns here: of a topic deleted while this broker was down,
        of a topic of that name created again since (another topic id), of a partition moved elsewhere.
        Kafka's controller sends such a returning broker StopReplica(delete); tidelog's brokers read it."""
        for tp, _log in list(self._logs):
            reason = self._unknown_log_reason(tp)
            if reason is not None:
                log.warning("deleting the log of %s: %s", tp, reason)
                self._replicas.delete(tp.topic, tp.partition)

    def _unknown_log_reason(self, tp: TopicPartition) -> str | None:
        topic = self._topics.get(tp.topic)
        if topic is None:
            return "the topic is not in the cluster (deleted while this broker was down)"
        assignment = topic.assignment
        if assignment is None:
            return None  # its assignment is unreadable for now: keep the log, decide when it is read
        if tp.partition not in assignment.partitions or self._node_id not in assignment.replicas(
            tp.partition
        ):
            return "this broker is not among the partition's replicas (reassigned or recreated elsewhere)"
        if assignment.topic_id is not None and self._replicas.holds_other_topic(
            tp.topic, tp.partition, assignment.topic_id
        ):
            return "it belongs to an earlier topic of that name (deleted and created again)"
        return None
