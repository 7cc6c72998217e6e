"""KIP-1206's share.acquire.mode at the share-partition: batch_optimized rounds a fetch's record budget up
to the end of the batch holding its last record (bounded first by the record-lock limit, as Kafka's
``lastOffsetAndMaxRecordsToAcquire``); record_limit (no batch ends given) takes at most the budget. Delayed
records and records already acquired or acknowledged inside a batch stay out."""

from __future__ import annotations

from tidelog.coordinator.share.acquire_mode import batch_last_offsets
from tidelog.coordinator.share.share_partition import AcknowledgeType, AcquiredRange, SharePartition
from tidelog.protocol.records_codec import SimpleRecord, encode_batch

LOCK_MS = 1000


def test_a_5000_record_batch_with_budget_500() -> None:
    optimized = SharePartition(0, max_record_locks=10_000)
    assert optimized.acquire("a", 500, 5000, 0, LOCK_MS, batch_ends=[4999]) == [AcquiredRange(0, 4999, 1)]
    assert optimized.end_offset == 5000
    strict = SharePartition(0, max_record_locks=10_000)
    assert strict.acquire("a", 500, 5000, 0, LOCK_MS) == [AcquiredRange(0, 499, 1)]
    assert strict.acquire("b", 500, 5000, 0, LOCK_MS) == [AcquiredRange(500, 999, 1)]


def test_the_budget_ends_at_the_batch_holding_its_last_record() -> None:
    sp = SharePartition(0, max_record_locks=10_000)
    ends = [99, 199, 299, 399]
    assert sp.acquire("a", 150, 400, 0, LOCK_MS, batch_ends=ends) == [AcquiredRange(0, 199, 1)]
    assert sp.acquire("b", 100, 400, 0, LOCK_MS, batch_ends=ends) == [AcquiredRange(200, 299, 1)]
    # never past what may be served, whatever the batch says
    assert sp.acquire("c", 10, 350, 0, LOCK_MS, batch_ends=ends) == [AcquiredRange(300, 349, 1)]


def test_the_record_lock_limit_bounds_the_budget_before_the_rounding() -> None:
    sp = SharePartition(0, max_record_locks=2000)
    assert sp.acquire("a", 500, 5000, 0, LOCK_MS, batch_ends=[1499, 4999]) == [AcquiredRange(0, 1499, 1)]
    # 500 record locks left: the 501st record's batch is rounded up to (Kafka's soft limit)
    assert sp.acquire("b", 5000, 5000, 0, LOCK_MS, batch_ends=[1499, 4999]) == [AcquiredRange(1500, 4999, 1)]
    assert sp.in_flight == 5000
    assert sp.acquire("c", 500, 6000, 0, LOCK_MS, batch_ends=[5999]) == []


def test_released_records_are_reacquired_to_the_end_of_their_batch() -> None:
    sp = SharePartition(0, max_record_locks=10_000)
    sp.acquire("a", 1000, 1000, 0, LOCK_MS)
    assert sp.acknowledge("a", 0, 999, [AcknowledgeType.RELEASE], 0)[0] == 0
    assert sp.acquire("b", 10, 1000, 0, LOCK_MS, batch_ends=[499, 999]) == [AcquiredRange(0, 499, 2)]


def test_acquired_acknowledged_and_delayed_records_inside_the_batch_stay_out() -> None:
    sp = SharePartition(0, max_record_locks=10_000)
    sp.acquire("a", 10, 100, 0, LOCK_MS)  # 0..9, strict
    assert sp.acknowledge("a", 0, 4, [AcknowledgeType.ACCEPT], 0)[0] == 0
    assert sp.acknowledge("a", 5, 9, [AcknowledgeType.RELEASE], 0)[0] == 0
    sp.acquire("a", 2, 100, 0, LOCK_MS)  # 5..6 held by a
    got = sp.acquire("b", 3, 100, 0, LOCK_MS, delays=[(20, 10_000)], batch_ends=[49, 99])
    assert got == [AcquiredRange(7, 9, 2), AcquiredRange(10, 19, 1), AcquiredRange(21, 49, 1)]
    delayed, held = sp.state_of(20), sp.state_of(5)
    assert delayed is not None
    assert delayed.delayed
    assert held is not None
    assert held.member_id == "a"


def test_batch_last_offsets_reads_the_headers() -> None:
    data = encode_batch([SimpleRecord(value=b"x")] * 3, base_offset=10) + encode_batch(
        [SimpleRecord(value=b"y")] * 2, base_offset=13
    )
    assert batch_last_offsets(data) == [12, 14]
    assert batch_last_offsets(b"") == []
