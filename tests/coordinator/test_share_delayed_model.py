"""The share-partition window with records waiting for deliver-at times against a per-offset model.

Random sequences of produce (some records carry a delivery time), acquire, acknowledge, the clock moving
(locks expire, delivery times pass), a member leaving, the log start moving and a persist-and-reload run
(the waiting records' times given back with ``defer``, as the broker reads them from their headers). After
every step each offset's state, delivery count, holder, deadline and ``delayed`` flag, the window's start
and end, the next deadline and the persisted batches agree with the model. The record-lock limit is left
out (set high): how delayed and settled records count against it is tested in ``test_share_delayed_window``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.coordinator.share.share_partition import AcquiredRange, RecordState, SharePartition
from tidelog.protocol.errors import ErrorCode

LOCK_MS = 100
LIMIT = 3
MEMBERS = ("a", "b")


@dataclass
class _Rec:
    state: RecordState = RecordState.AVAILABLE
    count: int = 0
    member: str | None = None
    deadline: int = 0
    delayed: bool = False


@dataclass
class Model:
    start: int = 0
    end: int = 0
    recs: dict[int, _Rec] = field(default_factory=dict)

    def _advance(self) -> None:
        while self.start < self.end and self.recs[self.start].state in (
            RecordState.ACKNOWLEDGED,
            RecordState.ARCHIVED,
        ):
            del self.recs[self.start]
            self.start += 1

    def _release(self, r: _Rec) -> None:
        r.member, r.deadline = None, 0
        r.state = RecordState.ARCHIVED if r.count >= LIMIT else RecordState.AVAILABLE

    def expire(self, now: int) -> None:
        """(The start moves only if a lock expired: after ``move_start`` it may sit on settled records.)"""
        expired = [r for r in self.recs.values() if r.state is RecordState.ACQUIRED and r.deadline <= now]
        for r in expired:
            self._release(r)
        if expired:
            self._advance()

    def acquire(
        self, member: str, n: int, log_end: int, now: int, due: dict[int, int]
    ) -> list[AcquiredRange]:
        self.expire(now)
        got: list[int] = []
        for o in range(self.start, min(self.end, log_end)):
            r = self.recs[o]
            if len(got) < n and r.state is RecordState.AVAILABLE and r.deadline <= now:
                r.state, r.count, r.member, r.deadline, r.delayed = (
                    RecordState.ACQUIRED,
                    r.count + 1,
                    member,
                    now + LOCK_MS,
                    False,
                )
                got.append(o)
        while self.end < log_end:
            at = due.get(self.end)
            if at is not None and at > now:
                self.recs[self.end] = _Rec(RecordState.AVAILABLE, 0, None, at, True)
            elif len(got) < n:
                self.recs[self.end] = _Rec(RecordState.ACQUIRED, 1, member, now + LOCK_MS)
                got.append(self.end)
            else:
                break
            self.end += 1
        out: list[AcquiredRange] = []
        for o in got:
            c = self.recs[o].count
            if out and out[-1].last_offset + 1 == o and out[-1].delivery_count == c:
                out[-1] = AcquiredRange(out[-1].first_offset, o, c)
            else:
                out.append(AcquiredRange(o, o, c))
        self._advance()
        return out

    def ack(self, member: str, first: int, last: int, t: int) -> ErrorCode:
        if first < self.start or last >= self.end:
            return ErrorCode.INVALID_RECORD_STATE
        if any(
            self.recs[o].state is not RecordState.ACQUIRED or self.recs[o].member != member
            for o in range(first, last + 1)
        ):
            return ErrorCode.INVALID_RECORD_STATE
        for o in range(first, last + 1):
            r = self.recs[o]
            if t == 2:
                self._release(r)
            else:
                r.state = RecordState.ACKNOWLEDGED if t == 1 else RecordState.ARCHIVED
                r.member, r.deadline = None, 0
        self._advance()
        return ErrorCode.NONE

    def leave(self, member: str) -> None:
        held = [r for r in self.recs.values() if r.state is RecordState.ACQUIRED and r.member == member]
        for r in held:
            self._release(r)
        if held:
            self._advance()

    def move_start(self, offset: int) -> None:
        if offset <= self.start:
            return
        for o in range(self.start, min(offset, self.end)):
            del self.recs[o]
        self.start = offset
        self.end = max(self.end, offset)

    def reload(self) -> list[int]:
        """Acquisitions undone, the never-delivered tail gone; returns the offsets still waiting."""
        for r in self.recs.values():
            if r.state is RecordState.ACQUIRED:
                r.state, r.count, r.member, r.deadline = RecordState.AVAILABLE, r.count - 1, None, 0
        while self.end > self.start and self.recs[self.end - 1].state is RecordState.AVAILABLE:
            if self.recs[self.end - 1].count:
                break
            self.end -= 1
            del self.recs[self.end]
        self._advance()
        return [o for o, r in self.recs.items() if r.delayed]

    def next_deadline(self) -> int | None:
        times = [
            r.deadline
            for r in self.recs.values()
            if r.state is RecordState.ACQUIRED or (r.state is RecordState.AVAILABLE and r.deadline > 0)
        ]
        return min(times, default=None)


def _check(sp: SharePartition, model: Model) -> None:
    assert (sp.start_offset, sp.end_offset) == (model.start, model.end)
    seen = sp.start_offset
    for r in sp.ranges:
        assert r.first == seen
        seen = r.last + 1
        for o in range(r.first, r.last + 1):
            m = model.recs[o]
            assert (r.state, r.delivery_count, r.member_id, r.delayed) == (
                m.state,
                m.count,
                m.member,
                m.delayed,
            ), o
            if r.state is RecordState.ACQUIRED or r.delayed:
                assert r.deadline_ms == m.deadline, o
        got = sp.state_of(r.first)
        assert got is not None
        assert (got.state, got.delayed, got.deadline_ms) == (r.state, r.delayed, r.deadline_ms)
    assert seen == sp.end_offset
    assert sp.next_deadline() == model.next_deadline()
    persisted = []
    for o in range(model.start, model.end):
        m = model.recs[o]
        state, count = (
            (RecordState.AVAILABLE, m.count - 1) if m.state is RecordState.ACQUIRED else (m.state, m.count)
        )
        persisted.append((o, int(state), count))
    while persisted and persisted[-1][1:] == (0, 0):
        persisted.pop()
    expanded = [(o, s, c) for f, last, s, c in sp.state_batches() for o in range(f, last + 1)]
    assert expanded == persisted


_step = st.one_of(
    st.tuples(
        st.just("produce"), st.lists(st.one_of(st.none(), st.integers(1, 300)), min_size=1, max_size=6)
    ),
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 8)),
    st.tuples(
        st.just("ack"), st.integers(0, 20), st.integers(0, 4), st.sampled_from((1, 1, 2, 3, 0)), st.booleans()
    ),
    st.tuples(st.just("tick"), st.integers(1, 150)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("move_start"), st.integers(0, 3)),
    st.tuples(st.just("reload")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, max_size=40))
def test_delayed_records_match_per_offset_model(steps: list[tuple[object, ...]]) -> None:
    sp = SharePartition(0, max_record_locks=1 << 30, delivery_count_limit=LIMIT)
    model = Model()
    log_end = 0
    due: dict[int, int] = {}
    """offset → its delivery time (a produce step's record with a delay: that long after it)."""
    now = 1000
    for step in steps:
        kind = step[0]
        if kind == "produce":
            delays_ms = step[1]
            assert isinstance(delays_ms, list)
            for delay in delays_ms:
                if delay is not None:
                    due[log_end] = now + delay
                log_end += 1
        elif kind == "acquire":
            who, n = str(step[1]), step[2]
            assert isinstance(n, int)
            delays = [(o, due[o]) for o in range(sp.end_offset, log_end) if o in due]
            assert sp.acquire(who, n, log_end, now, LOCK_MS, delays) == model.acquire(
                who, n, log_end, now, due
            )
        elif kind == "ack":
            # mostly a run of records one member holds, by that member (else by the other one)
            pick, length, t, by_other = step[1], step[2], step[3], step[4]
            assert isinstance(pick, int)
            assert isinstance(length, int)
            assert isinstance(t, int)
            held = sorted(o for o, r in model.recs.items() if r.state is RecordState.ACQUIRED)
            first = held[pick % len(held)] if held else sp.start_offset + pick % 5
            holder = model.recs[first].member if held else "a"
            last = first
            while last - first < length and last + 1 in model.recs and model.recs[last + 1].member == holder:
                last += 1
            who = ("b" if holder == "a" else "a") if by_other else str(holder)
            error, _ = sp.acknowledge(who, first, last, [t], now)
            assert error == model.ack(who, first, last, t)
        elif kind == "tick":
            assert isinstance(step[1], int)
            now += step[1]
            sp.expire_locks(now)
            model.expire(now)
        elif kind == "leave":
            sp.release_member(str(step[1]), now)
            model.leave(str(step[1]))
        elif kind == "move_start":
            assert isinstance(step[1], int)
            offset = min(sp.start_offset + step[1], log_end)
            sp.move_start(offset)
            model.move_start(offset)
        else:
            batches, start = sp.state_batches(), sp.start_offset
            sp = SharePartition(0, max_record_locks=1 << 30, delivery_count_limit=LIMIT)
            sp.load(start, batches)
            for o in model.reload():
                sp.defer(o, model.recs[o].deadline)
        _check(sp, model)
