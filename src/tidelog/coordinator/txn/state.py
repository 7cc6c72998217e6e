"""The states of a transactional id, and which transitions between them are legal (Kafka's ``TransactionState``).

Each state has the int8 id Kafka stores in ``TransactionLogValue.transaction_status`` and the name
DescribeTransactions / ListTransactions report. The life of a transaction::

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
                                           |    --EndTxn(abort)---> PrepareAbort  --markers--> CompleteAbort
                                           +--InitProducerId / timeout: PrepareEpochFence --> PrepareAbort
    Empty / CompleteCommit / CompleteAbort --InitProducerId--> Empty ; --expiration--> Dead (a tombstone)

Invariants: :data:`VALID_PREVIOUS_STATES` is Kafka's table verbatim, and the coordinator never moves a
transactional id into a state whose table does not list the current one.
``PREPARE_EPOCH_FENCE`` and ``DEAD`` are transient: Kafka never completes a transition into either, so
neither is ever persisted (a fence is written as PrepareAbort with the bumped epoch; an expiry as a
tombstone).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

__all__ = ["VALID_PREVIOUS_STATES", "TransactionState"]


class TransactionState(IntEnum):
    """A transactional id's state; the value is Kafka's ``TransactionState.id``."""

    EMPTY = 0
    """No transaction open (after InitProducerId, or a completed transaction's record was superseded)."""
    ONGOING = 1
    """Partitions (or a group's offsets) have been added; the producer is writing."""
    PREPARE_COMMIT = 2
    """EndTxn(commit) is durable; COMMIT markers are being written."""
    PREPARE_ABORT = 3
    """EndTxn(abort), a fence or a timeout is durable; ABORT markers are being written."""
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    """The transactional id expired and is being removed (never persisted: a tombstone is written)."""
    PREPARE_EPOCH_FENCE = 7
    """The epoch is being bumped to fence a producer before aborting its transaction (never persisted)."""

    @property
    def kafka_name(self) -> str:
        """The name Kafka reports for this state (``"PrepareCommit"`` ...)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state Kafka calls ``name`` (case-sensitive, as ``TransactionState.fromName``), else ``None``."""
        return _BY_NAME.get(name)

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return VALID_PREVIOUS_STATES[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """Whether a transactional id idle in this state may expire (no transaction in flight)."""
        return self in _EXPIRABLE

    @property
    def has_pending_transaction(self) -> bool:
        """A transaction is open or being completed (Kafka's ``hasPendingTransaction``)."""
        return self in (
            TransactionState.ONGOING,
            TransactionState.PREPARE_COMMIT,
            TransactionState.PREPARE_ABORT,
        )

    @property
    def is_prepare(self) -> bool:
        """PrepareCommit or PrepareAbort: markers are being written."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)


_S = TransactionState

_NAMES: Final[dict[TransactionState, str]] = {
    _S.EMPTY: "Empty",
    _S.ONGOING: "Ongoing",
    _S.PREPARE_COMMIT: "PrepareCommit",
    _S.PREPARE_ABORT: "PrepareAbort",
    _S.COMPLETE_COMMIT: "CompleteCommit",
    _S.COMPLETE_ABORT: "CompleteAbort",
    _S.DEAD: "Dead",
    _S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME: Final[dict[str, TransactionState]] = {name: state for state, name in _NAMES.items()}
_EXPIRABLE: Final = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})

VALID_PREVIOUS_STATES: Final[dict[TransactionState, frozenset[TransactionState]]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
"""``VALID_PREVIOUS_STATES[target]``: the states a transactional id may be in to move to ``target``."""
