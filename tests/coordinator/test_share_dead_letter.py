"""Dead letters (KIP-1191) in the pure share state: ARCHIVING in the share-partition window (also against the
per-offset model of test_share_partition, with REJECT and the limit leading to ARCHIVING), the copies'
records and headers, their dead-letter partition, and which pending offsets a crash left already copied."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.coordinator.test_share_partition import LIMIT, MAX_LOCKS, Model, _check, _Rec, _step
from tests.coordinator.test_share_partition import LOCK_MS as MODEL_LOCK_MS

from tidelog.coordinator.share.dead_letter import (
    REASON_DELIVERY_LIMIT,
    REASON_REJECTED,
    context_headers,
    copied_offsets,
    copy_origin,
    dead_letter_partition,
    dead_letter_record,
)
from tidelog.coordinator.share.share_partition import (
    AcknowledgeType,
    ArchivedRange,
    PendingDeadLetter,
    RecordState,
    SharePartition,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import Record

LOCK_MS = 100


def _pending(sp: SharePartition) -> list[PendingDeadLetter]:
    """The pending dead letters, checking the ARCHIVING record count against the ranges."""
    assert sp.archiving == sum(r.size for r in sp.ranges if r.state is RecordState.ARCHIVING)
    return sp.pending_dead_letters()


def _window(dead_letter: bool = True) -> SharePartition:
    sp = SharePartition(0, delivery_count_limit=2)
    sp.dead_letter = dead_letter
    assert [(r.first_offset, r.last_offset) for r in sp.acquire("a", 10, 10, 0, LOCK_MS)] == [(0, 9)]
    return sp


def test_reject_waits_in_archiving_then_archives() -> None:
    sp = _window()
    assert sp.acknowledge("a", 0, 2, [AcknowledgeType.REJECT], 1) == (
        ErrorCode.NONE,
        [ArchivedRange(0, 2, 1)],
    )
    assert sp.acknowledge("a", 3, 3, [AcknowledgeType.ACCEPT], 1) == (ErrorCode.NONE, [])
    assert _pending(sp) == [PendingDeadLetter(0, 2, 1, True)]
    assert sp.start_offset == 0  # held by ARCHIVING
    assert sp.acknowledge("a", 1, 1, [AcknowledgeType.ACCEPT], 2)[0] is ErrorCode.INVALID_RECORD_STATE
    assert sp.state_batches() == [(0, 2, 3, 1), (3, 3, 2, 1)]
    sp.archive_dead_letters(0, 1)
    assert sp.start_offset == 2
    assert _pending(sp) == [PendingDeadLetter(2, 2, 1, True)]
    sp.archive_dead_letters(2, 2)
    assert sp.start_offset == 4
    assert _pending(sp) == []


def test_delivery_limit_by_release_and_by_lock_expiry() -> None:
    sp = _window()
    assert sp.acknowledge("a", 0, 9, [AcknowledgeType.RELEASE], 1)[0] is ErrorCode.NONE
    sp.acquire("b", 10, 10, 2, LOCK_MS)  # second delivery of all ten
    assert sp.acknowledge("b", 0, 4, [AcknowledgeType.RELEASE], 3)[0] is ErrorCode.NONE
    sp.expire_locks(2 + LOCK_MS)
    assert _pending(sp) == [PendingDeadLetter(0, 9, 2, False)]
    assert sp.next_acquirable(1000, 10) is None
    assert sp.in_flight == 10  # ARCHIVING counts against the record-lock limit
    sp.move_start(4)  # the log start moved past some of them: gone, no copies
    assert _pending(sp) == [PendingDeadLetter(4, 9, 2, False)]


def test_mixed_causes_stay_apart() -> None:
    sp = _window()
    sp.acknowledge("a", 0, 3, [AcknowledgeType.RELEASE, AcknowledgeType.REJECT, 1, 1], 1)
    sp.acquire("a", 1, 10, 2, LOCK_MS)
    sp.acknowledge("a", 0, 0, [AcknowledgeType.RELEASE], 3)
    assert _pending(sp) == [PendingDeadLetter(0, 0, 2, False), PendingDeadLetter(1, 1, 1, True)]


def test_without_dead_letter_topic_records_are_archived_at_once() -> None:
    sp = _window(dead_letter=False)
    sp.acknowledge("a", 0, 9, [AcknowledgeType.REJECT], 1)
    assert _pending(sp) == []
    assert sp.start_offset == 10


def test_archiving_is_persisted_and_loaded() -> None:
    sp = _window()
    sp.acknowledge("a", 2, 3, [AcknowledgeType.REJECT], 1)
    batches = sp.state_batches()
    assert (2, 3, int(RecordState.ARCHIVING), 1) in batches
    loaded = SharePartition(0, delivery_count_limit=2)
    loaded.load(0, batches)
    # the cause is not persisted: below the limit it was a REJECT
    assert _pending(loaded) == [PendingDeadLetter(2, 3, 1, True)]
    loaded.archive_dead_letters(2, 3)
    assert loaded.state_batches() == [(0, 1, 0, 0), (2, 3, int(RecordState.ARCHIVED), 1)]


def _source() -> Record:
    return Record(offset=7, timestamp=5, key=b"k", value=b"v", headers=(("h", b"1"), ("n", None)))


def test_copy_with_record() -> None:
    copy = dead_letter_record(
        _source(),
        group_id="g",
        topic="t",
        partition=3,
        offset=7,
        delivery_count=2,
        rejected=False,
        copy_record=True,
        now_ms=99,
    )
    assert (copy.key, copy.value, copy.timestamp) == (b"k", b"v", 99)
    assert copy.headers == (
        ("h", b"1"),
        ("n", None),
        ("__dlq.errors.topic", b"t"),
        ("__dlq.errors.partition", b"3"),
        ("__dlq.errors.offset", b"7"),
        ("__dlq.errors.group", b"g"),
        ("__dlq.errors.delivery.count", b"2"),
        ("__dlq.errors.message", REASON_DELIVERY_LIMIT.encode()),
    )


def test_copy_headers_only() -> None:
    copy = dead_letter_record(
        _source(),
        group_id="g",
        topic="t",
        partition=0,
        offset=7,
        delivery_count=1,
        rejected=True,
        copy_record=False,
        now_ms=99,
    )
    assert (copy.key, copy.value) == (None, None)
    assert copy.headers == context_headers("g", "t", 0, 7, 1, True)
    assert dict(copy.headers)["__dlq.errors.message"] == REASON_REJECTED.encode()


def test_dead_letter_partition() -> None:
    assert [dead_letter_partition(p, 3) for p in range(5)] == [0, 1, 2, 0, 1]
    assert dead_letter_partition(4, 1) == 0


def _copy(offset: int, group: str = "g", topic: str = "t", partition: int = 0, at: int = 0) -> Record:
    headers = context_headers(group, topic, partition, offset, 1, True)
    return Record(offset=at, timestamp=0, key=None, value=None, headers=headers)


def test_copy_origin() -> None:
    assert copy_origin(_copy(5)) == ("g", "t", 0, 5)
    assert copy_origin(Record(offset=0, timestamp=0, key=None, value=None)) is None
    # a copy of a copy names its latest source
    twice = Record(0, 0, None, None, (*context_headers("x", "y", 1, 1, 1, True), *_copy(5).headers))
    assert copy_origin(twice) == ("g", "t", 0, 5)


def test_copied_offsets_walks_back_to_an_earlier_batch() -> None:
    tail = [
        _copy(1),  # an earlier batch, completed (1 is no longer pending)
        _copy(9),  # the interrupted batch, with 5 and 6
        _copy(2, group="other"),
        _copy(5),
        _copy(3, topic="u"),
        _copy(6),
    ]
    pending = [(5, 6), (9, 12)]
    assert copied_offsets(tail, "g", "t", 0, pending) == {5, 6, 9}
    tail.insert(2, _copy(4))  # not pending: the walk stops there
    assert copied_offsets(tail, "g", "t", 0, pending) == {5, 6}
    assert copied_offsets(tail, "g", "t", 1, pending) == set()
    assert copied_offsets([], "g", "t", 0, pending) == set()


class DeadLetterModel(Model):
    """The per-offset model with a dead-letter topic: REJECT and the delivery-count limit → ARCHIVING, which
    only :meth:`archive` ends."""

    holding: bool = False

    def _release(self, r: _Rec) -> None:
        r.member = None
        r.deadline = 0
        r.state = RecordState.ARCHIVING if r.count >= LIMIT else RecordState.AVAILABLE

    def _advance(self) -> None:
        if not self.holding:
            super()._advance()

    def ack(self, member: str, first: int, last: int, types: list[int]) -> ErrorCode:
        rejected = [
            o
            for i, o in enumerate(range(first, last + 1))
            if (types[0] if len(types) == 1 else types[i]) == AcknowledgeType.REJECT
        ]
        self.holding = True
        error = super().ack(member, first, last, types)
        self.holding = False
        if error is ErrorCode.NONE:
            for o in rejected:
                self.recs[o].state = RecordState.ARCHIVING
        self._advance()
        return error

    def archive(self, first: int, last: int) -> None:
        for o in range(max(first, self.start), min(last + 1, self.end)):
            if self.recs[o].state is RecordState.ARCHIVING:
                self.recs[o].state = RecordState.ARCHIVED
        self._advance()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(_step, st.tuples(st.just("archive"), st.integers(-2, 20), st.integers(0, 4))), max_size=40
    )
)
def test_dead_letter_ranges_match_per_offset_model(steps: list[tuple[object, ...]]) -> None:
    def window() -> SharePartition:
        sp = SharePartition(0, max_record_locks=MAX_LOCKS, delivery_count_limit=LIMIT)
        sp.dead_letter = True
        return sp

    sp = window()
    model = DeadLetterModel()
    log_end = 0
    now = 1000
    for step in steps:
        kind = step[0]
        if kind == "produce":
            assert isinstance(step[1], int)
            log_end += step[1]
        elif kind == "acquire":
            who, n = str(step[1]), step[2]
            assert isinstance(n, int)
            assert sp.acquire(who, n, log_end, now, MODEL_LOCK_MS) == model.acquire(who, n, log_end, now)
        elif kind == "ack":
            member, first, length, types = step[1], step[2], step[3], step[4]
            assert isinstance(member, str)
            assert isinstance(first, int)
            assert isinstance(length, int)
            assert isinstance(types, list)
            if len(types) > 1:
                types = (types * (length + 1))[: length + 1]
            error, _ = sp.acknowledge(member, first, first + length, types, now)
            assert error == model.ack(member, first, first + length, types)
        elif kind == "archive":
            first, length = step[1], step[2]
            assert isinstance(first, int)
            assert isinstance(length, int)
            sp.archive_dead_letters(first, first + length)
            model.archive(first, first + length)
        elif kind == "tick":
            assert isinstance(step[1], int)
            now += step[1]
            sp.expire_locks(now)
            model.expire(now)
        elif kind == "leave":
            sp.release_member(str(step[1]), now)
            model.leave(str(step[1]))
        else:
            batches, start = sp.state_batches(), sp.start_offset
            sp = window()
            sp.load(start, batches)
            model.reload()
        _check(sp, model)
        pending = {o for p in _pending(sp) for o in range(p.first_offset, p.last_offset + 1)}
        assert pending == {o for o, r in model.recs.items() if r.state is RecordState.ARCHIVING}
