"""Records waiting for a deliver-at time in the share-partition window (issue 13): however many wait, the
records without a delay are acquired, the waiting ones are shown and persisted as before (AVAILABLE, never
delivered), and each becomes acquirable at its own time."""

from __future__ import annotations

import pytest

from tidelog.coordinator.share.share_partition import AcquiredRange, RecordState, SharePartition
from tidelog.protocol.errors import ErrorCode

HOUR_MS = 3_600_000
LOCK_MS = 30_000
CHUNK = 1000


def _delay_then_fetch(delayed: int) -> None:
    """``delayed`` records due an hour on (distinct times) joining in fetch-sized chunks, then 1,000 more."""
    sp = SharePartition(0, max_record_locks=2000)
    for base in range(0, delayed, CHUNK):
        delays = [(o, HOUR_MS + o) for o in range(base, base + CHUNK)]
        assert sp.acquire("m", CHUNK, base + CHUNK, 0, LOCK_MS, delays) == []
    got = sp.acquire("m", CHUNK, delayed + CHUNK, 0, LOCK_MS)
    assert got == [AcquiredRange(delayed, delayed + CHUNK - 1, 1)]
    assert sp.in_flight == CHUNK
    assert sp.next_deadline() == LOCK_MS
    assert sp.next_acquirable(HOUR_MS - 1, delayed + CHUNK) is None
    assert (
        sp.state_batches() == []
    )  # acquiring changes nothing persisted; the waiting ones are never delivered
    assert sp.acknowledge("m", delayed, delayed + CHUNK - 1, [1], 0)[0] == ErrorCode.NONE
    assert sp.state_batches() == [(0, delayed - 1, 0, 0), (delayed, delayed + CHUNK - 1, 2, 1)]
    assert sp.next_deadline() == HOUR_MS
    # the records acknowledged behind the waiting ones never fill the record-lock limit (2,000)
    for end in range(delayed + 2 * CHUNK, delayed + 5 * CHUNK + 1, CHUNK):
        assert sp.acquire("m", CHUNK, end, 0, LOCK_MS) == [AcquiredRange(end - CHUNK, end - 1, 1)]
        assert sp.acknowledge("m", end - CHUNK, end - 1, [1], 0)[0] == ErrorCode.NONE
        assert sp.in_flight == 1
    assert sp.state_batches() == [(0, delayed - 1, 0, 0), (delayed, delayed + 5 * CHUNK - 1, 2, 1)]
    # the first due record is the first acquired then, with its first delivery
    assert sp.acquire("n", 1, delayed + 5 * CHUNK, HOUR_MS, LOCK_MS) == [AcquiredRange(0, 0, 1)]
    assert sp.next_deadline() == HOUR_MS + 1


def test_twenty_thousand_delayed_records_hold_back_none_of_the_others() -> None:
    _delay_then_fetch(20_000)


@pytest.mark.soak
def test_a_million_delayed_records_hold_back_none_of_the_others() -> None:
    _delay_then_fetch(1_000_000)


def test_records_between_delayed_ones_are_settled_around_them() -> None:
    sp = SharePartition(0, max_record_locks=100)
    delays = [(o, 1000 + o) for o in range(0, 40, 2)]  # every even offset waits
    got = sp.acquire("m", 100, 40, 0, LOCK_MS, delays)
    assert got == [AcquiredRange(o, o, 1) for o in range(1, 40, 2)]
    assert sp.in_flight == 20
    for r in got:
        assert sp.acknowledge("m", r.first_offset, r.last_offset, [1], 0)[0] == ErrorCode.NONE
    assert sp.in_flight == 20  # a record settled between waiting ones is a run of its own: counted
    shown = [(r.first, r.last, r.state, r.delivery_count, r.deadline_ms, r.delayed) for r in sp.ranges]
    assert shown[:3] == [
        (0, 0, RecordState.AVAILABLE, 0, 1000, True),
        (1, 1, RecordState.ACKNOWLEDGED, 1, 0, False),
        (2, 2, RecordState.AVAILABLE, 0, 1002, True),
    ]
    assert len(shown) == 40
    assert shown[-1][:3] == (39, 39, RecordState.ACKNOWLEDGED)
    assert (sp.start_offset, sp.end_offset) == (0, 40)
    waiting = sp.state_of(4)
    assert waiting is not None
    assert (waiting.delayed, waiting.deadline_ms) == (True, 1004)
    settled = sp.state_of(5)
    assert settled is not None
    assert settled.state is RecordState.ACKNOWLEDGED
    # a waiting record is never acknowledged; the next ones are due one at a time
    assert sp.acknowledge("m", 2, 2, [1], 0)[0] == ErrorCode.INVALID_RECORD_STATE
    assert sp.next_deadline() == 1000
    assert sp.next_acquirable(1001, 40) == 0
    assert sp.acquire("n", 10, 40, 1002, LOCK_MS) == [AcquiredRange(0, 0, 1), AcquiredRange(2, 2, 1)]
    assert sp.acknowledge("n", 0, 0, [1], 1002)[0] == ErrorCode.NONE
    assert sp.start_offset == 2
    assert sp.acknowledge("n", 2, 2, [3], 1002)[0] == ErrorCode.NONE
    assert sp.start_offset == 4
    assert sp.state_batches()[:3] == [(4, 4, 0, 0), (5, 5, 2, 1), (6, 6, 0, 0)]


def test_waiting_records_survive_a_reload_through_defer_and_leave_with_the_log_start() -> None:
    sp = SharePartition(0, max_record_locks=100)
    sp.acquire("m", 100, 10, 0, LOCK_MS, [(3, 500), (4, 500), (7, 900)])
    assert sp.acknowledge("m", 0, 9, [1], 0)[0] == ErrorCode.INVALID_RECORD_STATE
    for first, last in ((0, 2), (5, 6), (8, 9)):
        assert sp.acknowledge("m", first, last, [1], 0)[0] == ErrorCode.NONE
    batches = sp.state_batches()
    assert batches == [(3, 4, 0, 0), (5, 6, 2, 1), (7, 7, 0, 0), (8, 9, 2, 1)]
    loaded = SharePartition(0, max_record_locks=100)
    loaded.load(sp.start_offset, batches)
    for offset, due in ((3, 500), (4, 500), (7, 900), (5, 1)):  # 5 is settled: no delay for it
        loaded.defer(offset, due)
    assert [(r.first, r.last, r.state, r.deadline_ms) for r in loaded.ranges] == [
        (r.first, r.last, r.state, r.deadline_ms) for r in sp.ranges
    ]
    # 3..9: the records settled behind the first waiting one count once per run
    assert loaded.in_flight == sp.in_flight == 2
    assert loaded.next_deadline() == 500
    loaded.move_start(5)
    assert (loaded.start_offset, loaded.in_flight, loaded.next_deadline()) == (5, 3, 900)
    assert loaded.acquire("n", 10, 10, 899, LOCK_MS) == []
    assert loaded.acquire("n", 10, 10, 900, LOCK_MS) == [AcquiredRange(7, 7, 1)]


def test_records_due_at_once_are_acquired_in_offset_order_and_shown_with_their_times() -> None:
    sp = SharePartition(0, max_record_locks=2000)
    for base in range(0, 20_000, CHUNK):
        sp.acquire(
            "m", CHUNK, base + CHUNK, 0, LOCK_MS, [(o, HOUR_MS + o) for o in range(base, base + CHUNK)]
        )
    later = HOUR_MS + 30_000  # every record is due
    assert sp.next_acquirable(later, 20_000) == 0
    assert sp.acquire("m", CHUNK, 20_000, later, LOCK_MS) == [AcquiredRange(0, CHUNK - 1, 1)]
    assert sp.acquire("n", CHUNK, 20_000, later, LOCK_MS) == [AcquiredRange(CHUNK, 2 * CHUNK - 1, 1)]
    due = sp.state_of(5000)
    assert due is not None
    assert (due.first, due.last, due.state, due.deadline_ms, due.delayed) == (
        5000,
        5000,
        RecordState.AVAILABLE,
        HOUR_MS + 5000,
        True,
    )
    assert (
        sp.next_deadline() == HOUR_MS + 2 * CHUNK
    )  # the earliest time of a record still waiting to be taken
    assert sp.in_flight == 2 * CHUNK
    assert sp.state_batches() == []
