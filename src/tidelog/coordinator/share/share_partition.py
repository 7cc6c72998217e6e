"""One share-partition's in-flight window (KIP-932's ``SharePartition``), as offset ranges.

The window is ``[start_offset, end_offset)``: the share-partition start offset (SPSO, every record below it
is acknowledged or archived) to one past the last offset ever acquired (Kafka's SPEO is that offset minus
one). It is covered, without gaps or overlaps and in offset order, by :class:`InFlightRange` s: a run of
offsets that share one state, delivery count, owning member and deadline. A window of a million records
acquired, acknowledged or released together is one range, so memory grows with the number of distinct
runs, never with the number of records.

Invariants (checked by ``tests/coordinator/test_share_partition.py`` against a per-offset model):

- Records beyond ``end_offset`` have never been delivered; acquiring them extends the window, never past
  the offset the caller can serve (``fetchable_end``) and never to more than ``max_record_locks`` records in
  flight (``end_offset - start_offset``, less the records waiting for a deliver-at time, see below; a
  run of ACKNOWLEDGED or ARCHIVED records of one delivery count held in the window only by waiting records
  before it counts once: records settled behind delayed ones never fill the limit while those wait, and
  the persisted state, a batch per run, stays bounded by the limit). Without waiting records, in flight
  is the whole window, as in Kafka.
- Each acquisition raises the record's delivery count by one and locks it to one member until
  ``now_ms + lock_ms``; acquisition takes the lowest acquirable offsets first, up to ``max_records``
  (KIP-1206's ``record_limit``), or, given the record batches' last offsets (``batch_optimized``, Kafka's
  default), on to the end of the batch holding the last record that limit allows: the limit is soft, so
  one batch is never split over fetches. The record-lock limit bounds the records taken before that
  rounding, as Kafka's does (so a window may exceed it by the rest of one batch).
- An acknowledgement names offsets all ACQUIRED by the acknowledging member, or changes nothing and answers
  INVALID_RECORD_STATE (offsets never acquired, acquired by another member, or acknowledged already).
  ACCEPT → ACKNOWLEDGED; REJECT and GAP → ARCHIVED; RELEASE → AVAILABLE again (ARCHIVED once the delivery
  count has reached ``delivery_count_limit``). A lock that expires and a member that leaves or is fenced
  release the same way.
- With ``dead_letter`` set (the group names a dead-letter topic, KIP-1191), REJECT and the delivery-count
  limit lead to ARCHIVING instead: the record waits for its dead-letter copy, is persisted so (state 3), is
  never acquired or acknowledged, holds the window's start and counts against ``max_record_locks`` until
  :meth:`SharePartition.archive_dead_letters` archives it.
- A released record is acquirable again only from ``now_ms + backoff(delivery_count)`` (``backoff``
  defaults to none); a record with a deliver-at time only from then (``not_before``), and while it waits it
  neither counts against ``max_record_locks`` nor holds back the acquisition of records after it.
- Whenever the window starts with ACKNOWLEDGED or ARCHIVED records, ``start_offset`` moves past them.

Records waiting for a deliver-at time are not ranges of their own (a million of them would make every fetch
scan a million ranges): each is a bit and a heap entry in :class:`.DelayedOffsets`, and the window holds
them in *held* ranges (``deadline_ms == _PER_RECORD``) that an acquisition skips whole. A held range's
offsets are the waiting ones and, between them, ACKNOWLEDGED or ARCHIVED records of one delivery count (its
``state`` and ``delivery_count``; AVAILABLE when it holds only waiting records), so records settled between
delayed ones merge into one range too. When its due time passes (at the next call given ``now_ms``), a
record leaves its held range for a *due* range (``deadline_ms == _DUE``), AVAILABLE with ``delayed`` set
until acquired, its due time kept aside (so due records next to each other are one range, whatever their
times); it is shown as a range of its own with its due time as ``deadline_ms``, as all along: :attr:`SharePartition.ranges`, :meth:`SharePartition.state_of`
and :meth:`SharePartition.state_batches` show every waiting or due record as such a range (a view built for
the call), so held and due ranges are never seen outside.

Nothing here reads a clock: every operation that depends on time takes ``now_ms``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

from tidelog.protocol.errors import ErrorCode

from .delayed_offsets import DelayedOffsets

__all__ = [
    "AcknowledgeType",
    "AcquiredRange",
    "ArchivedRange",
    "InFlightRange",
    "PendingDeadLetter",
    "RecordState",
    "SharePartition",
]


class RecordState(IntEnum):
    """Kafka's ``RecordState`` (the ids are the ones ShareSnapshot/ShareUpdate state batches carry)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    """Waiting for its dead-letter copy (KIP-1191), then ARCHIVED."""
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """The acknowledge types of ShareFetch/ShareAcknowledge (RENEW, v2, is not served)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(slots=True)
class InFlightRange:
    """Offsets ``first..last`` (inclusive) in one state."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    """The member holding the lock (ACQUIRED only)."""
    deadline_ms: int = 0
    """ACQUIRED: when the acquisition lock expires. AVAILABLE: not acquirable before this time."""
    delayed: bool = False
    """AVAILABLE and waiting for a deliver-at time: not counted against ``max_record_locks``."""
    rejected: bool | None = None
    """ARCHIVING: REJECTed (True) or at the delivery-count limit (False); None when loaded (the persisted
    state does not say which)."""

    def same_run(self, other: InFlightRange) -> bool:
        return (
            self.state == other.state
            and self.delivery_count == other.delivery_count
            and self.member_id == other.member_id
            and self.deadline_ms == other.deadline_ms
            and self.delayed == other.delayed
            and self.rejected == other.rejected
        )

    @property
    def size(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """What ShareFetch answers in ``AcquiredRecords``."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class PendingDeadLetter:
    """ARCHIVING offsets ``first_offset..last_offset`` waiting for their dead-letter copies."""

    first_offset: int
    last_offset: int
    delivery_count: int
    rejected: bool
    """REJECTed by a consumer; otherwise the delivery-count limit was reached."""


@dataclass(frozen=True, slots=True)
class ArchivedRange:
    """Records archived by REJECT or by reaching the delivery-count limit (dead-letter candidates)."""

    first_offset: int
    last_offset: int
    delivery_count: int


Backoff = Callable[[int], int]
"""Delivery count → ms before a released record is acquirable again."""


def _no_backoff(_delivery_count: int) -> int:
    return 0


_PER_RECORD = -(1 << 63)
"""The ``deadline_ms`` of a held range: its records' due times are in the :class:`.DelayedOffsets`."""

_SETTLED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


_DUE = -(1 << 62)
"""The ``deadline_ms`` of a due range: delayed records whose time has come (in ``SharePartition._due_heap``)."""


_OFFSET_MASK = (1 << 64) - 1


def _held(r: InFlightRange) -> bool:
    return r.deadline_ms == _PER_RECORD


def _compact(r: InFlightRange) -> bool:
    """A held or due range: its records' times are kept aside, the view shows them one by one."""
    return r.deadline_ms in (_PER_RECORD, _DUE)


def _settled_kind(r: InFlightRange) -> tuple[RecordState, int] | None:
    """What a held range may absorb ``r`` as (or ``r`` absorb a held range as): ``(state, delivery_count)``
    of its settled records; ``(AVAILABLE, 0)`` for a held range of waiting records only (absorbs any
    settled kind); None if ``r`` cannot join a held range."""
    if _held(r):
        return r.state, r.delivery_count
    if r.state in _SETTLED and r.member_id is None and r.rejected is None:
        return r.state, r.delivery_count
    return None


def _absorb(a: InFlightRange, b: InFlightRange) -> bool:
    """Merge ``b`` (next to it) into ``a`` if they are one run; returns whether it did."""
    if a.same_run(b):
        a.last = b.last
        return True
    if not (_held(a) or _held(b)):
        return False
    ka, kb = _settled_kind(a), _settled_kind(b)
    if ka is None or kb is None:
        return False
    waiting_only = (RecordState.AVAILABLE, 0)
    if ka != kb and waiting_only not in (ka, kb):
        return False
    kind = kb if ka == waiting_only else ka
    a.last = b.last
    a.state, a.delivery_count = kind
    a.deadline_ms = _PER_RECORD
    a.delayed = True
    return True


def _batch_end(batch_ends: Sequence[int], offset: int) -> int:
    """The last offset of the batch holding ``offset`` (``offset`` itself when no batch is known)."""
    i = bisect_left(batch_ends, offset)
    return batch_ends[i] if i < len(batch_ends) else offset


class SharePartition:
    """The in-flight window of one (group, topic, partition)."""

    def __init__(
        self,
        start_offset: int,
        *,
        max_record_locks: int = 2000,
        delivery_count_limit: int = 5,
        backoff: Backoff = _no_backoff,
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.max_record_locks = max_record_locks
        self.delivery_count_limit = delivery_count_limit
        self.backoff = backoff
        self.dead_letter = False
        """The group names a dead-letter topic: REJECT and the delivery-count limit lead to ARCHIVING."""
        self._ranges: list[InFlightRange] = []
        self._delayed = 0
        """Records AVAILABLE with ``delayed`` set (kept out of the record-lock count): the waiting ones and
        those due but not acquired yet."""
        self._waiting = DelayedOffsets()
        self._waiting.clear(start_offset)
        self._due_count = 0
        """Records in due ranges."""
        self._due_heap: list[int] = []
        """``due << 64 | offset`` of those (and of records since acquired or dropped: skipped at the top)."""
        self.archiving = 0
        """Records in ARCHIVING (waiting for their dead-letter copies)."""

    # -- reading -----------------------------------------------------------------------------------------

    @property
    def ranges(self) -> Sequence[InFlightRange]:
        """The window's ranges in offset order (read only; a view built for the call when records wait for a
        deliver-at time)."""
        if not any(_compact(r) for r in self._ranges):
            return self._ranges
        return self._view(self._ranges, self._times())

    @property
    def in_flight(self) -> int:
        """Records counted against ``max_record_locks`` (a run of records settled behind a waiting one
        counts once)."""
        behind = sum(
            self._waiting.settled_behind(r.first, r.last)
            for r in self._ranges
            if _held(r) and r.state is not RecordState.AVAILABLE
        )
        return self.end_offset - self.start_offset - self._delayed - behind

    def state_of(self, offset: int) -> InFlightRange | None:
        """The range holding ``offset``, None outside the window."""
        if not self.start_offset <= offset < self.end_offset:
            return None
        r = self._ranges[self._index(offset)]
        if not _compact(r):
            return r
        view = self._view([r], self._times())
        return view[bisect_right(view, offset, key=lambda v: v.first) - 1]

    def acquired(self) -> Iterator[InFlightRange]:
        """The ACQUIRED ranges (XPENDING's view)."""
        return (r for r in self._ranges if r.state is RecordState.ACQUIRED)

    def next_acquirable(self, now_ms: int, fetchable_end: int) -> int | None:
        """The lowest offset an acquisition at ``now_ms`` would take, None if there is none."""
        self._promote(now_ms)
        for r in self._ranges:
            if r.first >= fetchable_end:
                return None
            if r.state is RecordState.AVAILABLE and r.deadline_ms <= now_ms and not _held(r):
                return r.first
        if self.end_offset < fetchable_end and self.in_flight < self.max_record_locks:
            return self.end_offset
        return None

    def next_deadline(self) -> int | None:
        """The earliest lock expiry or availability time still ahead (for a timer), None if none."""
        deadlines = [
            r.deadline_ms
            for r in self._ranges
            if r.state is RecordState.ACQUIRED or (r.state is RecordState.AVAILABLE and r.deadline_ms > 0)
        ]
        deadlines.extend(
            due for due in (self._waiting.next_due(), self._next_due_at()) if due is not None and due > 0
        )
        return min(deadlines, default=None)

    # -- acquiring ---------------------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        max_records: int,
        fetchable_end: int,
        now_ms: int,
        lock_ms: int,
        delays: Sequence[tuple[int, int]] = (),
        skip: Sequence[tuple[int, int]] = (),
        batch_ends: Sequence[int] = (),
    ) -> list[AcquiredRange]:
        """Lock up to ``max_records`` (no limit if <= 0) acquirable records below ``fetchable_end`` to
        ``member_id`` until ``now_ms + lock_ms``, lowest offsets first.

        ``batch_ends``: the last offsets of the record batches being served, ascending (KIP-1206's
        ``batch_optimized``): once ``max_records`` (or the record-lock limit) is reached at offset ``o``,
        the acquirable records up to the end of the batch holding ``o`` are taken too. Empty: at most
        ``max_records`` (``record_limit``).

        ``delays``: ``(offset, deliver_at_ms)`` in offset order, for records not yet in the window that
        must not be delivered before a later time; they join the window AVAILABLE from that time, outside
        the record-lock count, and the records after them are acquired as if they were not there.
        ``skip``: ``(first, last)`` offset ranges, in order, not yet in the window that no consumer is to
        get (transaction markers, aborted records under read_committed): they join the window ARCHIVED."""
        self.expire_locks(now_ms)
        remaining = max_records if max_records > 0 else 1 << 62
        taken: list[InFlightRange] = []
        deadline = now_ms + lock_ms
        soft_end = -1
        """The limit was reached: acquirable records up to here (the end of its batch) are still taken."""
        i = 0
        while i < len(self._ranges) and (remaining > 0 or self._ranges[i].first <= soft_end):
            r = self._ranges[i]
            if r.first >= fetchable_end:
                break
            if r.state is RecordState.AVAILABLE and r.deadline_ms <= now_ms and not _held(r):
                allowed = remaining if remaining > 0 else soft_end - r.first + 1
                take = min(allowed, r.size, fetchable_end - r.first)
                if take < r.size:
                    self._split(i, r.first + take)
                    r = self._ranges[i]
                if r.delayed:
                    self._delayed -= r.size
                if r.deadline_ms == _DUE:
                    self._due_count -= r.size
                r.state = RecordState.ACQUIRED
                r.delivery_count += 1
                r.member_id = member_id
                r.deadline_ms = deadline
                r.delayed = False
                remaining -= r.size
                taken.append(r)
                if remaining <= 0:
                    soft_end = max(soft_end, _batch_end(batch_ends, r.last))
            i += 1
        pending = [(o, t) for o, t in delays if self.end_offset <= o < fetchable_end and t > now_ms]
        skipped = [(max(f, self.end_offset), last) for f, last in skip if last >= self.end_offset]
        d = k = 0
        in_flight = self.in_flight
        while self.end_offset < fetchable_end:
            while k < len(skipped) and skipped[k][1] < self.end_offset:
                k += 1
            if k < len(skipped) and skipped[k][0] <= self.end_offset:
                last = min(skipped[k][1], fetchable_end - 1)
                self._ranges.append(InFlightRange(self.end_offset, last, RecordState.ARCHIVED, 0))
                in_flight += last + 1 - self.end_offset
                self.end_offset = last + 1
                continue
            if d < len(pending) and pending[d][0] == self.end_offset:
                offset, due = pending[d]
                d += 1
                self._waiting.add(offset, due)
                if self._ranges and _held(self._ranges[-1]):
                    self._ranges[-1].last = offset
                else:
                    self._ranges.append(
                        InFlightRange(offset, offset, RecordState.AVAILABLE, 0, None, _PER_RECORD, True)
                    )
                self._delayed += 1
                self.end_offset += 1
                continue
            stop = min(
                pending[d][0] if d < len(pending) else fetchable_end,
                skipped[k][0] if k < len(skipped) else fetchable_end,
            )
            budget = min(remaining, self.max_record_locks - in_flight)
            new = min(budget if budget > 0 else soft_end - self.end_offset + 1, stop - self.end_offset)
            if new <= 0:
                break
            r = InFlightRange(
                self.end_offset, self.end_offset + new - 1, RecordState.ACQUIRED, 1, member_id, deadline
            )
            self._ranges.append(r)
            self.end_offset += new
            in_flight += new
            remaining -= new
            taken.append(r)
            if new >= budget:
                soft_end = max(soft_end, _batch_end(batch_ends, r.last))
        answer: list[AcquiredRange] = []
        for r in taken:
            if (
                answer
                and answer[-1].last_offset + 1 == r.first
                and answer[-1].delivery_count == r.delivery_count
            ):
                answer[-1] = AcquiredRange(answer[-1].first_offset, r.last, r.delivery_count)
            else:
                answer.append(AcquiredRange(r.first, r.last, r.delivery_count))
        self._coalesce_all()
        self._advance_start()
        return answer

    # -- acknowledging and releasing ---------------------------------------------------------------------

    def acknowledge(
        self, member_id: str, first: int, last: int, types: Sequence[int], now_ms: int
    ) -> tuple[ErrorCode, list[ArchivedRange]]:
        """Apply one acknowledgement batch: ``types`` is one type for every offset, or one per offset.

        Returns the error (nothing changes unless NONE) and the ranges REJECT or the delivery-count limit
        archived."""
        if first > last or len(types) not in (1, last - first + 1):
            return ErrorCode.INVALID_REQUEST, []
        if any(t not in (0, 1, 2, 3) for t in types):
            return ErrorCode.INVALID_REQUEST, []
        if first < self.start_offset or last >= self.end_offset:
            return ErrorCode.INVALID_RECORD_STATE, []
        i = self._index(first)
        while i < len(self._ranges) and self._ranges[i].first <= last:
            r = self._ranges[i]
            if r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                return ErrorCode.INVALID_RECORD_STATE, []
            i += 1
        archived: list[ArchivedRange] = []
        if len(types) == 1:
            runs = [(first, last, types[0])]
        else:
            runs = []
            for offset, t in zip(range(first, last + 1), types, strict=True):
                if runs and runs[-1][2] == t:
                    runs[-1] = (runs[-1][0], offset, t)
                else:
                    runs.append((offset, offset, t))
        for run_first, run_last, t in runs:
            for r in self._slice(run_first, run_last):
                if t == AcknowledgeType.ACCEPT:
                    self._settle(r, RecordState.ACKNOWLEDGED)
                elif t == AcknowledgeType.RELEASE:
                    if self._release(r, now_ms):
                        archived.append(ArchivedRange(r.first, r.last, r.delivery_count))
                elif t == AcknowledgeType.REJECT:
                    self._archive(r, rejected=True)
                    archived.append(ArchivedRange(r.first, r.last, r.delivery_count))
                else:
                    self._settle(r, RecordState.ARCHIVED)
        self._coalesce_all()
        self._advance_start()
        return ErrorCode.NONE, archived

    def expire_locks(self, now_ms: int) -> list[ArchivedRange]:
        """Release every acquisition whose lock deadline is ``<= now_ms``; returns what the delivery-count
        limit archived; records whose deliver-at time has come become acquirable."""
        self._promote(now_ms)
        archived: list[ArchivedRange] = []
        expired = False
        for r in self._ranges:
            if r.state is RecordState.ACQUIRED and r.deadline_ms <= now_ms:
                expired = True
                if self._release(r, now_ms):
                    archived.append(ArchivedRange(r.first, r.last, r.delivery_count))
        if expired:
            self._coalesce_all()
            self._advance_start()
        return archived

    def release_member(self, member_id: str, now_ms: int) -> list[ArchivedRange]:
        """Release every record ``member_id`` holds (it left, closed its session or was fenced)."""
        archived: list[ArchivedRange] = []
        released = False
        for r in self._ranges:
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                released = True
                if self._release(r, now_ms):
                    archived.append(ArchivedRange(r.first, r.last, r.delivery_count))
        if released:
            self._coalesce_all()
            self._advance_start()
        return archived

    def pending_dead_letters(self) -> list[PendingDeadLetter]:
        """The ARCHIVING ranges, in offset order (a loaded range whose cause was not persisted counts as
        rejected below the delivery-count limit, as reaching it otherwise)."""
        if not self.archiving:
            return []
        return [
            PendingDeadLetter(
                r.first,
                r.last,
                r.delivery_count,
                r.rejected if r.rejected is not None else r.delivery_count < self.delivery_count_limit,
            )
            for r in self._ranges
            if r.state is RecordState.ARCHIVING
        ]

    def archive_dead_letters(self, first: int, last: int) -> None:
        """The ARCHIVING records among ``first..last`` have their dead-letter copies: ARCHIVED."""
        first, last = max(first, self.start_offset), min(last, self.end_offset - 1)
        if first > last:
            return
        for r in self._slice(first, last):
            if r.state is RecordState.ARCHIVING:
                r.state = RecordState.ARCHIVED
                r.rejected = None
                self.archiving -= r.size
        self._coalesce_all()
        self._advance_start()

    def defer(self, offset: int, deliver_at_ms: int) -> None:
        """A never-delivered AVAILABLE record of the window waits for its delivery time (after a load: the
        persisted state does not keep delivery times, the records' headers do)."""
        if not self.start_offset <= offset < self.end_offset:
            return
        r = self._ranges[self._index(offset)]
        if _held(r) or r.state is not RecordState.AVAILABLE or r.delivery_count != 0 or r.delayed:
            return
        i = self._split_at(offset)
        if offset < self._ranges[i].last:
            self._split(i, offset + 1)
        r = self._ranges[i]
        r.deadline_ms = _PER_RECORD
        r.delayed = True
        self._waiting.add(offset, deliver_at_ms)
        self._delayed += 1
        self._coalesce_all()

    def move_start(self, offset: int) -> None:
        """Records below ``offset`` are gone (the log start moved past them, or an offset reset): the window
        starts there."""
        if offset <= self.start_offset:
            return
        if offset >= self.end_offset:
            self._ranges = []
            self._delayed = 0
            self._waiting.clear(offset)
            self._due_count, self._due_heap = 0, []
            self.archiving = 0
            self.start_offset = self.end_offset = offset
            return
        i = self._split_at(offset)
        dropped = self._ranges[:i]
        self._delayed -= sum(r.size for r in dropped if r.delayed and not _held(r))
        self._due_count -= sum(r.size for r in dropped if r.deadline_ms == _DUE)
        self._delayed -= self._waiting.drop_below(offset)
        self.archiving -= sum(r.size for r in dropped if r.state is RecordState.ARCHIVING)
        del self._ranges[:i]
        self.start_offset = offset

    # -- replay ------------------------------------------------------------------------------------------

    def load(self, start_offset: int, batches: Sequence[tuple[int, int, int, int]]) -> None:
        """Replace the state with a persisted one: ``(first, last, state, delivery_count)`` batches above
        ``start_offset`` (Kafka's state batches; ACQUIRED is never persisted and loads as AVAILABLE;
        ARCHIVING loads as ARCHIVING, its dead-letter copies perhaps written)."""
        self._ranges = []
        self._delayed = 0
        self._waiting.clear(start_offset)
        self._due_count, self._due_heap = 0, []
        self.archiving = 0
        self.start_offset = start_offset
        self.end_offset = start_offset
        for first, last, state, count in sorted(batches):
            if last < self.end_offset:
                continue
            first = max(first, self.end_offset)
            if first > self.end_offset:
                self._ranges.append(InFlightRange(self.end_offset, first - 1, RecordState.AVAILABLE, 0))
            loaded = RecordState(state) if state != RecordState.ACQUIRED else RecordState.AVAILABLE
            self._ranges.append(InFlightRange(first, last, loaded, count))
            if loaded is RecordState.ARCHIVING:
                self.archiving += last - first + 1
            self.end_offset = last + 1
        self._coalesce_all()
        self._advance_start()

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """The window as Kafka persists it: ``(first, last, state, delivery_count)``. An acquisition is not
        persisted: an ACQUIRED record is written as it was before it (AVAILABLE, one delivery fewer), and
        the never-delivered records that leaves at the end of the window are left out. So acquiring never
        changes what is persisted; acknowledging, releasing and archiving do."""
        out: list[tuple[int, int, int, int]] = []
        for first, last, state, count in self._persisted_runs():
            if out and out[-1][1] + 1 == first and out[-1][2] == state and out[-1][3] == count:
                out[-1] = (out[-1][0], last, state, count)
            else:
                out.append((first, last, state, count))
        while out and out[-1][2] == RecordState.AVAILABLE and out[-1][3] == 0:
            out.pop()
        return out

    # -- internals ---------------------------------------------------------------------------------------

    def _persisted_runs(self) -> Iterator[tuple[int, int, int, int]]:
        """The ranges as persisted (a waiting record is AVAILABLE, never delivered), not yet merged."""
        for r in self._ranges:
            if r.state is RecordState.ACQUIRED:
                yield r.first, r.last, int(RecordState.AVAILABLE), r.delivery_count - 1
            elif not _held(r):
                yield r.first, r.last, int(r.state), r.delivery_count
            elif r.state is RecordState.AVAILABLE:  # waiting records only
                yield r.first, r.last, int(RecordState.AVAILABLE), 0
            else:
                for first, last, waiting in self._waiting.runs(r.first, r.last):
                    if waiting:
                        yield first, last, int(RecordState.AVAILABLE), 0
                    else:
                        yield first, last, int(r.state), r.delivery_count

    def _view(self, ranges: Sequence[InFlightRange], due: dict[int, int]) -> list[InFlightRange]:
        """``ranges`` with their held ranges shown as ranges of settled and waiting records."""
        out: list[InFlightRange] = []

        def put(r: InFlightRange) -> None:
            if out and out[-1].same_run(r):
                out[-1].last = r.last
            else:
                out.append(r)

        for r in ranges:
            if r.deadline_ms == _DUE:
                for offset in range(r.first, r.last + 1):
                    put(InFlightRange(offset, offset, RecordState.AVAILABLE, 0, None, due[offset], True))
                continue
            if not _held(r):
                put(
                    InFlightRange(
                        r.first,
                        r.last,
                        r.state,
                        r.delivery_count,
                        r.member_id,
                        r.deadline_ms,
                        r.delayed,
                        r.rejected,
                    )
                )
                continue
            for first, last, waiting in self._waiting.runs(r.first, r.last):
                if not waiting:
                    put(InFlightRange(first, last, r.state, r.delivery_count))
                    continue
                for offset in range(first, last + 1):
                    put(InFlightRange(offset, offset, RecordState.AVAILABLE, 0, None, due[offset], True))
        return out

    def _times(self) -> dict[int, int]:
        """offset → deliver-at time of the waiting and due records (a scan: for views)."""
        times = self._waiting.due_times() if self._waiting.live else {}
        times.update((e & _OFFSET_MASK, e >> 64) for e in self._due_heap)  # stale entries: never looked up
        return times

    def _is_due(self, offset: int) -> bool:
        return (
            self.start_offset <= offset < self.end_offset
            and self._ranges[self._index(offset)].deadline_ms == _DUE
        )

    def _promote(self, now_ms: int) -> None:
        """The records whose deliver-at time is ``<= now_ms`` leave their held ranges for due ranges
        (AVAILABLE, still ``delayed`` until acquired, as before they were due)."""
        entries = self._waiting.pop_due(now_ms)
        if not entries:
            return
        if self._due_heap and len(entries) < len(self._due_heap) // 8:
            for e in entries:
                heapq.heappush(self._due_heap, e)
        else:
            self._due_heap.extend(entries)
            heapq.heapify(self._due_heap)
        self._due_count += len(entries)
        due = sorted(e & _OFFSET_MASK for e in entries)
        out: list[InFlightRange] = []
        k = 0
        for r in self._ranges:
            while k < len(due) and due[k] < r.first:
                k += 1  # cannot happen: a waiting offset lies in a held range
            if not _held(r) or k >= len(due) or due[k] > r.last:
                out.append(r)
                continue
            inside = bisect_right(due, r.last, lo=k) - k
            if inside == r.size:  # every record of the range is due
                out.append(InFlightRange(r.first, r.last, RecordState.AVAILABLE, 0, None, _DUE, True))
                k += inside
                continue
            pos = r.first
            while k < len(due) and due[k] <= r.last:
                first = last = due[k]
                k += 1
                while k < len(due) and due[k] == last + 1 and last < r.last:
                    last = due[k]
                    k += 1
                if first > pos:
                    out.append(
                        InFlightRange(pos, first - 1, r.state, r.delivery_count, None, _PER_RECORD, True)
                    )
                out.append(InFlightRange(first, last, RecordState.AVAILABLE, 0, None, _DUE, True))
                pos = last + 1
            if pos <= r.last:
                out.append(InFlightRange(pos, r.last, r.state, r.delivery_count, None, _PER_RECORD, True))
        self._ranges = out
        self._coalesce_all()

    def _next_due_at(self) -> int | None:
        """The earliest deliver-at time of a record in a due range, None if none."""
        heap = self._due_heap
        while heap and not self._is_due(heap[0] & _OFFSET_MASK):
            heapq.heappop(heap)
        if len(heap) > 2 * self._due_count + 1024:
            self._due_heap = heap = [e for e in heap if self._is_due(e & _OFFSET_MASK)]
            heapq.heapify(heap)
        return heap[0] >> 64 if heap else None

    def _release(self, r: InFlightRange, now_ms: int) -> bool:
        """An ACQUIRED range goes back: AVAILABLE (after the backoff), or ARCHIVED at the delivery-count
        limit (returns True then)."""
        if r.delivery_count >= self.delivery_count_limit:
            self._archive(r, rejected=False)
            return True
        r.state = RecordState.AVAILABLE
        r.member_id = None
        delay = self.backoff(r.delivery_count)
        r.deadline_ms = now_ms + delay if delay > 0 else 0
        return False

    def _archive(self, r: InFlightRange, *, rejected: bool) -> None:
        """REJECT or the delivery-count limit: ARCHIVING when the group dead-letters, else ARCHIVED."""
        if self.dead_letter:
            self._settle(r, RecordState.ARCHIVING)
            r.rejected = rejected
            self.archiving += r.size
        else:
            self._settle(r, RecordState.ARCHIVED)

    def _settle(self, r: InFlightRange, state: RecordState) -> None:
        r.state = state
        r.member_id = None
        r.deadline_ms = 0

    def _index(self, offset: int) -> int:
        return bisect_right(self._ranges, offset, key=lambda r: r.first) - 1

    def _split(self, i: int, offset: int) -> None:
        """Split range ``i`` so that a range starts at ``offset`` (first < offset <= last)."""
        r = self._ranges[i]
        tail = InFlightRange(
            offset, r.last, r.state, r.delivery_count, r.member_id, r.deadline_ms, r.delayed, r.rejected
        )
        r.last = offset - 1
        self._ranges.insert(i + 1, tail)

    def _split_at(self, offset: int) -> int:
        """The index of the range starting at ``offset`` (inside the window), splitting one if needed."""
        i = self._index(offset)
        if self._ranges[i].first != offset:
            self._split(i, offset)
            i += 1
        return i

    def _slice(self, first: int, last: int) -> list[InFlightRange]:
        """The ranges covering exactly ``first..last`` (inside the window), split as needed."""
        i = self._split_at(first)
        j = self._split_at(last + 1) if last + 1 < self.end_offset else len(self._ranges)
        return self._ranges[i:j]

    def _coalesce_all(self) -> None:
        merged: list[InFlightRange] = []
        for r in self._ranges:
            if not (merged and _absorb(merged[-1], r)):
                merged.append(r)
        self._ranges = merged

    def _advance_start(self) -> None:
        drop = 0
        for r in self._ranges:
            if _held(r):
                first = self._waiting.first_waiting(r.first, r.last)
                if first is None:  # settled records only (the waiting ones were due)
                    drop += 1
                    continue
                r.first = first  # the settled records before the first waiting one leave
                break
            if r.state is RecordState.ACKNOWLEDGED or r.state is RecordState.ARCHIVED:
                drop += 1
            else:
                break
        if drop:
            del self._ranges[:drop]
        start = self._ranges[0].first if self._ranges else self.end_offset
        if start != self.start_offset:
            self.start_offset = start
            self._waiting.drop_below(start)  # nothing waits below the start: lets the bitmap shrink
