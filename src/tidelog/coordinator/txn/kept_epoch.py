"""tidelog's private tagged field on ``TransactionLogValue``: the epoch a kept KIP-939 transaction was
written at.

InitProducerId(Enable2Pc, KeepPreparedTxn) keeps an Ongoing two-phase-commit transaction and bumps the
epoch to fence its old producer; the response names the kept transaction's producer id and *original*
epoch (the one its records carry, which the outside transaction manager recorded when it prepared), also
on a later recovery, after a restart. The coordinator record schema tidelog has (Kafka's at 4.0) holds no
second epoch, so tidelog writes that epoch as a tagged field of its own, :data:`KEPT_EPOCH_TAG`, far
above any tag Kafka assigns: such a record is written at value version 1 (flexible), and a Kafka broker
reading it skips the unknown tag (it keeps the transaction, the bumped epoch and the 2PC timeout mark).

Invariants: only an Ongoing 2PC transaction that was kept carries the tag; its value is the int16 epoch.
"""

from __future__ import annotations

import struct
from typing import Final

from tidelog.coordinator.txn.records import TransactionLogValue

__all__ = ["KEPT_EPOCH_TAG", "KEPT_EPOCH_VALUE_VERSION", "kept_epoch_of", "with_kept_epoch"]

KEPT_EPOCH_TAG: Final = 0x7469
"""tidelog's private tag (``ti``) on ``TransactionLogValue``."""
KEPT_EPOCH_VALUE_VERSION: Final = 1
"""The first flexible ``TransactionLogValue`` version: the one that can carry tagged fields."""
_EPOCH: Final = struct.Struct(">h")


def with_kept_epoch(value: TransactionLogValue, epoch: int) -> TransactionLogValue:
    """``value`` carrying ``epoch`` in :data:`KEPT_EPOCH_TAG` (to be written at version 1)."""
    value.unknown_tagged_fields = {**(value.unknown_tagged_fields or {}), KEPT_EPOCH_TAG: _EPOCH.pack(epoch)}
    return value


def kept_epoch_of(value: TransactionLogValue) -> int | None:
    """The kept epoch a value carries, or ``None``."""
    raw = (value.unknown_tagged_fields or {}).get(KEPT_EPOCH_TAG)
    if raw is None or len(raw) != _EPOCH.size:
        return None
    return int(_EPOCH.unpack(raw)[0])
