"""Delayed delivery's wake-up, on the broker's own (manual) clock: a ShareFetch long-polling while the only
record of its partition waits for its ``tidelog.deliver.at`` time is still waiting one millisecond before that
time and is answered with the record once the clock has passed it by the timing wheel's tick (1 ms): the
broker adds at most a tick to a record's delivery time. (End to end through librdkafka the lateness adds the
client's own polling; tests/server/test_share_groups.py measures it with a ShareConsumer.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path

from tests.support.share_groups import in_process_broker

from tidelog.coordinator.share.delivery_time import DELIVER_AT
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ShareFetchRequest, ShareFetchResponse
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.admin_manager import AdminManager
from tidelog.server.clock import ManualClock

DELAY_MS = 300


def test_a_waiting_share_fetch_gets_a_delayed_record_within_a_tick_of_its_time(tmp_path: Path) -> None:
    clock = ManualClock()
    broker = in_process_broker(tmp_path, clock)
    assert isinstance(broker.admin, AdminManager)
    topic = broker.admin.create_topic_now("t", 1, 1, {})
    broker.shares.group_configs = lambda group: {"share.auto.offset.reset": "earliest"}
    due = clock.now_ms() + DELAY_MS
    record = SimpleRecord(
        value=b"later", timestamp=clock.now_ms(), headers=((DELIVER_AT, str(due).encode()),)
    )
    error, _, _ = broker.replicas.append("t", 0, encode_batch([record]), now_ms=clock.now_ms())
    assert error == ErrorCode.NONE
    member = uuid.uuid4().hex

    def request(epoch: int, max_wait_ms: int) -> ShareFetchRequest:
        return ShareFetchRequest(
            group_id="g",
            member_id=member,
            share_session_epoch=epoch,
            max_wait_ms=max_wait_ms,
            max_bytes=1 << 20,
            max_records=10,
            topics=[
                ShareFetchRequest.FetchTopic(
                    topic_id=topic.topic_id, partitions=[ShareFetchRequest.FetchPartition(partition_index=0)]
                )
            ],
        )

    def acquired(answer: object) -> list[tuple[int, int, int]]:
        assert isinstance(answer, ShareFetchResponse)
        part = answer.responses[0].partitions[0]
        assert part.error_code == ErrorCode.NONE
        return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]

    async def scenario() -> None:
        clock_task = asyncio.create_task(broker.replicas.fetch_purgatory.run())
        try:
            assert acquired(broker.shares.fetch(request(0, 0))) == []  # delayed: not yet
            waiting = broker.shares.fetch(request(1, 60_000))
            assert isinstance(waiting, Awaitable), "the fetch should wait in the purgatory"
            answer = asyncio.ensure_future(waiting)
            clock.set(due - 1)
            # The purgatory's clock task sleeps (in real time) until the wake-up it was given, DELAY_MS + 1
            # from now; let it wake and look at the clock, which is still short of the record's time.
            await asyncio.sleep((DELAY_MS + 200) / 1000)
            assert not answer.done(), "answered before the record's delivery time"
            clock.set(due + 1)  # one tick past it
            assert acquired(await asyncio.wait_for(answer, 10)) == [(0, 0, 1)]
        finally:
            clock_task.cancel()

    try:
        asyncio.run(scenario())
    finally:
        broker.logs.shutdown(clock.now_ms())
