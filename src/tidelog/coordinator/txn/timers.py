"""The transaction coordinator's timers: what each is for and how it is named.

A :class:`TxnTimerKey` is what goes out in a result's ``ScheduleTimer`` / ``CancelTimer`` and comes back
to ``TransactionCoordinator.on_timeout``; the partition remembers the deadline it asked for under the
same key and ignores a firing that no longer matches it.

Invariants: a key names one timer of one ``__transaction_state`` partition (``partition`` routes a
firing to it); keys are immutable and hashable.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["TxnTimerKey", "TxnTimerKind"]


class TxnTimerKind(Enum):
    TRANSACTION_TIMEOUT = "transaction-timeout"
    """An Ongoing transaction's ``transaction.timeout.ms``: when it fires the transaction is aborted."""
    TRANSACTIONAL_ID_EXPIRATION = "transactional-id-expiration"
    """A partition's periodic removal of idle transactional ids (``transactional.id.expiration.ms``)."""


@dataclass(frozen=True, slots=True)
class TxnTimerKey:
    """Identity of a timer: scheduling a key again replaces the earlier deadline."""

    kind: TxnTimerKind
    partition: int
    """The ``__transaction_state`` partition that owns the timer."""
    transactional_id: str = ""
