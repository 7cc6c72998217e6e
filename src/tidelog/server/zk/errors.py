"""Typed outcomes of ZooKeeper operations that the cluster logic decides on.

Invariant: an exception here means ZooKeeper refused or could not take a write, never that the write
happened; a conditional write that lost its race is not an exception but a :class:`BadVersion` value, so
the caller has to look at it (re-read and decide again) rather than let it fly.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BadVersion",
    "BrokerIdInUseError",
    "ControllerMovedError",
    "TopicAlreadyMarkedForDeletionError",
    "TopicExistsError",
    "ZkError",
    "ZkSessionExpiredError",
]


class ZkError(RuntimeError):
    """A ZooKeeper operation failed for a reason the caller cannot fix by re-reading."""


class ZkSessionExpiredError(ZkError):
    """The session ended (expired or closed) before the operation completed: nothing this session wrote
    under an ephemeral znode exists any more, and the broker must register again."""


class ControllerMovedError(ZkError):
    """A controller write was fenced: ``/controller_epoch`` is no longer at the version this controller
    set when it won, so another controller has been elected since (Kafka's ControllerMovedException)."""


class BrokerIdInUseError(ZkError):
    """``/brokers/ids/N`` exists and belongs to another live session: ``broker.id`` N is taken
    (ZooKeeper's NODE_EXISTS)."""

    def __init__(self, broker_id: int, owner_session_id: int) -> None:
        super().__init__(
            f"broker.id {broker_id} is already registered in ZooKeeper by another live session "
            f"(0x{owner_session_id:x}): /brokers/ids/{broker_id} exists (NODE_EXISTS)"
        )
        self.broker_id = broker_id
        self.owner_session_id = owner_session_id


class TopicExistsError(ZkError):
    """``/brokers/topics/T`` exists already."""


class TopicAlreadyMarkedForDeletionError(ZkError):
    """``/admin/delete_topics/T`` exists already."""


@dataclass(frozen=True)
class BadVersion:
    """A conditional write was refused: the znode is no longer at ``expected_version`` (or is gone).

    The writer's view is stale; it must re-read the znode and decide again.
    """

    path: str
    expected_version: int
