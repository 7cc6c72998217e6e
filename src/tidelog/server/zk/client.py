"""Kafka's ``KafkaZkClient`` for tidelog: the cluster's operations on ZooKeeper, typed and async.

Every operation reads or writes the znodes of Kafka's layout (:mod:`.paths`) in Kafka's JSON
(:mod:`.zk_data`) through one :class:`~.session.ZkSession`. The facts come from apache/kafka 3.3
(``KafkaZkClient``, ``ZkData``, ``ReplicationUtils``, ``ZkProducerIdManager``, ``AdminZkClient``).

Invariants:

- **Controller election** is Kafka's: read ``/controller_epoch`` (value e, version v; created as 0 if
  missing), then ONE multi: create the ephemeral ``/controller`` and set ``/controller_epoch`` to e+1 at
  version v. Exactly one contender can win an epoch. The winner gets :class:`ControllerEpoch` (e+1 and
  the znode's new version), a loser ``None``.
- **Every controller write is fenced**: it is a multi whose first op checks ``/controller_epoch`` is still
  at the version the controller won with; a deposed controller's write raises
  :class:`~.errors.ControllerMovedError` and changes nothing.
- **Partition state writes are conditional** on the partition epoch (the state znode's version): a stale
  writer gets :class:`~.errors.BadVersion` (leader's ISR update) or the partition in
  :attr:`UpdateLeaderAndIsrResult.retry` (controller), never an overwrite. A write retried after a lost
  connection that finds its own content already there counts as done (Kafka's ``checkLeaderAndIsrZkData``).
- **The broker epoch** is the czxid of ``/brokers/ids/N``: a new registration (new session) gets a new,
  larger epoch. An id held by another live session is refused (:class:`~.errors.BrokerIdInUseError`); the
  node of our own session (a create retried after a lost connection) is ours.
- **Producer id blocks** are taken by compare-and-set on ``/latest_producer_id_block``: blocks handed to
  racing allocators never overlap; a set that lost the race is re-read and retried. A set retried after a
  lost connection may leave a block unused, never hand one out twice.
- Writes never span two sessions (:mod:`.session`): after an expiry they raise
  :class:`~.errors.ZkSessionExpiredError` until the broker has registered again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.client import TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from tidelog.protocol import TopicPartition
from tidelog.server.zk import paths
from tidelog.server.zk.errors import (
    BadVersion,
    BrokerIdInUseError,
    ControllerMovedError,
    TopicAlreadyMarkedForDeletionError,
    TopicExistsError,
    ZkError,
)
from tidelog.server.zk.session import Watch, ZkSession
from tidelog.server.zk.zk_data import (
    PRODUCER_ID_BLOCK_SIZE,
    BrokerRegistration,
    ControllerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    decode_broker_registration,
    decode_cluster_id,
    decode_config_change_notification,
    decode_controller,
    decode_controller_epoch,
    decode_entity_config,
    decode_isr_change_notification,
    decode_leader_and_isr,
    decode_log_dir_event,
    decode_producer_id_block,
    decode_topic_assignment,
    encode_broker_registration,
    encode_cluster_id,
    encode_config_change_notification,
    encode_controller,
    encode_controller_epoch,
    encode_entity_config,
    encode_isr_change_notification,
    encode_leader_and_isr,
    encode_log_dir_event,
    encode_producer_id_block,
    encode_topic_assignment,
)

__all__ = [
    "INITIAL_CONTROLLER_EPOCH",
    "ControllerEpoch",
    "KafkaZkClient",
    "LiveBroker",
    "UpdateLeaderAndIsrResult",
]

INITIAL_CONTROLLER_EPOCH = 0  # Kafka's KafkaController.InitialControllerEpoch
_MAX_PRODUCER_ID = 2**63 - 1
_MAX_MULTI_DELETES = 1000  # ~100 bytes each: well under ZooKeeper's 1 MB request limit (jute.maxbuffer)


@dataclass(frozen=True)
class ControllerEpoch:
    """What a controller won: its epoch and ``/controller_epoch``'s version, which fences its writes."""

    epoch: int
    zk_version: int


@dataclass(frozen=True)
class LiveBroker:
    """A registered broker and its broker epoch (the czxid of its ``/brokers/ids/N``)."""

    registration: BrokerRegistration
    broker_epoch: int

    @property
    def broker_id(self) -> int:
        return self.registration.broker_id


@dataclass(frozen=True)
class UpdateLeaderAndIsrResult:
    """Kafka's ``UpdateLeaderAndIsrResult``: per partition the new state (with its new partition epoch) or
    the error; ``retry`` lists the partitions whose state changed under the controller (BADVERSION)."""

    finished: Mapping[TopicPartition, LeaderAndIsr | Exception] = field(default_factory=dict)
    retry: tuple[TopicPartition, ...] = ()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _failure(results: Sequence[Any]) -> Exception | None:
    """The op that made a multi fail (kazoo reports the others as rolled back / inconsistent)."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError | RuntimeInconsistency):
            return result
    return None


def _delete(path: str) -> Callable[[TransactionRequest], None]:
    """A multi builder that deletes ``path`` (any version)."""

    def build(tx: TransactionRequest) -> None:
        tx.delete(path)

    return build


class KafkaZkClient:
    """The cluster's ZooKeeper operations over one session (use from the session's event loop)."""

    def __init__(self, session: ZkSession) -> None:
        self.session = session

    @classmethod
    async def connect(
        cls,
        connect_string: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
    ) -> KafkaZkClient:
        """Open a session on ``host:port[/chroot]`` (the chroot is created if missing) and return a client."""
        session = ZkSession(
            connect_string, session_timeout_ms=session_timeout_ms, connection_timeout_ms=connection_timeout_ms
        )
        await session.start()
        return cls(session)

    async def close(self) -> None:
        await self.session.close()

    async def create_top_level_paths(self) -> None:
        """Kafka's ``createTopLevelPaths``: the persistent parents every broker expects (idempotent)."""
        for path in paths.PERSISTENT_PATHS:
            await self.session.ensure_path(path)

    # ---- cluster id, broker sequence ids ----

    async def get_cluster_id(self) -> str | None:
        found = await self.session.get(paths.CLUSTER_ID)
        return decode_cluster_id(found[0]) if found is not None else None

    async def create_or_get_cluster_id(self, proposed: str) -> str:
        """Write ``proposed`` as the cluster id unless one exists; returns the cluster's id either way."""
        while True:
            try:
                await self.session.create(paths.CLUSTER_ID, encode_cluster_id(proposed))
                return proposed
            except NoNodeError:
                await self.session.ensure_path(paths.CLUSTER)
            except NodeExistsError:
                existing = await self.get_cluster_id()
                if existing is not None:
                    return existing

    async def generate_broker_sequence_id(self) -> int:
        """Kafka's ``generateBrokerSequenceId``: the version of ``/brokers/seqid`` after an unconditional
        set, so 1, 2, 3... across the cluster (a broker id is ``reserved.broker.max.id`` + this)."""
        while True:
            try:
                stat = await self.session.set(paths.BROKER_SEQUENCE_ID, b"")
                return int(stat.version)
            except NoNodeError:
                await self.session.ensure_path(paths.BROKER_SEQUENCE_ID)

    # ---- brokers ----

    async def register_broker(self, registration: BrokerRegistration) -> int:
        """Create the ephemeral ``/brokers/ids/N``; returns the broker epoch (its czxid).

        Raises :class:`BrokerIdInUseError` when another live session holds the id.
        """
        path = paths.broker_path(registration.broker_id)
        data = encode_broker_registration(registration)
        while True:
            try:
                _, stat = await self.session.create(path, data, ephemeral=True)
                return int(stat.czxid)
            except NoNodeError:
                await self.session.ensure_path(paths.BROKER_IDS)
                continue
            except NodeExistsError:
                pass
            found = await self.session.get(path)
            if found is None:
                continue  # its owner's session ended meanwhile: try again
            owner = int(found[1].ephemeralOwner)
            if owner == self.session.session_id:
                return int(found[1].czxid)  # our own create, applied before a lost connection
            raise BrokerIdInUseError(registration.broker_id, owner)

    async def get_broker(self, broker_id: int) -> LiveBroker | None:
        found = await self.session.get(paths.broker_path(broker_id))
        if found is None:
            return None
        data, stat = found
        return LiveBroker(decode_broker_registration(broker_id, data), int(stat.czxid))

    async def get_live_broker_ids(self) -> list[int]:
        """The registered broker ids, ascending (Kafka's ``getSortedBrokerList``)."""
        children = await self.session.get_children(paths.BROKER_IDS)
        return sorted(int(child) for child in children or [])

    async def get_live_brokers(self) -> dict[int, LiveBroker]:
        """Every registered broker with its epoch (Kafka's ``getAllBrokerAndEpochsInCluster``), by id."""
        ids = await self.get_live_broker_ids()
        brokers = await asyncio.gather(*(self.get_broker(broker_id) for broker_id in ids))
        return {broker.broker_id: broker for broker in brokers if broker is not None}

    def watch_live_broker_ids(self, on_change: Callable[[frozenset[int]], None]) -> Watch:
        """``on_change(ids)`` now and whenever a broker registers or its session ends."""
        return self.session.watch_children(
            paths.BROKER_IDS, lambda children: on_change(frozenset(int(c) for c in children or []))
        )

    # ---- controller ----

    async def get_controller_id(self) -> int | None:
        found = await self.session.get(paths.CONTROLLER)
        return decode_controller(found[0]).broker_id if found is not None else None

    async def get_controller_epoch(self) -> ControllerEpoch | None:
        """``/controller_epoch``'s value and version, None before the first election."""
        found = await self.session.get(paths.CONTROLLER_EPOCH)
        if found is None:
            return None
        return ControllerEpoch(decode_controller_epoch(found[0]), int(found[1].version))

    def watch_controller(self, on_change: Callable[[int | None], None]) -> Watch:
        """``on_change(controller_id or None)`` now and whenever ``/controller`` is created or deleted."""
        return self.session.watch_data(
            paths.CONTROLLER,
            lambda found: on_change(decode_controller(found[0]).broker_id if found else None),
        )

    async def elect_controller(
        self, broker_id: int, *, timestamp_ms: int | None = None
    ) -> ControllerEpoch | None:
        """Try to become the controller (Kafka's ``registerControllerAndIncrementControllerEpoch``).

        Returns the won :class:`ControllerEpoch`, or None if another broker is the controller or won this
        epoch first.
        """
        current = await self._get_or_create_controller_epoch()
        new_epoch = current.epoch + 1
        registration = encode_controller(ControllerRegistration(broker_id, timestamp_ms or _now_ms()))

        def build(tx: TransactionRequest) -> None:
            tx.create(paths.CONTROLLER, registration, ephemeral=True)
            tx.set_data(paths.CONTROLLER_EPOCH, encode_controller_epoch(new_epoch), current.zk_version)

        results = await self.session.multi(build)
        failure = _failure(results)
        if failure is None:
            return ControllerEpoch(new_epoch, int(results[1].version))
        if not isinstance(failure, NodeExistsError | BadVersionError):
            raise ZkError(f"controller election failed: {failure!r}")
        # Lost, or our own multi was applied before a lost connection and this is its retry.
        found = await self.session.get(paths.CONTROLLER)
        if found is None or decode_controller(found[0]).broker_id != broker_id:
            return None
        if int(found[1].ephemeralOwner) != self.session.session_id:
            return None
        epoch = await self.get_controller_epoch()
        return epoch if epoch is not None and epoch.epoch == new_epoch else None

    async def resign_controller(self, controller: ControllerEpoch) -> None:
        """Delete ``/controller`` (fenced): a new election starts. A deposed controller's call raises
        :class:`ControllerMovedError`."""
        results = await self._fenced(controller, lambda tx: tx.delete(paths.CONTROLLER))
        failure = _failure(results)
        if failure is not None and not isinstance(failure, NoNodeError):
            raise ZkError(f"deleting /controller failed: {failure!r}")

    async def _get_or_create_controller_epoch(self) -> ControllerEpoch:
        while True:
            current = await self.get_controller_epoch()
            if current is not None:
                return current
            try:
                await self.session.create(
                    paths.CONTROLLER_EPOCH, encode_controller_epoch(INITIAL_CONTROLLER_EPOCH)
                )
                return ControllerEpoch(INITIAL_CONTROLLER_EPOCH, 0)
            except NodeExistsError:
                continue

    async def _fenced(
        self, controller: ControllerEpoch, build: Callable[[TransactionRequest], None]
    ) -> list[Any]:
        """One multi: check ``/controller_epoch`` is at the controller's version, then ``build``'s ops.
        Returns the results of ``build``'s ops; raises :class:`ControllerMovedError` if the check failed."""

        def fenced(tx: TransactionRequest) -> None:
            tx.check(paths.CONTROLLER_EPOCH, controller.zk_version)
            build(tx)

        results = await self.session.multi(fenced)
        if isinstance(results[0], BadVersionError | NoNodeError):
            raise ControllerMovedError(
                f"controller epoch {controller.epoch} is deposed: /controller_epoch is no longer at "
                f"version {controller.zk_version}"
            )
        return results[1:]

    # ---- topics ----

    async def create_topic_assignment(
        self, topic: str, topic_id: uuid.UUID | None, assignment: Mapping[int, Sequence[int]]
    ) -> None:
        """Create ``/brokers/topics/T`` (Kafka's ``createTopicAssignment``); :class:`TopicExistsError` if it exists."""
        data = encode_topic_assignment(
            TopicAssignment(topic, topic_id, {p: ReplicaAssignment(tuple(r)) for p, r in assignment.items()})
        )
        while True:
            try:
                await self.session.create(paths.topic_path(topic), data)
                return
            except NoNodeError:
                await self.session.ensure_path(paths.TOPICS)
            except NodeExistsError:
                raise TopicExistsError(f"topic {topic!r} already exists") from None

    async def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        found = await self.session.get(paths.topic_path(topic))
        return decode_topic_assignment(topic, found[0]) if found is not None else None

    async def set_topic_assignment(self, assignment: TopicAssignment, controller: ControllerEpoch) -> None:
        """Rewrite ``/brokers/topics/T`` (added partitions, a reassignment, a topic id), fenced."""
        data = encode_topic_assignment(assignment)
        results = await self._fenced(
            controller, lambda tx: tx.set_data(paths.topic_path(assignment.topic), data)
        )
        failure = _failure(results)
        if failure is not None:
            raise ZkError(f"writing the assignment of topic {assignment.topic!r} failed: {failure!r}")

    async def update_topic_assignment(
        self,
        topic: str,
        change: Callable[[TopicAssignment], TopicAssignment],
        controller: ControllerEpoch,
    ) -> TopicAssignment | None:
        """Read ``/brokers/topics/T``, apply ``change`` and write the result fenced and conditional on the
        version read (a partition reassignment's writes): a concurrent CreatePartitions is re-read and
        kept, never overwritten. Returns what was written, None if the topic does not exist."""
        path = paths.topic_path(topic)
        while True:
            found = await self.session.get(path)
            if found is None:
                return None
            updated = change(decode_topic_assignment(topic, found[0]))
            data = encode_topic_assignment(updated)
            version = int(found[1].version)

            def build(tx: TransactionRequest, data: bytes = data, version: int = version) -> None:
                tx.set_data(path, data, version)

            failure = _failure(await self._fenced(controller, build))
            if failure is None:
                return updated
            if not isinstance(failure, BadVersionError | NoNodeError):
                raise ZkError(f"writing the assignment of topic {topic!r} failed: {failure!r}")

    async def add_topic_partitions(self, topic: str, added: Mapping[int, Sequence[int]]) -> TopicAssignment:
        """Add partitions to ``/brokers/topics/T`` (Kafka's ``AdminZkClient.addPartitions``: not a controller
        write), conditional on the version read: a concurrent change raises :class:`ZkError` instead of
        being overwritten. Returns the new assignment."""
        found = await self.session.get(paths.topic_path(topic))
        if found is None:
            raise ZkError(f"topic {topic!r} does not exist")
        current = decode_topic_assignment(topic, found[0])
        clash = sorted(set(added) & set(current.partitions))
        if clash:
            raise ZkError(f"topic {topic!r} already has partitions {clash}")
        updated = TopicAssignment(
            topic,
            current.topic_id,
            {**current.partitions, **{p: ReplicaAssignment(tuple(r)) for p, r in added.items()}},
        )
        try:
            await self.session.set(
                paths.topic_path(topic), encode_topic_assignment(updated), int(found[1].version)
            )
        except BadVersionError:
            raise ZkError(f"topic {topic!r} changed while partitions were added; try again") from None
        return updated

    async def get_all_topics(self) -> set[str]:
        return set(await self.session.get_children(paths.TOPICS) or [])

    def watch_topics(self, on_change: Callable[[frozenset[str]], None]) -> Watch:
        """``on_change(topics)`` now and whenever a topic znode is created or deleted."""
        return self.session.watch_children(
            paths.TOPICS, lambda children: on_change(frozenset(children or []))
        )

    async def delete_topic_znode(self, topic: str, controller: ControllerEpoch) -> None:
        """Delete ``/brokers/topics/T`` and everything under it, deepest first, in one fenced multi: watchers
        see the topic and its partition states go at once, never a topic without states. (A topic with
        more than ``_MAX_MULTI_DELETES`` znodes goes in several multis, its partitions first, the topic
        znode with the last one.) A znode that vanished or appeared meanwhile makes it re-read and retry."""
        while True:
            doomed = list(reversed(await self._subtree(paths.topic_path(topic))))
            if not doomed:
                return
            chunk = doomed[:_MAX_MULTI_DELETES]

            def build(tx: TransactionRequest, chunk: list[str] = chunk) -> None:
                for path in chunk:
                    tx.delete(path)

            failure = _failure(await self._fenced(controller, build))
            if failure is not None and not isinstance(failure, NoNodeError | NotEmptyError):
                raise ZkError(f"deleting topic znode {paths.topic_path(topic)} failed: {failure!r}")

    async def _subtree(self, root: str) -> list[str]:
        """``root`` and its descendants, parents before children."""
        children = await self.session.get_children(root)
        if children is None:
            return []
        result = [root]
        for child in sorted(children):
            result += await self._subtree(f"{root}/{child}")
        return result

    # ---- partition state ----

    async def get_partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """The state znode with its version as ``partition_epoch``; None if the partition has no state yet."""
        found = await self.session.get(paths.partition_state_path(tp))
        return decode_leader_and_isr(found[0], int(found[1].version)) if found is not None else None

    async def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        wanted = list(partitions)
        states = await asyncio.gather(*(self.get_partition_state(tp) for tp in wanted))
        return {tp: state for tp, state in zip(wanted, states, strict=True) if state is not None}

    def watch_partition_state(
        self, tp: TopicPartition, on_change: Callable[[LeaderAndIsr | None], None]
    ) -> Watch:
        """``on_change(state)`` now and after every write of the partition's state znode."""
        return self.session.watch_data(
            paths.partition_state_path(tp),
            lambda found: on_change(
                decode_leader_and_isr(found[0], int(found[1].version)) if found else None
            ),
        )

    async def create_partition_states(
        self, states: Mapping[TopicPartition, LeaderAndIsr], controller: ControllerEpoch
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Create the state znodes of new partitions (fenced; their parents too). Each gets the state
        with ``controller_epoch`` = the controller's and partition epoch 0, or the error (NodeExistsError:
        someone created it first)."""
        for topic in sorted({tp.topic for tp in states}):
            await self._fenced_create_if_missing(paths.partitions_path(topic), controller)
        for tp in states:
            await self._fenced_create_if_missing(paths.partition_path(tp), controller)

        async def create(tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | Exception:
            written = replace(state, controller_epoch=controller.epoch, partition_epoch=0)
            data = encode_leader_and_isr(written)
            results = await self._fenced(
                controller, lambda tx: tx.create(paths.partition_state_path(tp), data)
            )
            failure = _failure(results)
            return failure if failure is not None else written

        outcomes = await asyncio.gather(*(create(tp, state) for tp, state in states.items()))
        return dict(zip(states, outcomes, strict=True))

    async def _fenced_create_if_missing(self, path: str, controller: ControllerEpoch) -> None:
        failure = _failure(await self._fenced(controller, lambda tx: tx.create(path, b"")))
        if failure is not None and not isinstance(failure, NodeExistsError):
            raise ZkError(f"creating {path} failed: {failure!r}")

    async def update_leader_and_isr(
        self, updates: Mapping[TopicPartition, LeaderAndIsr], controller: ControllerEpoch
    ) -> UpdateLeaderAndIsrResult:
        """The controller's writes of partition states (Kafka's ``updateLeaderAndIsr``): each one fenced
        by the controller epoch and conditional on its ``partition_epoch``. Raises
        :class:`ControllerMovedError` if this controller is deposed."""

        async def update(tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | Exception | None:
            written = replace(state, controller_epoch=controller.epoch)
            data = encode_leader_and_isr(written)
            path = paths.partition_state_path(tp)
            results = await self._fenced(
                controller, lambda tx: tx.set_data(path, data, state.partition_epoch)
            )
            failure = _failure(results)
            if failure is None:
                return replace(written, partition_epoch=int(results[0].version))
            if isinstance(failure, BadVersionError):
                return None
            return failure

        outcomes = await asyncio.gather(*(update(tp, state) for tp, state in updates.items()))
        finished = {tp: outcome for tp, outcome in zip(updates, outcomes, strict=True) if outcome is not None}
        retry = tuple(tp for tp, outcome in zip(updates, outcomes, strict=True) if outcome is None)
        return UpdateLeaderAndIsrResult(finished, retry)

    async def update_isr(self, tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr | BadVersion:
        """A leader's write of its partition's state (Kafka's ``ReplicationUtils.updateLeaderAndIsr``):
        conditional on ``state.partition_epoch``, not fenced by the controller. ``state.controller_epoch``
        stays the epoch of the controller that made the leader (copy it from the state read).

        Returns the state with its new ``partition_epoch``, or :class:`BadVersion` when the znode moved on:
        re-read and decide again.
        """
        path = paths.partition_state_path(tp)
        data = encode_leader_and_isr(state)
        try:
            stat = await self.session.set(path, data, state.partition_epoch)
            return replace(state, partition_epoch=int(stat.version))
        except (BadVersionError, NoNodeError):
            pass
        # The retry of a write that was applied before a lost connection finds its own content there.
        current = await self.get_partition_state(tp)
        if current is not None and replace(current, partition_epoch=state.partition_epoch) == state:
            return current
        return BadVersion(path, state.partition_epoch)

    # ---- ISR change notifications (a leader's ISR writes, for the controller) ----

    async def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> str:
        """Create ``/isr_change_notification/isr_change_N`` naming the partitions; returns its sequence number."""
        data = encode_isr_change_notification(partitions)
        while True:
            try:
                path, _ = await self.session.create(
                    f"{paths.ISR_CHANGE_NOTIFICATION}/{paths.ISR_CHANGE_PREFIX}", data, sequence=True
                )
                return paths.sequence_number(path, paths.ISR_CHANGE_PREFIX)
            except NoNodeError:
                await self.session.ensure_path(paths.ISR_CHANGE_NOTIFICATION)

    async def get_isr_change_notifications(self) -> list[str]:
        """The pending notifications' sequence numbers, oldest first."""
        children = await self.session.get_children(paths.ISR_CHANGE_NOTIFICATION) or []
        return sorted(paths.sequence_number(child, paths.ISR_CHANGE_PREFIX) for child in children)

    async def get_partitions_from_isr_change_notifications(
        self, sequence_numbers: Iterable[str]
    ) -> set[TopicPartition]:
        result: set[TopicPartition] = set()
        for number in sequence_numbers:
            found = await self.session.get(
                f"{paths.ISR_CHANGE_NOTIFICATION}/{paths.ISR_CHANGE_PREFIX}{number}"
            )
            if found is not None:
                result |= decode_isr_change_notification(found[0])
        return result

    async def delete_isr_change_notifications(
        self, sequence_numbers: Iterable[str], controller: ControllerEpoch
    ) -> None:
        for number in sequence_numbers:
            path = f"{paths.ISR_CHANGE_NOTIFICATION}/{paths.ISR_CHANGE_PREFIX}{number}"
            await self._fenced(controller, _delete(path))

    def watch_isr_change_notifications(self, on_change: Callable[[list[str]], None]) -> Watch:
        return self.session.watch_children(
            paths.ISR_CHANGE_NOTIFICATION,
            lambda children: on_change(
                sorted(paths.sequence_number(c, paths.ISR_CHANGE_PREFIX) for c in children or [])
            ),
        )

    # ---- log dir event notifications (a broker's failed log dir, for the controller) ----

    async def propagate_log_dir_event(self, broker_id: int, partitions: Iterable[TopicPartition]) -> str:
        """Create ``/log_dir_event_notification/log_dir_event_N``; returns its sequence number."""
        data = encode_log_dir_event(broker_id, partitions)
        prefix = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{paths.LOG_DIR_EVENT_PREFIX}"
        while True:
            try:
                path, _ = await self.session.create(prefix, data, sequence=True)
                return paths.sequence_number(path, paths.LOG_DIR_EVENT_PREFIX)
            except NoNodeError:
                await self.session.ensure_path(paths.LOG_DIR_EVENT_NOTIFICATION)

    async def get_log_dir_events(self) -> dict[str, tuple[int, frozenset[TopicPartition]]]:
        """The pending notifications by sequence number, oldest first: (broker id, partitions)."""
        children = await self.session.get_children(paths.LOG_DIR_EVENT_NOTIFICATION) or []
        result: dict[str, tuple[int, frozenset[TopicPartition]]] = {}
        for number in sorted(paths.sequence_number(c, paths.LOG_DIR_EVENT_PREFIX) for c in children):
            found = await self.session.get(
                f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{paths.LOG_DIR_EVENT_PREFIX}{number}"
            )
            if found is not None:
                result[number] = decode_log_dir_event(found[0])
        return result

    async def delete_log_dir_events(
        self, sequence_numbers: Iterable[str], controller: ControllerEpoch
    ) -> None:
        for number in sequence_numbers:
            path = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{paths.LOG_DIR_EVENT_PREFIX}{number}"
            await self._fenced(controller, _delete(path))

    def watch_log_dir_events(self, on_change: Callable[[list[str]], None]) -> Watch:
        return self.session.watch_children(
            paths.LOG_DIR_EVENT_NOTIFICATION, lambda children: on_change(list(children or []))
        )

    # ---- producer ids ----

    async def allocate_producer_id_block(
        self, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> ProducerIdBlock:
        """The next block of producer ids for ``broker_id`` (Kafka's ``ZkProducerIdManager.getNewProducerIdBlock``):
        read the latest block, write the one after it at the read version, retry on a lost race."""
        await self.session.ensure_path(paths.PRODUCER_ID_BLOCK)
        while True:
            found = await self.session.get(paths.PRODUCER_ID_BLOCK)
            if found is None:
                await self.session.ensure_path(paths.PRODUCER_ID_BLOCK)
                continue
            data, stat = found
            if data:
                current = decode_producer_id_block(data)
                if current.last_producer_id > _MAX_PRODUCER_ID - block_size:
                    raise ZkError(
                        f"producer ids are exhausted: the latest block ends at {current.last_producer_id}"
                    )
                block = ProducerIdBlock(broker_id, current.next_block_first_id, block_size)
            else:
                block = ProducerIdBlock(broker_id, 0, block_size)
            try:
                await self.session.set(
                    paths.PRODUCER_ID_BLOCK, encode_producer_id_block(block), int(stat.version)
                )
                return block
            except BadVersionError:
                continue  # another broker took a block first: read theirs and take the next

    # ---- configs ----

    async def get_entity_config(self, entity_type: str, entity_name: str) -> dict[str, str]:
        """The overrides in ``/config/<type>/<name>`` (empty when there is no znode)."""
        found = await self.session.get(paths.config_entity_path(entity_type, entity_name))
        return decode_entity_config(found[0]) if found is not None else {}

    async def set_or_create_entity_config(
        self, entity_type: str, entity_name: str, config: Mapping[str, str]
    ) -> None:
        """Write the overrides (last writer wins, as Kafka's ``setOrCreateEntityConfigs``)."""
        path = paths.config_entity_path(entity_type, entity_name)
        data = encode_entity_config(config)
        while True:
            try:
                await self.session.set(path, data)
                return
            except NoNodeError:
                pass
            try:
                await self.session.create(path, data)
                return
            except NoNodeError:
                await self.session.ensure_path(paths.config_entity_type_path(entity_type))
            except NodeExistsError:
                continue

    async def get_all_entities_with_config(self, entity_type: str) -> list[str]:
        return sorted(await self.session.get_children(paths.config_entity_type_path(entity_type)) or [])

    async def create_config_change_notification(self, entity_path: str) -> str:
        """``/config/changes/config_change_N`` with ``entity_path`` (``topics/T``); returns N."""
        data = encode_config_change_notification(entity_path)
        while True:
            try:
                path, _ = await self.session.create(
                    f"{paths.CONFIG_CHANGES}/{paths.CONFIG_CHANGE_PREFIX}", data, sequence=True
                )
                return paths.sequence_number(path, paths.CONFIG_CHANGE_PREFIX)
            except NoNodeError:
                await self.session.ensure_path(paths.CONFIG_CHANGES)

    async def change_entity_config(
        self, entity_type: str, entity_name: str, config: Mapping[str, str]
    ) -> str:
        """Kafka's ``AdminZkClient.changeEntityConfig``: write the overrides, then notify every broker."""
        await self.set_or_create_entity_config(entity_type, entity_name, config)
        return await self.create_config_change_notification(f"{entity_type}/{entity_name}")

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        return await self.get_entity_config("topics", topic)

    async def change_topic_config(self, topic: str, config: Mapping[str, str]) -> str:
        return await self.change_entity_config("topics", topic, config)

    async def get_config_change_notifications(self) -> list[str]:
        """The pending notifications' sequence numbers, oldest first."""
        children = await self.session.get_children(paths.CONFIG_CHANGES) or []
        return sorted(paths.sequence_number(child, paths.CONFIG_CHANGE_PREFIX) for child in children)

    async def get_config_change_notification(self, sequence_number: str) -> str | None:
        """The entity path (``topics/T``) a notification names; None if it was purged."""
        found = await self.session.get(
            f"{paths.CONFIG_CHANGES}/{paths.CONFIG_CHANGE_PREFIX}{sequence_number}"
        )
        return decode_config_change_notification(found[0]) if found is not None else None

    async def delete_config_change_notification(self, sequence_number: str) -> None:
        """Purge a processed notification (Kafka purges those older than 15 minutes)."""
        with contextlib.suppress(NoNodeError):
            await self.session.delete(f"{paths.CONFIG_CHANGES}/{paths.CONFIG_CHANGE_PREFIX}{sequence_number}")

    def watch_config_change_notifications(self, on_change: Callable[[list[str]], None]) -> Watch:
        return self.session.watch_children(
            paths.CONFIG_CHANGES,
            lambda children: on_change(
                sorted(paths.sequence_number(c, paths.CONFIG_CHANGE_PREFIX) for c in children or [])
            ),
        )

    # ---- topic deletion ----

    async def create_delete_topic_marker(self, topic: str) -> None:
        """``/admin/delete_topics/T``: ask the controller to delete the topic (AdminZkClient.deleteTopic)."""
        while True:
            try:
                await self.session.create(paths.delete_topic_path(topic))
                return
            except NoNodeError:
                await self.session.ensure_path(paths.DELETE_TOPICS)
            except NodeExistsError:
                raise TopicAlreadyMarkedForDeletionError(
                    f"topic {topic!r} is already marked for deletion"
                ) from None

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return await self.session.exists(paths.delete_topic_path(topic)) is not None

    async def get_topic_deletions(self) -> list[str]:
        return sorted(await self.session.get_children(paths.DELETE_TOPICS) or [])

    def watch_topic_deletions(self, on_change: Callable[[frozenset[str]], None]) -> Watch:
        return self.session.watch_children(
            paths.DELETE_TOPICS, lambda children: on_change(frozenset(children or []))
        )

    async def delete_topic_deletions(self, topics: Iterable[str], controller: ControllerEpoch) -> None:
        """Remove the markers of deleted topics (fenced)."""
        for topic in topics:
            path = paths.delete_topic_path(topic)
            failure = _failure(await self._fenced(controller, _delete(path)))
            if failure is not None and not isinstance(failure, NoNodeError):
                raise ZkError(f"deleting {path} failed: {failure!r}")

    async def delete_topic_config(self, topic: str, controller: ControllerEpoch) -> None:
        path = paths.config_entity_path("topics", topic)
        failure = _failure(await self._fenced(controller, lambda tx: tx.delete(path)))
        if failure is not None and not isinstance(failure, NoNodeError):
            raise ZkError(f"deleting {path} failed: {failure!r}")
