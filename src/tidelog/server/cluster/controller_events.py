"""The controller's events and the queue that runs them one at a time (Kafka's ``ControllerEvent`` and
``ControllerEventManager``).

Everything the controller does is an event: ZooKeeper watches, the session's expiry and renewal, timers
and requests from the broker (controlled shutdown, leader elections, reassignments) only *put* an event;
one task takes them in order and runs each to its end before the next, so the controller's view is never
changed by two handlers at once.

Invariants:

- Events run in the order they were put, one at a time; a handler that fails is logged and the next event
  runs (a failing handler never stops the queue).
- An event that answers a caller carries a future; it is always resolved: with the handler's result, its
  error, or :class:`NotControllerError` if the queue closed before the event ran.
- Events carry no ZooKeeper data: a handler re-reads what it needs (a watch may fire for a change that a
  later one already overtook). So an event equal to one still waiting in the queue is dropped: the
  waiting one will see the change too. (Events with a future never compare equal.)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.reassignment import PartitionReassignment

__all__ = [
    "AlterPartitionReassignments",
    "AutoPreferredReplicaLeaderElection",
    "BrokerChange",
    "BrokerNotAvailableError",
    "ConfigChange",
    "ControlledShutdown",
    "ControllerChange",
    "ControllerEvent",
    "ControllerEventManager",
    "ElectionType",
    "Expire",
    "IsrChangeNotification",
    "ListPartitionReassignments",
    "LogDirEventNotification",
    "NotControllerError",
    "PartitionReassignmentIsrChange",
    "PartitionModifications",
    "Reelect",
    "ReplicaLeaderElection",
    "Resign",
    "StaleBrokerEpochError",
    "Startup",
    "TopicChange",
    "TopicDeletion",
]

log = logging.getLogger("tidelog.controller")


class NotControllerError(KafkaProtocolError):
    """This broker is not the active controller (any more): NOT_CONTROLLER, Kafka's ControllerMovedException."""

    error_code = ErrorCode.NOT_CONTROLLER


class StaleBrokerEpochError(KafkaProtocolError):
    """A request from a broker's previous life (a broker epoch older than its registration's)."""

    error_code = ErrorCode.STALE_BROKER_EPOCH


class BrokerNotAvailableError(KafkaProtocolError):
    """The broker named in a request is not registered."""

    error_code = ErrorCode.BROKER_NOT_AVAILABLE


class ElectionType(enum.IntEnum):
    """ElectLeaders' ``election_type`` (Kafka's ``ElectionType``)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class Startup:
    """Start campaigning: watch ``/controller`` and try to win it."""


@dataclass(frozen=True)
class ControllerChange:
    """``/controller`` was created or deleted: resign if another broker holds it, campaign if nobody does."""


@dataclass(frozen=True)
class Reelect:
    """A new ZooKeeper session replaced an expired one: campaign again (Kafka's RegisterBrokerAndReelect)."""


@dataclass(frozen=True)
class Expire:
    """The ZooKeeper session expired: resign (the ephemeral ``/controller`` is gone with it)."""


@dataclass(frozen=True, eq=False)
class Resign:
    """Step down now (Kafka's ``triggerControllerMove``): the next election may pick any broker."""

    future: asyncio.Future[None]


@dataclass(frozen=True)
class BrokerChange:
    """``/brokers/ids`` or a broker's znode changed: brokers started, failed or bounced."""


@dataclass(frozen=True)
class TopicChange:
    """``/brokers/topics`` changed: topics created (or deleted behind the controller's back)."""


@dataclass(frozen=True)
class PartitionModifications:
    """``/brokers/topics/T`` changed: partitions added (CreatePartitions)."""

    topic: str


@dataclass(frozen=True)
class TopicDeletion:
    """``/admin/delete_topics`` changed: topics to delete."""


@dataclass(frozen=True)
class IsrChangeNotification:
    """``/isr_change_notification`` has children: leaders changed ISRs (the view's ISRs are refreshed)."""


@dataclass(frozen=True)
class LogDirEventNotification:
    """``/log_dir_event_notification`` has children: a broker's log dir failed (its replicas there go)."""


@dataclass(frozen=True)
class ConfigChange:
    """A config change notification: unclean leader election may have been enabled somewhere."""


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection:
    """The periodic leader-imbalance check (``auto.leader.rebalance.enable``)."""


@dataclass(frozen=True, eq=False)
class ControlledShutdown:
    """A broker asks to shut down; answered with the partitions it still leads."""

    broker_id: int
    broker_epoch: int
    future: asyncio.Future[set[TopicPartition]]


@dataclass(frozen=True, eq=False)
class ReplicaLeaderElection:
    """ElectLeaders: answered per partition with its new state or the error."""

    partitions: Collection[TopicPartition]
    election_type: ElectionType
    future: asyncio.Future[dict[TopicPartition, LeaderAndIsr | KafkaProtocolError]] = field(repr=False)


@dataclass(frozen=True, eq=False)
class AlterPartitionReassignments:
    """AlterPartitionReassignments: per partition its target replicas (None: cancel); answered per
    partition with None (accepted) or the error."""

    reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
    future: asyncio.Future[dict[TopicPartition, KafkaProtocolError | None]] = field(repr=False)


@dataclass(frozen=True, eq=False)
class ListPartitionReassignments:
    """ListPartitionReassignments: the partitions (None: all) being reassigned, with their replica sets."""

    partitions: Collection[TopicPartition] | None
    future: asyncio.Future[dict[TopicPartition, PartitionReassignment]] = field(repr=False)


@dataclass(frozen=True)
class PartitionReassignmentIsrChange:
    """The state znode of a partition being reassigned changed: the move may be complete."""

    tp: TopicPartition


ControllerEvent = (
    Startup
    | ControllerChange
    | Reelect
    | Expire
    | Resign
    | BrokerChange
    | TopicChange
    | PartitionModifications
    | TopicDeletion
    | IsrChangeNotification
    | LogDirEventNotification
    | ConfigChange
    | AutoPreferredReplicaLeaderElection
    | ControlledShutdown
    | ReplicaLeaderElection
    | AlterPartitionReassignments
    | ListPartitionReassignments
    | PartitionReassignmentIsrChange
)


def _future_of(event: ControllerEvent) -> asyncio.Future[object] | None:
    future = getattr(event, "future", None)
    return future if isinstance(future, asyncio.Future) else None


class ControllerEventManager:
    """One queue, one task: ``put`` events, :meth:`start` the task that runs ``process`` on each in order."""

    def __init__(self, process: Callable[[ControllerEvent], Awaitable[None]]) -> None:
        self._process = process
        self._queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self._waiting: set[ControllerEvent] = set()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tidelog-controller")

    def put(self, event: ControllerEvent) -> None:
        """Queue ``event``; after :meth:`close`, an event with a future gets :class:`NotControllerError`."""
        if self._closed:
            self._fail(event)
            return
        if event in self._waiting:
            return
        self._waiting.add(event)
        self._queue.put_nowait(event)

    async def close(self) -> None:
        """Stop the task (the event it runs is cancelled where it awaits) and fail what is still queued."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._queue.empty():
            self._fail(self._queue.get_nowait())
        self._waiting.clear()

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            self._waiting.discard(event)
            try:
                await self._process(event)
            except asyncio.CancelledError:
                self._fail(event)
                raise
            except Exception:  # one failing event must not stop the controller
                log.exception("Uncaught error processing event %s", event)
                future = _future_of(event)
                if future is not None and not future.done():
                    future.set_exception(NotControllerError("the controller failed to process the request"))

    @staticmethod
    def _fail(event: ControllerEvent) -> None:
        future = _future_of(event)
        if future is not None and not future.done():
            future.set_exception(NotControllerError("the controller stopped before processing the request"))
