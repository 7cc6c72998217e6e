"""A consumer's full fetch of many partitions, most of them idle (issue 17: librdkafka and aiokafka send one
each poll, naming every assigned partition): its first read watches each partition from the same lookup, an
idle partition's answer is the one kept for it while its offsets stay as they were, and an expired wait that
no change reached is answered with its first read. Each answer is compared on the wire, v4-v16, with what
the general path gives (every partition looked up through ``leader_partition``, a fresh answer per idle
partition, the wait's watches made by a second lookup each, the expired answer read again)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path
from typing import Any, cast

import pytest
from tests.server.inprocess import expired, make_broker, stop_broker

from tidelog.protocol.codec import encode, encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse, RequestHeader
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.replication.partition import FetchIsolation
from tidelog.server.broker import Broker
from tidelog.server.clock import ManualClock
from tidelog.server.dispatch import RequestContext
from tidelog.server.fetch_wait import FetchWait
from tidelog.server.handlers.fetch import FetchHandler, Wanted
from tidelog.storage import EpochEndOffset

pytestmark = [pytest.mark.timeout(120)]

PARTITIONS = 12
TXN_PARTITION = 3
"""Its open transaction keeps its last stable offset at 2, below its high watermark 3."""


class _Forgetful(dict[Any, Any]):
    """An idle-answer cache that never has one: each idle partition's answer is made afresh."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


def _general(patch: pytest.MonkeyPatch, broker: Broker) -> None:
    """Take every fast step of a wide fetch out: the general path's answers."""
    patch.setattr(broker.replicas, "hosted_for_lookup", lambda: None)
    real_read = FetchHandler._read

    def read(
        self: FetchHandler,
        wanted: list[Wanted],
        version: int,
        isolation: FetchIsolation,
        max_bytes: int,
        diverged: dict[tuple[str, int], EpochEndOffset],
        replica_id: int,
        earlier: dict[Hashable, FetchResponse.PartitionData] | None = None,
        wait: FetchWait | None = None,  # not passed: watched afterwards, one lookup each
    ) -> tuple[FetchResponse, int, bool]:
        self._idle = (_Forgetful(), _Forgetful())
        return real_read(self, wanted, version, isolation, max_bytes, diverged, replica_id, earlier)

    patch.setattr(FetchHandler, "_read", read)
    patch.setattr(FetchHandler, "_kept_answer", staticmethod(lambda _first: None))


def _append(broker: Broker, index: int, *values: bytes, pid: int = -1) -> None:
    batch = encode_batch(
        [SimpleRecord(value=v, timestamp=1_700_000_000_000) for v in values],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=pid >= 0,
    )
    assert broker.replicas.append("t", index, batch, now_ms=broker.clock.now_ms())[0] is ErrorCode.NONE


def _fetch(
    broker: Broker,
    version: int,
    offsets: dict[int, int],
    *,
    isolation: int = 0,
    min_bytes: int = 1,
    epochs: dict[int, int] | None = None,
) -> Any:
    topic_id = broker.metadata.topic("t").topic_id  # type: ignore[union-attr]
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=min_bytes,
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
                        partition=index,
                        fetch_offset=offset,
                        partition_max_bytes=1 << 20,
                        current_leader_epoch=(epochs or {}).get(index, 0),
                    )
                    for index, offset in offsets.items()
                ],
            )
        ],
    )
    route = broker.dispatcher.route_for(ApiKey.FETCH, version)
    assert route is not None
    return route.handler(
        RequestContext(ApiKey.FETCH, version, 1, "test", "127.0.0.1", 1, "PLAINTEXT"), request
    )


async def _expired(broker: Broker, parked: Any) -> FetchResponse:
    response = await expired(broker, parked, 600)
    assert isinstance(response, FetchResponse)
    return response


def _ends() -> dict[int, int]:
    """Every partition at its end (the transaction's at its last stable offset under read_committed)."""
    return {index: 3 if index % 2 else 0 for index in range(PARTITIONS)}


async def _scenario(broker: Broker, version: int, name: str, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The answers of one scenario, each encoded at ``version`` with the topic id zeroed (in the bytes: an
    answer is never changed once given, its partitions' answers may be kept and given again)."""
    for index in range(1, PARTITIONS, 2):  # the odd partitions hold 3 records, the even ones none
        if index == TXN_PARTITION:
            _append(broker, index, b"a", b"b")
            _append(broker, index, b"open", pid=1000)  # a transaction left open
        else:
            _append(broker, index, b"a", b"b", b"c")
    txn = broker.replicas.get("t", TXN_PARTITION)
    assert txn is not None
    assert txn.offset_snapshot() == (3, 2, 0) == (txn.high_watermark, txn.last_stable_offset, 0)
    ends = _ends()
    responses: list[Any] = []
    if name == "idle":
        responses.append(await _expired(broker, _fetch(broker, version, ends)))
        responses.append(await _expired(broker, _fetch(broker, version, ends)))  # the kept idle answers
    elif name == "idle-committed":
        committed = dict(ends)
        committed[TXN_PARTITION] = 2
        responses.append(await _expired(broker, _fetch(broker, version, committed, isolation=1)))
        responses.append(await _expired(broker, _fetch(broker, version, committed, isolation=1)))
        responses.append(await _expired(broker, _fetch(broker, version, ends)))  # the other isolation
    elif name == "committed-behind":  # records below the last stable offset, an open transaction above
        responses.append(_fetch(broker, version, {**ends, TXN_PARTITION: 0}, isolation=1))
    elif name == "behind":  # records to read: answered at once
        responses.append(_fetch(broker, version, {**ends, 5: 1}))
    elif name == "behind-waits":  # fewer than min_bytes: waits, then answers what it read (read again)
        responses.append(await _expired(broker, _fetch(broker, version, {**ends, 5: 2}, min_bytes=1 << 20)))
    elif name == "append":
        parked = _fetch(broker, version, ends)
        _append(broker, 4, b"new")
        responses.append(await asyncio.wait_for(parked, 10))
    elif name == "append-below-min":
        parked = _fetch(broker, version, ends, min_bytes=1 << 20)
        _append(broker, 4, b"new")
        _append(broker, 7, b"new")
        assert not parked.done()
        responses.append(await _expired(broker, parked))
    elif name == "moved-between-polls":  # a kept idle answer given up when its offsets move
        responses.append(await _expired(broker, _fetch(broker, version, ends)))
        assert broker.replicas.delete_records("t", 1, 1) == (ErrorCode.NONE, 1)
        _append(broker, 2, b"x")
        responses.append(await _expired(broker, _fetch(broker, version, {**ends, 2: 1})))
    elif name == "leader-gone":
        parked = _fetch(broker, version, ends)
        broker.replicas.delete("t", 6)
        responses.append(await asyncio.wait_for(parked, 10))
    elif name == "fenced":  # answered at once from v9 (a leader epoch named); before, it waits
        responses.append(_fetch(broker, version, ends, epochs={8: 7}))
    elif name == "no-such-partition":
        responses.append(_fetch(broker, version, {**ends, 40: 0}))
    else:
        assert name == "delete-records-while-waiting"
        parked = _fetch(broker, version, ends)
        assert broker.replicas.delete_records("t", 9, 2) == (ErrorCode.NONE, 2)
        responses.append(await _expired(broker, parked))
    frames = []
    for response in responses:
        if isinstance(response, asyncio.Future):  # before v9 a request names no leader epoch
            assert name == "fenced"
            response = await _expired(broker, response)
        assert isinstance(response, FetchResponse)
        assert len(response.responses[0].partitions) >= PARTITIONS
        topic_id = broker.metadata.topic("t").topic_id  # type: ignore[union-attr]
        assert [topic.topic_id for topic in response.responses] == [topic_id]
        header = RequestHeader(request_api_key=ApiKey.FETCH, request_api_version=version, correlation_id=3)
        # as a connection sends it, twice, the topic id zeroed (two brokers' ids differ)
        sent = [b"".join(cast("list[bytes]", encode_response(header, response))) for _ in range(2)]
        assert sent[0] == sent[1]
        frame = encode(response, version) + sent[0]
        frames.append(frame.replace(topic_id.bytes, bytes(16)))
    return frames


@pytest.mark.parametrize("version", range(4, 17))
@pytest.mark.parametrize(
    "name",
    [
        "idle",
        "idle-committed",
        "committed-behind",
        "behind",
        "behind-waits",
        "append",
        "append-below-min",
        "moved-between-polls",
        "leader-gone",
        "fenced",
        "no-such-partition",
        "delete-records-while-waiting",
    ],
)
def test_a_wide_fetch_answers_as_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, name: str
) -> None:
    answers = []
    for fast in (True, False):
        broker = make_broker(tmp_path / str(fast), topic=None, clock=ManualClock())
        broker.admin.create_topic_now("t", PARTITIONS, 1, {})
        try:
            with monkeypatch.context() as patch:
                if not fast:
                    _general(patch, broker)
                answers.append(asyncio.run(_scenario(broker, version, name, monkeypatch)))
        finally:
            stop_broker(broker)
    assert answers[0] == answers[1]


def test_an_idle_partition_answer_is_kept_while_the_partition_stays_as_it_was(tmp_path: Path) -> None:
    """Polls of the same idle partitions answer each with the same kept object; a partition that moved (here
    its log start) gets a new one, and the answer given before stays as it was."""
    broker = make_broker(tmp_path, topic=None, clock=ManualClock())
    broker.admin.create_topic_now("t", PARTITIONS, 1, {})
    try:
        for index in range(PARTITIONS):
            _append(broker, index, b"a")
        ends = dict.fromkeys(range(PARTITIONS), 1)

        async def scenario() -> None:
            first = await _expired(broker, _fetch(broker, 12, ends))
            second = await _expired(broker, _fetch(broker, 12, ends))
            assert second is not first
            before, again = first.responses[0].partitions, second.responses[0].partitions
            assert all(a is b for a, b in zip(before, again, strict=True))
            assert broker.replicas.delete_records("t", 5, 1) == (ErrorCode.NONE, 1)
            moved = await _expired(broker, _fetch(broker, 12, ends))
            after = moved.responses[0].partitions
            assert [a is b for a, b in zip(before, after, strict=True)] == [i != 5 for i in range(PARTITIONS)]
            assert [(p.high_watermark, p.log_start_offset) for p in after] == [
                (1, 1 if i == 5 else 0) for i in range(PARTITIONS)
            ]
            assert before[5].log_start_offset == 0  # an answer given never changes

        asyncio.run(scenario())
    finally:
        stop_broker(broker)
