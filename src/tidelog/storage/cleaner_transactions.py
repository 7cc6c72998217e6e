"""Transactions as the cleaner sees them: which batches were aborted, and when markers may go.

Two parts, both pure (batch headers and marker types in, verdicts out):

* :class:`TransactionScanner` reads a log's batches in offset order and finds every aborted transaction
  (producer id, first offset, offset of its ABORT marker) and the first offset of a transaction still open
  where the scan stops. This is what Kafka keeps in ``.txnindex`` files and the producer state's first
  unstable offset; the cleaner derives it from the bytes it rewrites where it can. A transaction that began
  below the last stable offset is decided even when its marker lies past the scan (a long transaction, its
  marker in the active segment): :meth:`TransactionScanner.decide_open` takes the aborted ones from the
  ``.txnindex`` of the segments past the scan, as Kafka's ``collectAbortedTransactions`` does, and the
  others committed.
* :class:`CleanedTransactionMetadata` is Kafka's class of that name: fed the aborted transactions and the
  batches in order, it says which batches may be discarded (Kafka's rules):

  - a data batch of an aborted transaction: always (its records never count for a read_committed reader);
  - an ABORT marker: once no batch of its transaction is left (the cleaning that removes the last ones
    still keeps the marker, so that the marker outlives its data);
  - a COMMIT marker: once no batch of its transaction is left;
  - an already emptied control batch: always.

  A discardable marker is then still kept until ``delete.retention.ms`` after a cleaning first saw it
  discardable (the delete horizon in its batch header), as tombstones are.

Invariant: a transaction's batches all precede its marker, and a transaction of one producer never
overlaps another of the same producer, so one pass in offset order decides every batch.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from tidelog.protocol.records import ControlRecordType, RecordBatchHeader

__all__ = ["AbortedRange", "CleanedTransactionMetadata", "TransactionScanner"]


_END_MARKERS = frozenset({ControlRecordType.ABORT, ControlRecordType.COMMIT})


class AbortedRange(NamedTuple):
    """An aborted transaction: its producer, first offset, and the offset of its ABORT marker."""

    producer_id: int
    first_offset: int
    last_offset: int


class TransactionScanner:
    """Feed every batch header in offset order (control batches with their marker type)."""

    def __init__(self) -> None:
        self._open: dict[int, int] = {}
        self.aborted: list[AbortedRange] = []

    def on_batch(self, header: RecordBatchHeader, marker: int | None = None) -> None:
        """``marker``: a control batch's record type (:class:`ControlRecordType`), None if it holds none."""
        if not header.is_transactional:
            return
        producer_id = header.producer_id
        if not header.is_control:
            self._open.setdefault(producer_id, header.base_offset)
            return
        if marker is not None and marker not in _END_MARKERS:
            return
        first = self._open.pop(producer_id, None)
        if first is not None and marker == ControlRecordType.ABORT:
            self.aborted.append(AbortedRange(producer_id, first, header.last_offset))

    def decide_open(self, stable_below: int, aborted_past_scan: Iterable[AbortedRange]) -> None:
        """Close the transactions still open that began below ``stable_below`` (at most the last stable
        offset, so they are decided, their markers past the scan): aborted if ``aborted_past_scan`` (the
        ``.txnindex`` entries of the segments past the scan) holds one of the producer's covering the first
        batch seen, else committed."""
        aborted: dict[int, list[AbortedRange]] = {}
        for txn in aborted_past_scan:
            aborted.setdefault(txn.producer_id, []).append(txn)
        for producer_id, first in list(self._open.items()):
            if first >= stable_below:
                continue
            del self._open[producer_id]
            for txn in aborted.get(producer_id, ()):
                if txn.first_offset <= first <= txn.last_offset:
                    self.aborted.append(txn)
                    break

    @property
    def first_open_offset(self) -> int | None:
        """First offset of the oldest transaction without a marker so far, None if all are closed."""
        return min(self._open.values(), default=None)


@dataclass(slots=True)
class _AbortedTxnState:
    txn: AbortedRange
    last_observed_batch_offset: int | None = None


@dataclass(slots=True)
class CleanedTransactionMetadata:
    """Transaction state carried through one pass of the cleaner over a log (Kafka's class of that name)."""

    _pending: list[tuple[int, int, AbortedRange]] = field(default_factory=list)
    _ongoing_committed: set[int] = field(default_factory=set)
    _ongoing_aborted: dict[int, _AbortedTxnState] = field(default_factory=dict)
    retained_aborted: list[AbortedRange] = field(default_factory=list)
    """Aborted transactions whose marker this pass kept with some of their batches (the cleaned
    ``.txnindex`` content)."""

    def add_aborted_transactions(self, aborted: list[AbortedRange]) -> None:
        for txn in aborted:
            heapq.heappush(self._pending, (txn.first_offset, txn.last_offset, txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, header: RecordBatchHeader, marker: int | None) -> bool:
        """Whether this control batch may be discarded. ``marker`` is its record's type (None: the batch holds
        no record any more; a type that is no transaction marker is kept)."""
        self._consume_aborted_up_to(header.last_offset)
        if marker is None:
            return True
        producer_id = header.producer_id
        if marker == ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(producer_id, None)
            if state is not None and state.last_observed_batch_offset is not None:
                self.retained_aborted.append(state.txn)
                return False
            return True
        if marker == ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, header: RecordBatchHeader) -> bool:
        """Whether this data batch belongs to an aborted transaction (and so may be discarded)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        state = self._ongoing_aborted.get(header.producer_id)
        if state is not None:
            state.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False
