"""A long poll that expires with nothing changed (issue 17): a one-partition consumer fetch parked caught up
is answered at expiry from the partition's state then (high watermark, last stable offset, log start), with
no log read; one that a change reached while it waited is read as usual (DeleteRecords' log start, the new
records of an append)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from tests.server.inprocess import expired, make_broker, stop_broker

from tidelog.protocol import codec
from tidelog.protocol.codec import encode, encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse, RequestHeader
from tidelog.protocol.records import SimpleRecord, decode_batch, encode_batch
from tidelog.replication.partition import Partition
from tidelog.server.broker import Broker
from tidelog.server.clock import ManualClock
from tidelog.server.config import load_broker_config
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.fetch import FetchHandler

pytestmark = [pytest.mark.timeout(60)]

VERSION = 12


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = make_broker(tmp_path, clock=ManualClock())
    yield broker
    stop_broker(broker)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The offsets ``Partition.read`` is asked for."""
    seen: list[int] = []
    real_read = Partition.read

    def counting_read(self: Partition, offset: int, *args: Any, **kwargs: Any) -> Any:
        seen.append(offset)
        return real_read(self, offset, *args, **kwargs)

    monkeypatch.setattr(Partition, "read", counting_read)
    return seen


def _append(broker: Broker, *values: bytes) -> None:
    batch = encode_batch([SimpleRecord(value=v, timestamp=1_700_000_000_000) for v in values])
    assert broker.replicas.append("t", 0, batch, now_ms=broker.clock.now_ms())[0] is ErrorCode.NONE


def _fetch(broker: Broker, offset: int, *, isolation: int = 0) -> Any:
    return _scenario_fetch(broker, VERSION, offset, isolation=isolation)


async def _expired(broker: Broker, parked: Any) -> FetchResponse:
    """Move the clock past the wait and let the purgatory's clock expire it."""
    response = await expired(broker, parked, 5)
    assert isinstance(response, FetchResponse)
    return response


def _fields(response: FetchResponse) -> tuple[Any, ...]:
    assert response.error_code == ErrorCode.NONE
    assert response.session_id == 0
    [topic] = response.responses
    assert topic.topic == "t"
    [p] = topic.partitions
    return (
        p.partition_index,
        p.error_code,
        p.high_watermark,
        p.last_stable_offset,
        p.log_start_offset,
        p.aborted_transactions,
        bytes(p.records or b""),
    )


def test_an_expired_caught_up_fetch_answers_the_partition_as_it_is_without_a_read(
    broker: Broker, reads: list[int]
) -> None:
    _append(broker, b"a", b"b", b"c")
    assert broker.replicas.delete_records("t", 0, 1) == (ErrorCode.NONE, 1)

    async def scenario() -> None:
        plain = await _expired(broker, _fetch(broker, 3))
        assert _fields(plain) == (0, ErrorCode.NONE, 3, 3, 1, None, b"")
        committed = await _expired(broker, _fetch(broker, 3, isolation=1))
        assert _fields(committed) == (0, ErrorCode.NONE, 3, 3, 1, [], b"")
        assert plain == FetchResponse(  # every other field as the generic build gives it
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic="t",
                    topic_id=broker.metadata.topic("t").topic_id,  # type: ignore[union-attr]
                    partitions=[
                        FetchResponse.PartitionData(
                            partition_index=0,
                            high_watermark=3,
                            last_stable_offset=3,
                            log_start_offset=1,
                            aborted_transactions=None,
                            records=b"",
                        )
                    ],
                )
            ]
        )

    asyncio.run(scenario())
    assert reads == []


def test_delete_records_while_a_fetch_waits_shows_in_its_answer(broker: Broker) -> None:
    _append(broker, b"a", b"b", b"c")

    async def scenario() -> None:
        parked = _fetch(broker, 3)
        assert broker.replicas.delete_records("t", 0, 2) == (ErrorCode.NONE, 2)
        assert not parked.done()  # no data: it still waits
        assert _fields(await _expired(broker, parked)) == (0, ErrorCode.NONE, 3, 3, 2, None, b"")

    asyncio.run(scenario())


def test_a_fetch_woken_by_an_append_answers_the_new_records(broker: Broker) -> None:
    _append(broker, b"a")

    async def scenario() -> None:
        parked = _fetch(broker, 1)
        assert isinstance(parked, asyncio.Future)
        assert not parked.done()
        _append(broker, b"new")
        response = await asyncio.wait_for(parked, 10)
        [p] = response.responses[0].partitions
        assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) == (0, 2, 2, 0)
        _, records = decode_batch(memoryview(bytes(p.records)), 0)
        assert [(r.offset, r.value) for r in records] == [(1, b"new")]

    asyncio.run(scenario())


def test_a_fetch_waiting_on_a_partition_this_broker_stops_leading_answers_the_error(broker: Broker) -> None:
    async def scenario() -> None:
        parked = _fetch(broker, 0)
        assert isinstance(parked, asyncio.Future)
        assert not parked.done()
        broker.replicas.delete("t", 0)
        response = await asyncio.wait_for(parked, 10)
        assert response.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    asyncio.run(scenario())


def test_records_that_reached_no_wait_are_still_answered_at_expiry(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quiet answer trusts no event: a partition whose end moved past the fetch offset is read."""
    _append(broker, b"a")

    async def scenario() -> None:
        parked = _fetch(broker, 1)
        with monkeypatch.context() as quiet:  # the append's check of the waiting fetches never happens
            quiet.setattr(broker.fetch_purgatory, "appended", lambda *_args: None)
            quiet.setattr(broker.fetch_purgatory, "on_append", lambda _key: None)
            _append(broker, b"unseen")
        response = await _expired(broker, parked)
        [p] = response.responses[0].partitions
        assert (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset) == (0, 2, 2, 0)
        _, records = decode_batch(memoryview(bytes(p.records)), 0)
        assert [(r.offset, r.value) for r in records] == [(1, b"unseen")]

    asyncio.run(scenario())


def _scenario_fetch(broker: Broker, version: int, offset: int, *, isolation: int = 0, epoch: int = -1) -> Any:
    topic_id = broker.metadata.topic("t").topic_id  # type: ignore[union-attr]
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=1,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="t" if version < 13 else "",
                topic_id=topic_id,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        fetch_offset=offset,
                        partition_max_bytes=1 << 20,
                        current_leader_epoch=epoch,
                    )
                ],
            )
        ],
    )
    route = broker.dispatcher.route_for(ApiKey.FETCH, version)
    assert route is not None
    return route.handler(
        RequestContext(ApiKey.FETCH, version, 1, "test", "127.0.0.1", 1, "PLAINTEXT"), request
    )


async def _scenario(broker: Broker, version: int, name: str, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """One scenario's answer, encoded at ``version`` with the topic id zeroed (two brokers' ids differ)."""
    _append(broker, b"a", b"b")
    if name == "quiet":
        response = await _expired(broker, _scenario_fetch(broker, version, 2))
    elif name == "quiet-committed":
        response = await _expired(broker, _scenario_fetch(broker, version, 2, isolation=1))
    elif name == "epoch":  # the partition's leader epoch, named: still parked
        response = await _expired(broker, _scenario_fetch(broker, version, 2, epoch=0))
    elif name == "fenced":  # answered at once
        response = _scenario_fetch(broker, version, 2, epoch=7)
    elif name == "behind":  # data to read: answered at once
        response = _scenario_fetch(broker, version, 1)
    elif name == "behind-committed":
        response = _scenario_fetch(broker, version, 0, isolation=1)
    elif name == "behind-fenced":
        response = _scenario_fetch(broker, version, 0, epoch=7)
    elif name == "behind-deleted":  # below the log start: OFFSET_OUT_OF_RANGE
        assert broker.replicas.delete_records("t", 0, 1) == (ErrorCode.NONE, 1)
        response = _scenario_fetch(broker, version, 0)
    elif name == "past-end":
        response = _scenario_fetch(broker, version, 5)
    elif name == "append":
        parked = _scenario_fetch(broker, version, 2, isolation=1)
        _append(broker, b"new")
        response = await asyncio.wait_for(parked, 10)
    elif name == "delete-records":
        parked = _scenario_fetch(broker, version, 2)
        assert broker.replicas.delete_records("t", 0, 1) == (ErrorCode.NONE, 1)
        response = await _expired(broker, parked)
    elif name == "unseen-append":
        parked = _scenario_fetch(broker, version, 2)
        with monkeypatch.context() as quiet:
            quiet.setattr(broker.fetch_purgatory, "appended", lambda *_args: None)
            quiet.setattr(broker.fetch_purgatory, "on_append", lambda _key: None)
            _append(broker, b"unseen")
        response = await _expired(broker, parked)
    else:
        assert name == "leader-gone"
        parked = _scenario_fetch(broker, version, 2)
        broker.replicas.delete("t", 0)
        response = await asyncio.wait_for(parked, 10)
    if isinstance(response, asyncio.Future):  # before v9 a request names no leader epoch: never fenced
        assert name in ("fenced", "behind-fenced")
        response = await _expired(broker, response)
    assert isinstance(response, FetchResponse)
    for topic in response.responses:
        topic.topic_id = uuid.UUID(int=0)
    # and as a connection sends it (a shared quiet answer is frozen: its body is encoded once per version)
    header = RequestHeader(request_api_key=ApiKey.FETCH, request_api_version=version, correlation_id=3)
    frames = [b"".join(cast("list[bytes]", encode_response(header, response))) for _ in range(2)]
    assert frames[0] == frames[1]
    return encode(response, version) + frames[0]


@pytest.mark.parametrize("version", range(4, 17))
@pytest.mark.parametrize(
    "name",
    [
        "quiet",
        "quiet-committed",
        "epoch",
        "fenced",
        "behind",
        "behind-committed",
        "behind-fenced",
        "behind-deleted",
        "past-end",
        "append",
        "delete-records",
        "unseen-append",
        "leader-gone",
    ],
)
def test_the_one_step_park_answers_as_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, name: str
) -> None:
    """FetchHandler._park_caught_up (the common long poll in one step) gives the answers the general path
    gives, field for field on the wire, whether it parks or declines."""
    answers = []
    for one_step in (True, False):
        config, _warnings = load_broker_config(None, {"log.dirs": str(tmp_path / str(one_step))})
        broker = Broker(config, clock=ManualClock())
        broker.admin.create_topic_now("t", 1, 1, {})
        try:
            with monkeypatch.context() as patch:
                if not one_step:
                    patch.setattr(FetchHandler, "_park_caught_up", lambda *_args: None)
                answers.append(asyncio.run(_scenario(broker, version, name, monkeypatch)))
        finally:
            broker.replicas.shutdown()
            broker.logs.shutdown(broker.clock.now_ms())
    assert answers[0] == answers[1]


def test_quiet_answers_are_shared_while_the_partition_stays_as_it_was(broker: Broker) -> None:
    """The one-step park's expired fetches of a partition that did not move get one shared, frozen answer;
    a moved high watermark or log start, or the other isolation, gets its own, and the old one is thawed."""
    _append(broker, b"a", b"b")

    async def scenario() -> None:
        first = await _expired(broker, _fetch(broker, 2))
        second = await _expired(broker, _fetch(broker, 2))
        assert second is first
        assert id(first) in codec._FROZEN
        committed = await _expired(broker, _fetch(broker, 2, isolation=1))
        assert committed is not first
        assert _fields(committed) == (0, ErrorCode.NONE, 2, 2, 0, [], b"")
        assert broker.replicas.delete_records("t", 0, 1) == (ErrorCode.NONE, 1)
        moved = await _expired(broker, _fetch(broker, 2))
        assert _fields(moved) == (0, ErrorCode.NONE, 2, 2, 1, None, b"")
        assert id(first) not in codec._FROZEN
        _append(broker, b"c")
        later = await _expired(broker, _fetch(broker, 3))
        assert _fields(later) == (0, ErrorCode.NONE, 3, 3, 1, None, b"")
        assert id(moved) not in codec._FROZEN
        assert _fields(first) == (0, ErrorCode.NONE, 2, 2, 0, None, b"")  # an answer given never changes

    asyncio.run(scenario())
