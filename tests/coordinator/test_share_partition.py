"""The share-partition window (ranges) against a per-offset model, plus the cases Kafka names.

Random sequences of produce (the log grows by one batch), acquire (strictly up to its limit, or on to the end
of a batch: KIP-1206's record_limit and batch_optimized), acknowledge (ACCEPT/RELEASE/REJECT/GAP, one type or
one per offset, by the holder or another member), lock expiry (the clock moves), a member leaving, and a
persist-and-reload run against :class:`SharePartition` and a dict of offset → state. After every step the
acquired ranges, the errors, each offset's state, delivery count and holder, and the window's start and
end agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.coordinator.share.share_partition import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
)
from tidelog.protocol.errors import ErrorCode

LOCK_MS = 100
LIMIT = 3
MAX_LOCKS = 12
MEMBERS = ("a", "b", "c")


@dataclass
class _Rec:
    state: RecordState = RecordState.AVAILABLE
    count: int = 0
    member: str | None = None
    deadline: int = 0


@dataclass
class Model:
    """KIP-932's rules, one offset at a time."""

    start: int = 0
    end: int = 0
    recs: dict[int, _Rec] = field(default_factory=dict)

    def _release(self, r: _Rec) -> None:
        r.member = None
        r.deadline = 0
        r.state = RecordState.ARCHIVED if r.count >= LIMIT else RecordState.AVAILABLE

    def _advance(self) -> None:
        while self.start < self.end and self.recs[self.start].state in (
            RecordState.ACKNOWLEDGED,
            RecordState.ARCHIVED,
        ):
            del self.recs[self.start]
            self.start += 1

    def expire(self, now: int) -> None:
        for r in self.recs.values():
            if r.state is RecordState.ACQUIRED and r.deadline <= now:
                self._release(r)
        self._advance()

    def acquire(
        self, member: str, max_records: int, log_end: int, now: int, batch_ends: list[int] | None = None
    ) -> list[AcquiredRange]:
        """``batch_ends`` (batch_optimized): once the limit is reached at offset o, the acquirable records
        up to the end of o's batch are taken too; the record-lock limit bounds the new records before."""

        def batch_end(o: int) -> int:
            return min((e for e in batch_ends or [] if e >= o), default=o)

        self.expire(now)
        got: list[int] = []
        soft_end = -1
        for o in range(self.start, min(self.end, log_end)):
            if len(got) >= max_records and o > soft_end:
                break
            r = self.recs[o]
            if r.state is RecordState.AVAILABLE:
                r.state, r.count, r.member, r.deadline = (
                    RecordState.ACQUIRED,
                    r.count + 1,
                    member,
                    now + LOCK_MS,
                )
                got.append(o)
                if len(got) >= max_records:
                    soft_end = max(soft_end, batch_end(o))
        budget = min(max_records - len(got), MAX_LOCKS - (self.end - self.start))
        taken = 0
        while self.end < log_end and (taken < budget or self.end <= soft_end):
            self.recs[self.end] = _Rec(RecordState.ACQUIRED, 1, member, now + LOCK_MS)
            got.append(self.end)
            taken += 1
            if taken == budget:
                soft_end = max(soft_end, batch_end(self.end))
            self.end += 1
        out: list[AcquiredRange] = []
        for o in got:
            c = self.recs[o].count
            if out and out[-1].last_offset + 1 == o and out[-1].delivery_count == c:
                out[-1] = AcquiredRange(out[-1].first_offset, o, c)
            else:
                out.append(AcquiredRange(o, o, c))
        return out

    def ack(self, member: str, first: int, last: int, types: list[int]) -> ErrorCode:
        if first < self.start or last >= self.end:
            return ErrorCode.INVALID_RECORD_STATE
        if any(
            self.recs[o].state is not RecordState.ACQUIRED or self.recs[o].member != member
            for o in range(first, last + 1)
        ):
            return ErrorCode.INVALID_RECORD_STATE
        for i, o in enumerate(range(first, last + 1)):
            t = types[0] if len(types) == 1 else types[i]
            r = self.recs[o]
            if t == AcknowledgeType.ACCEPT:
                r.state, r.member, r.deadline = RecordState.ACKNOWLEDGED, None, 0
            elif t == AcknowledgeType.RELEASE:
                self._release(r)
            else:
                r.state, r.member, r.deadline = RecordState.ARCHIVED, None, 0
        self._advance()
        return ErrorCode.NONE

    def leave(self, member: str) -> None:
        for r in self.recs.values():
            if r.state is RecordState.ACQUIRED and r.member == member:
                self._release(r)
        self._advance()

    def reload(self) -> None:
        """What a reload from the persisted state gives: acquisitions undone (one delivery fewer), the
        never-delivered tail beyond the window."""
        for r in self.recs.values():
            if r.state is RecordState.ACQUIRED:
                r.state, r.count, r.member, r.deadline = RecordState.AVAILABLE, r.count - 1, None, 0
        while (
            self.end > self.start
            and self.recs[self.end - 1].state is RecordState.AVAILABLE
            and self.recs[self.end - 1].count == 0
        ):
            self.end -= 1
            del self.recs[self.end]
        self._advance()


def _check(sp: SharePartition, model: Model) -> None:
    assert (sp.start_offset, sp.end_offset) == (model.start, model.end)
    seen = sp.start_offset
    for r in sp.ranges:
        assert r.first == seen
        assert r.last >= r.first
        seen = r.last + 1
        for o in range(r.first, r.last + 1):
            m = model.recs[o]
            assert (r.state, r.delivery_count, r.member_id) == (m.state, m.count, m.member), o
            if r.state is RecordState.ACQUIRED:
                assert r.deadline_ms == m.deadline
    assert seen == sp.end_offset
    for a, b in zip(sp.ranges, sp.ranges[1:], strict=False):
        assert not a.same_run(b), "adjacent ranges in one state are merged"


_step = st.one_of(
    st.tuples(st.just("produce"), st.integers(1, 6)),
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 8), st.booleans()),
    st.tuples(
        st.just("ack"),
        st.sampled_from(MEMBERS),
        st.integers(-2, 20),
        st.integers(0, 4),
        st.lists(st.integers(0, 3), min_size=1, max_size=5),
    ),
    st.tuples(st.just("tick"), st.integers(1, 150)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("reload")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, max_size=40))
def test_ranges_match_per_offset_model(steps: list[tuple[object, ...]]) -> None:
    sp = SharePartition(0, max_record_locks=MAX_LOCKS, delivery_count_limit=LIMIT)
    model = Model()
    log_end = 0
    batch_ends: list[int] = []
    """The last offset of each produced batch (a produce step appends one batch)."""
    now = 1000
    for step in steps:
        kind = step[0]
        if kind == "produce":
            assert isinstance(step[1], int)
            log_end += step[1]
            batch_ends.append(log_end - 1)
        elif kind == "acquire":
            who, n, whole = str(step[1]), step[2], step[3]
            assert isinstance(n, int)
            ends = batch_ends if whole else []  # batch_optimized, else record_limit
            got = sp.acquire(who, n, log_end, now, LOCK_MS, batch_ends=ends)
            assert got == model.acquire(who, n, log_end, now, ends)
        elif kind == "ack":
            member, first, length, types = step[1], step[2], step[3], step[4]
            assert isinstance(member, str)
            assert isinstance(first, int)
            assert isinstance(length, int)
            assert isinstance(types, list)
            last = first + length
            if len(types) > 1:
                types = (types * (length + 1))[: length + 1]
            error, _ = sp.acknowledge(member, first, last, types, now)
            assert error == model.ack(member, first, last, types)
        elif kind == "tick":
            assert isinstance(step[1], int)
            now += step[1]
            sp.expire_locks(now)
            model.expire(now)
        elif kind == "leave":
            sp.release_member(str(step[1]), now)
            model.leave(str(step[1]))
        else:
            batches = sp.state_batches()
            start = sp.start_offset
            sp = SharePartition(0, max_record_locks=MAX_LOCKS, delivery_count_limit=LIMIT)
            sp.load(start, batches)
            model.reload()
        _check(sp, model)


def test_kafka_error_cases() -> None:
    sp = SharePartition(10, max_record_locks=100, delivery_count_limit=2)
    assert sp.acquire("a", 5, 20, 0, LOCK_MS) == [AcquiredRange(10, 14, 1)]
    # never acquired, acquired by another member, acknowledged twice
    assert sp.acknowledge("a", 15, 15, [1], 0)[0] == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("b", 10, 10, [1], 0)[0] == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 10, 10, [1], 0)[0] == ErrorCode.NONE
    assert sp.acknowledge("a", 10, 10, [1], 0)[0] == ErrorCode.INVALID_RECORD_STATE
    # a bad batch changes nothing: 11 stays acquired although 15 fails
    assert sp.acknowledge("a", 11, 15, [1], 0)[0] == ErrorCode.INVALID_RECORD_STATE
    held = sp.state_of(11)
    assert held is not None
    assert held.state is RecordState.ACQUIRED
    assert sp.acknowledge("a", 11, 12, [1, 2, 3], 0)[0] == ErrorCode.INVALID_REQUEST
    assert sp.start_offset == 11
    # RELEASE then redelivery with count 2; the second release reaches the limit and archives
    assert sp.acknowledge("a", 11, 11, [2], 0)[0] == ErrorCode.NONE
    assert sp.acquire("b", 1, 20, 0, LOCK_MS) == [AcquiredRange(11, 11, 2)]
    error, archived = sp.acknowledge("b", 11, 11, [2], 0)
    assert error == ErrorCode.NONE
    assert [(a.first_offset, a.delivery_count) for a in archived] == [(11, 2)]
    assert sp.start_offset == 12
    # lock expiry makes 12..14 available again
    sp.expire_locks(LOCK_MS)
    assert sp.acquire("c", 10, 20, LOCK_MS, LOCK_MS) == [AcquiredRange(12, 14, 2), AcquiredRange(15, 19, 1)]


def test_a_million_records_are_a_few_ranges() -> None:
    sp = SharePartition(0, max_record_locks=2_000_000)
    assert sp.acquire("a", 1_000_000, 1_000_000, 0, LOCK_MS) == [AcquiredRange(0, 999_999, 1)]
    assert sp.acknowledge("a", 500_000, 500_009, [2], 0)[0] == ErrorCode.NONE
    assert len(sp.ranges) == 3
    assert sp.acknowledge("a", 0, 499_999, [1], 0)[0] == ErrorCode.NONE
    assert (sp.start_offset, len(sp.ranges)) == (500_000, 2)


def test_record_lock_limit_and_backoff() -> None:
    sp = SharePartition(0, max_record_locks=4, backoff=lambda count: 50 * count)
    assert sp.acquire("a", 10, 100, 0, LOCK_MS) == [AcquiredRange(0, 3, 1)]
    assert sp.acquire("b", 10, 100, 0, LOCK_MS) == []
    assert sp.acknowledge("a", 0, 1, [2], 0)[0] == ErrorCode.NONE
    assert sp.next_acquirable(49, 100) is None
    assert sp.next_acquirable(50, 100) == 0
    assert sp.acquire("b", 10, 100, 50, LOCK_MS) == [AcquiredRange(0, 1, 2)]
