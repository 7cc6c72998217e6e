"""The one-step park of the common long poll (server/fetch_purgatory.py ``ParkedFetch``, issue 17): a
sessionless consumer fetch of one partition at its end waits in a deadline-ordered queue per ``max_wait_ms``
and on its partition's watch list, not in the generic purgatory.

- It expires at its deadline (the clock when parked plus ``max_wait_ms``), not a millisecond before, with the
  quiet answer, and leaves nothing behind: no watcher, no queued entry, ``delayed`` back to 0.
- A change of its partition completes it at once (an append: its records), exactly once: a later expiry pass
  does not answer it again; an append below ``min_bytes`` only counts.
- A shorter wait parked after a longer one re-arms the timer for its earlier deadline.
- A park whose deadline would come before the last one of its queue (the wall clock went back) takes the
  general path; completed fetches do not pile up in the queues; shutdown answers every parked fetch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.server.inprocess import make_broker, stop_broker

from tidelog.protocol import codec
from tidelog.protocol.codec import encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse, RequestHeader
from tidelog.protocol.records import SimpleRecord, decode_batch, encode_batch
from tidelog.protocol.records_header import LOG_OVERHEAD
from tidelog.server.broker import Broker
from tidelog.server.clock import ManualClock
from tidelog.server.dispatch import RequestContext
from tidelog.server.fetch_purgatory import FetchPurgatory
from tidelog.server.handlers import fetch as fetch_handler
from tidelog.server.handlers.fetch_session_view import Wanted
from tidelog.server.shared_reads import FROZEN_ANSWERS, INLINE_BYTES, SharedReads, answer_key
from tidelog.storage.fetch_data import FileRegion

pytestmark = [pytest.mark.timeout(60)]

KEY = ("t", 0)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = make_broker(tmp_path, clock=ManualClock())
    yield broker
    stop_broker(broker)


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fetch offset of every parked fetch whose answer was built, once per build."""
    built: list[int] = []
    real = fetch_handler._Parked.answer

    def counting(self: Any) -> FetchResponse:
        built.append(self.fetch_offset)
        return real(self)

    monkeypatch.setattr(fetch_handler._Parked, "answer", counting)
    return built


def _clock(broker: Broker) -> ManualClock:
    clock = broker.clock
    assert isinstance(clock, ManualClock)
    return clock


def _append(broker: Broker, *values: bytes) -> None:
    batch = encode_batch([SimpleRecord(value=v, timestamp=1_700_000_000_000) for v in values])
    assert broker.replicas.append("t", 0, batch, now_ms=broker.clock.now_ms())[0] is ErrorCode.NONE


def _fetch(
    broker: Broker,
    offset: int,
    *,
    max_wait_ms: int = 100,
    min_bytes: int = 1,
    partition_max_bytes: int = 1 << 20,
) -> Any:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                ],
            )
        ],
    )
    route = broker.dispatcher.route_for(ApiKey.FETCH, 12)
    assert route is not None
    return route.handler(RequestContext(ApiKey.FETCH, 12, 1, "test", "127.0.0.1", 1, "PLAINTEXT"), request)


def _left(purgatory: FetchPurgatory) -> tuple[int, int, int, int]:
    """(delayed, parked, watch-list entries of the partition, entries in the queues)."""
    return (
        purgatory.delayed,
        purgatory._parked,
        len(purgatory._parked_watchers.get(KEY, {})),
        sum(len(queue) for queue in purgatory._parked_queues.values()),
    )


def _partition(response: FetchResponse) -> tuple[Any, ...]:
    [topic] = response.responses
    [p] = topic.partitions
    data = memoryview(bytes(p.records or b""))
    values: list[bytes | None] = []
    pos = 0
    while pos < len(data):
        header, records = decode_batch(data, pos)
        values += [r.value for r in records]
        pos += header.batch_length + LOG_OVERHEAD
    return p.error_code, p.high_watermark, p.log_start_offset, values


def test_a_parked_fetch_expires_at_its_deadline_not_before(broker: Broker, answers: list[int]) -> None:
    _append(broker, b"a")
    purgatory = broker.fetch_purgatory

    async def scenario() -> None:
        parked = _fetch(broker, 1, max_wait_ms=100)
        assert isinstance(parked, asyncio.Future)
        assert _left(purgatory) == (1, 1, 1, 1)
        _clock(broker).advance(99)
        purgatory._expire_parked()
        assert not parked.done()
        assert _left(purgatory) == (1, 1, 1, 1)
        _clock(broker).advance(1)
        purgatory._expire_parked()
        assert parked.done()
        assert _partition(parked.result()) == (ErrorCode.NONE, 1, 0, [])
        assert _left(purgatory) == (0, 0, 0, 0)
        assert purgatory._parked_queues == {}

    asyncio.run(scenario())
    assert answers == [1]


def test_an_append_completes_every_parked_fetch_once(broker: Broker, answers: list[int]) -> None:
    purgatory = broker.fetch_purgatory

    async def scenario() -> None:
        parked = [_fetch(broker, 0, max_wait_ms=500) for _ in range(3)]
        assert _left(purgatory) == (3, 3, 3, 3)
        _append(broker, b"x", b"y")
        assert all(future.done() for future in parked)
        assert [_partition(future.result()) for future in parked] == [
            (ErrorCode.NONE, 2, 0, [b"x", b"y"])
        ] * 3
        assert _left(purgatory) == (0, 0, 0, 3)  # completed, left in the queue until their deadline
        assert KEY not in purgatory._parked_watchers
        _clock(broker).advance(500)
        purgatory._expire_parked()  # their deadline: nothing is answered again
        assert _left(purgatory) == (0, 0, 0, 0)
        assert purgatory._completed_queued == 0

    asyncio.run(scenario())
    assert answers == [0, 0, 0]


def test_an_append_below_min_bytes_only_counts(broker: Broker, answers: list[int]) -> None:
    purgatory = broker.fetch_purgatory
    first = encode_batch([SimpleRecord(value=b"a" * 100, timestamp=1_700_000_000_000)])

    async def scenario() -> None:
        parked = _fetch(broker, 0, max_wait_ms=500, min_bytes=len(first) + 1)
        _append(broker, b"a" * 100)
        assert not parked.done()
        assert _left(purgatory) == (1, 1, 1, 1)
        _append(broker, b"b")  # the two batches reach min_bytes
        assert parked.done()
        assert _partition(parked.result()) == (ErrorCode.NONE, 2, 0, [b"a" * 100, b"b"])
        assert _left(purgatory)[:3] == (0, 0, 0)

    asyncio.run(scenario())
    assert answers == [0]


def test_a_shorter_wait_parked_later_expires_first(broker: Broker) -> None:
    purgatory = broker.fetch_purgatory
    clock = _clock(broker)

    async def scenario() -> None:
        task = asyncio.create_task(purgatory.run())
        await asyncio.sleep(0)  # the clock task starts
        try:
            start = clock.now_ms()
            long = _fetch(broker, 0, max_wait_ms=60_000)
            assert purgatory._timer.due_ms == start + 60_000
            short = _fetch(broker, 0, max_wait_ms=5)
            assert purgatory._timer.due_ms == start + 5
            clock.advance(5)
            response = await asyncio.wait_for(short, 10)
            assert _partition(response) == (ErrorCode.NONE, 0, 0, [])
            assert not long.done()
            assert _left(purgatory) == (1, 1, 1, 1)
            assert purgatory._timer.due_ms == start + 60_000
        finally:
            task.cancel()

    asyncio.run(scenario())


def test_the_clock_going_back_takes_the_general_path(broker: Broker) -> None:
    purgatory = broker.fetch_purgatory
    clock = _clock(broker)

    async def scenario() -> None:
        first = _fetch(broker, 0, max_wait_ms=100)
        clock.set(clock.now_ms() - 10)
        second = _fetch(broker, 0, max_wait_ms=100)  # its deadline is before the first's
        assert isinstance(second, asyncio.Future)
        assert (purgatory.delayed, purgatory._parked) == (2, 1)
        _append(broker, b"x")
        for future in (first, second):
            assert _partition(await asyncio.wait_for(future, 10)) == (ErrorCode.NONE, 1, 0, [b"x"])
        assert purgatory.delayed == 0

    asyncio.run(scenario())


def test_completed_fetches_do_not_pile_up_in_the_queues(broker: Broker) -> None:
    purgatory = broker.fetch_purgatory

    async def scenario() -> None:
        longest = 0
        for offset in range(3000):
            parked = _fetch(broker, offset, max_wait_ms=60_000)
            _append(broker, b"%d" % offset)
            assert _partition(parked.result()) == (ErrorCode.NONE, offset + 1, 0, [b"%d" % offset])
            longest = max(longest, _left(purgatory)[3])
        assert longest == 1024  # compacted as the 1025th completed one joined them
        assert _left(purgatory)[:3] == (0, 0, 0)

    asyncio.run(scenario())


def test_shutdown_answers_every_parked_fetch(broker: Broker, answers: list[int]) -> None:
    purgatory = broker.fetch_purgatory

    async def scenario() -> None:
        parked = [_fetch(broker, 0, max_wait_ms=wait) for wait in (100, 200, 200)]
        purgatory.complete_all()
        assert [_partition(future.result()) for future in parked] == [(ErrorCode.NONE, 0, 0, [])] * 3
        assert _left(purgatory) == (0, 0, 0, 0)

    asyncio.run(scenario())
    assert answers == [0, 0, 0]


def test_a_failing_answer_fails_its_fetch_alone(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    purgatory = broker.fetch_purgatory
    real = fetch_handler._Parked.answer
    broken: list[object] = []

    def answer(self: Any) -> FetchResponse:
        if self in broken:
            raise RuntimeError("broken")
        return real(self)

    monkeypatch.setattr(fetch_handler._Parked, "answer", answer)

    async def scenario() -> None:
        parked = [_fetch(broker, 0, max_wait_ms=10) for _ in range(2)]
        broken.append(next(iter(purgatory._parked_watchers[KEY])))  # the first one parked
        _clock(broker).advance(10)
        purgatory._expire_parked()
        assert isinstance(parked[0].exception(), RuntimeError)
        assert _partition(parked[1].result()) == (ErrorCode.NONE, 0, 0, [])
        assert _left(purgatory) == (0, 0, 0, 0)

    asyncio.run(scenario())


def _frame(response: Any, correlation_id: int) -> bytes:
    header = RequestHeader(
        request_api_key=ApiKey.FETCH, request_api_version=12, correlation_id=correlation_id, client_id="c"
    )
    return b"".join(bytes(chunk) for chunk in encode_response(header, response))


def test_a_shared_woken_answer_is_frozen_and_sends_the_same_bytes(broker: Broker) -> None:
    purgatory = broker.fetch_purgatory

    async def scenario() -> None:
        alone = _fetch(broker, 0, max_wait_ms=500)
        _append(broker, b"solo")
        assert id(alone.result()) not in codec._FROZEN  # asked once: nothing to share, not frozen
        parked = [_fetch(broker, 1, max_wait_ms=500) for _ in range(3)]
        _append(broker, b"x", b"y")
        shared = parked[0].result()
        assert all(future.result() is shared for future in parked)
        assert _partition(shared) == (ErrorCode.NONE, 3, 0, [b"x", b"y"])
        assert codec._FROZEN[id(shared)][0] is shared
        frozen = [_frame(shared, 100 + i) for i in range(3)]
        codec.thaw_response(shared)
        assert frozen == [_frame(shared, 100 + i) for i in range(3)]  # byte for byte the encoder's frames
        # the last FROZEN_ANSWERS shared answers stay frozen, the older ones are thawed (memory stays bounded)
        kept = []
        for offset in range(3, 3 + FROZEN_ANSWERS + 1):
            pair = [_fetch(broker, offset, max_wait_ms=500) for _ in range(2)]
            _append(broker, b"v%d" % offset)
            assert pair[0].result() is pair[1].result()
            kept.append(pair[0].result())
        assert id(kept[0]) not in codec._FROZEN
        assert all(codec._FROZEN[id(r)][0] is r for r in kept[1:])
        assert len(purgatory._frozen_answers) == FROZEN_ANSWERS
        purgatory.complete_all()  # shutdown lets them go
        assert not any(id(r) in codec._FROZEN for r in kept)

    asyncio.run(scenario())


def test_a_shared_woken_answer_carrying_a_file_region_is_not_frozen(broker: Broker) -> None:
    big = b"z" * (INLINE_BYTES + 1)

    async def scenario() -> None:
        parked = [_fetch(broker, 0, max_wait_ms=500) for _ in range(2)]
        _append(broker, big)
        shared = parked[0].result()
        assert parked[1].result() is shared
        assert isinstance(shared.responses[0].partitions[0].records, FileRegion)
        assert id(shared) not in codec._FROZEN

    asyncio.run(scenario())


def test_a_woken_parked_fetch_asks_for_its_answer_by_answer_key(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_Parked.answer makes answer_key's tuple itself: the same key, so it shares with the general path."""
    asked: list[Any] = []
    real = SharedReads.built

    def recording(self: SharedReads, key: Any) -> FetchResponse | None:
        asked.append(key)
        return real(self, key)

    monkeypatch.setattr(SharedReads, "built", recording)

    async def scenario() -> None:
        parked = _fetch(broker, 0, max_wait_ms=500)
        [fetch] = broker.fetch_purgatory._parked_watchers[KEY]
        assert isinstance(fetch, fetch_handler._Parked)
        request = fetch.request
        wanted = [Wanted("t", fetch.topic_id, request.topics[0].partitions)]
        expected = answer_key(
            wanted, version=12, isolation=fetch.isolation, max_bytes=1 << 20, listener="PLAINTEXT"
        )
        _append(broker, b"k")
        assert _partition(parked.result()) == (ErrorCode.NONE, 1, 0, [b"k"])
        assert asked[0] == expected

    asyncio.run(scenario())


def test_woken_parked_fetches_that_asked_differently_get_their_own_answers(broker: Broker) -> None:
    async def scenario() -> None:
        same = [_fetch(broker, 0, max_wait_ms=500) for _ in range(2)]
        limited = _fetch(broker, 0, max_wait_ms=500, partition_max_bytes=1)  # still the whole first batch
        _append(broker, b"a", b"b")
        assert same[0].result() is same[1].result()
        assert limited.result() is not same[0].result()
        assert (
            _partition(limited.result())
            == _partition(same[0].result())
            == (ErrorCode.NONE, 2, 0, [b"a", b"b"])
        )

    asyncio.run(scenario())


def test_a_consumer_behind_is_answered_in_one_step(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sessionless one-partition fetch with records waiting (min_bytes 1) is read and answered at once by
    _park_caught_up, not the general path; with min_bytes 2 or below the log start the general path answers."""
    _append(broker, b"a", b"b")
    _append(broker, b"c")
    general: list[int] = []
    real = fetch_handler.FetchHandler._caught_up

    def counting(self: Any, *args: Any, **kwargs: Any) -> bool:
        general.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(fetch_handler.FetchHandler, "_caught_up", counting)
    answer = _fetch(broker, 1)
    assert isinstance(answer, FetchResponse)
    assert _partition(answer) == (ErrorCode.NONE, 3, 0, [b"a", b"b", b"c"])  # whole batches from offset 1
    assert general == []
    answer = _fetch(broker, 2, min_bytes=2)
    assert isinstance(answer, FetchResponse)
    assert _partition(answer) == (ErrorCode.NONE, 3, 0, [b"c"])
    assert general == [1]
    assert broker.replicas.delete_records("t", 0, 2) == (ErrorCode.NONE, 2)
    answer = _fetch(broker, 1)
    assert _partition(answer) == (ErrorCode.OFFSET_OUT_OF_RANGE, 3, 2, [])
    assert general == [1, 1]  # the error is the general path's answer
