"""The produce path's cheap steps give the same answers as the plain ones (issue 17, per-request cost).

- A produce response's partition entry built field by field is the ``__init__``-built entry (every field,
  fresh lists and leaders) and encodes to the same bytes at every Produce version served.
- The produce purgatory skips its check while no produce waits, and still wakes a waiting acks=all produce
  when the high watermark passes its batch, however many produces completed (decided, woken, timed out)
  before.
- An in-process acks=all produce on a single node is answered at once, with its offsets.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields
from pathlib import Path

import pytest
from tests.server.inprocess import ctx, handle, make_broker

from tidelog.protocol.codec import encode
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, ProduceRequest, ProduceResponse
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.clock import ManualClock
from tidelog.server.handlers.produce import _partition_response
from tidelog.server.produce_purgatory import PendingAppend, ProducePurgatory

pytestmark = [pytest.mark.timeout(60)]

_Entry = ProduceResponse.PartitionProduceResponse


def _plain(index: int) -> ProduceResponse.PartitionProduceResponse:
    return _Entry(index=index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)


def test_partition_entry_is_the_init_built_one() -> None:
    fast, plain = _partition_response(7), _plain(7)
    assert fast == plain  # compares every field: one the fast path left unset raises here
    assert [getattr(fast, f.name) for f in fields(_Entry)] == [getattr(plain, f.name) for f in fields(_Entry)]
    other = _partition_response(8)
    assert fast.record_errors is not other.record_errors
    assert fast.current_leader is not other.current_leader
    assert fast.current_leader == ProduceResponse.LeaderIdAndEpoch()


@pytest.mark.parametrize("version", range(3, 12))
def test_partition_entry_encodes_the_same(version: int) -> None:
    def response(entry: ProduceResponse.PartitionProduceResponse) -> ProduceResponse:
        entry.base_offset, entry.log_start_offset = 41, 0
        topic = ProduceResponse.TopicProduceResponse(name="t", partition_responses=[entry])
        return ProduceResponse(responses=[topic])

    assert encode(response(_partition_response(3)), version) == encode(response(_plain(3)), version)


class _Partition:
    """What the purgatory asks of a partition: has the high watermark reached an offset?"""

    def __init__(self) -> None:
        self.high_watermark = 0

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, int]:
        return self.high_watermark >= required_offset, ErrorCode.NONE


def test_produce_purgatory_wakes_a_waiting_produce_after_others_completed() -> None:
    async def scenario() -> None:
        partition = _Partition()
        purgatory = ProducePurgatory(ManualClock(), lambda topic, index: partition)  # type: ignore[arg-type,return-value]
        key = ("t", 0)
        purgatory.check(key)  # nothing waits: nothing to do, nothing raised
        assert purgatory.waiting == 0  # what the replica manager's append asks before reading the HW

        def produce(required_offset: int, timeout_ms: int = 30_000) -> tuple[object, _Entry]:
            entry = _plain(0)
            answer = purgatory.delay(timeout_ms, [PendingAppend("t", 0, required_offset, entry)], "answer")
            return answer, entry

        partition.high_watermark = 5
        answer, entry = produce(5)  # decided at once: no future
        assert answer == "answer"
        assert entry.error_code == ErrorCode.NONE
        assert purgatory.delayed == 0

        for round_ in range(3):
            required = 10 * (round_ + 1)
            waiting, entry = produce(required)
            assert isinstance(waiting, asyncio.Future)
            assert not waiting.done()
            assert purgatory.delayed == 1
            assert purgatory.waiting == 1
            partition.high_watermark = required - 1
            purgatory.check(key)
            assert not waiting.done()
            partition.high_watermark = required
            purgatory.check(key)
            assert waiting.done()
            assert waiting.result() == "answer"
            assert entry.error_code == ErrorCode.NONE
            assert purgatory.delayed == 0
            assert purgatory.waiting == 0
            purgatory.check(key)  # none waits again

        timed_out, entry = produce(1_000)
        assert isinstance(timed_out, asyncio.Future)
        purgatory.complete_all()  # shutdown (as a time-out): REQUEST_TIMED_OUT
        assert timed_out.result() == "answer"
        assert entry.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert purgatory.waiting == 0

        waiting, entry = produce(40)  # the count went back to none and up again: still woken
        assert isinstance(waiting, asyncio.Future)
        partition.high_watermark = 40
        purgatory.check(key)
        assert waiting.done()
        assert entry.error_code == ErrorCode.NONE

    asyncio.run(scenario())


def test_acks_all_produce_on_a_single_node_is_answered_at_once(tmp_path: Path) -> None:
    broker = make_broker(tmp_path, topic=None)
    broker.admin.create_topic_now("t", 2, 1, {})
    try:
        for expected_base in (0, 3):
            batch = encode_batch([SimpleRecord(value=b"v%d" % i) for i in range(3)])
            request = ProduceRequest(
                acks=-1,
                timeout_ms=30_000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name="t",
                        partition_data=[
                            ProduceRequest.PartitionProduceData(index=1, records=bytearray(batch))
                        ],
                    )
                ],
            )
            response = handle(broker, ctx(ApiKey.PRODUCE, 9), request)
            assert isinstance(response, ProduceResponse)
            (entry,) = response.responses[0].partition_responses
            assert (entry.index, entry.error_code, entry.base_offset) == (1, ErrorCode.NONE, expected_base)
            assert (entry.log_append_time_ms, entry.log_start_offset, entry.error_message) == (-1, 0, None)
            assert entry.current_leader == ProduceResponse.LeaderIdAndEpoch()
        assert broker.replicas.produce_purgatory.delayed == 0
    finally:
        broker.logs.shutdown(broker.clock.now_ms())


def test_handler_response_is_the_init_built_one(tmp_path: Path) -> None:
    """The topic entries and the response the handler builds without ``__init__`` equal the ``__init__``-built
    ones (every field, fresh lists) and encode alike at every version served, an unknown topic's error too."""
    broker = make_broker(tmp_path, topic=None)
    broker.admin.create_topic_now("t", 1, 1, {})
    try:
        batch = encode_batch([SimpleRecord(value=b"v")])
        request = ProduceRequest(
            acks=1,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=name, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
                )
                for name in ("t", "missing")
            ],
        )
        endpoint_lists: list[list[ProduceResponse.NodeEndpoint]] = []
        for version in range(3, 12):
            response = handle(broker, ctx(ApiKey.PRODUCE, version), request)
            assert isinstance(response, ProduceResponse)
            plain = ProduceResponse(
                responses=[
                    ProduceResponse.TopicProduceResponse(
                        name=topic.name, partition_responses=topic.partition_responses
                    )
                    for topic in response.responses
                ]
            )
            assert response == plain
            assert [getattr(response, f.name) for f in fields(ProduceResponse)] == [
                getattr(plain, f.name) for f in fields(ProduceResponse)
            ]
            assert encode(response, version) == encode(plain, version)
            ok, missing = (topic.partition_responses[0] for topic in response.responses)
            assert (ok.error_code, missing.error_code) == (
                ErrorCode.NONE,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
            assert response.node_endpoints == []
            assert all(
                response.node_endpoints is not other for other in endpoint_lists
            )  # fresh, never shared
            endpoint_lists.append(response.node_endpoints)
    finally:
        broker.logs.shutdown(broker.clock.now_ms())
