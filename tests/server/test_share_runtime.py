"""The share runtime in process, on a manual clock: retry backoff (``share.release.backoff.ms``, its
multiplier and maximum, set through the injected group-config lookup) spaces redeliveries exactly."""

from __future__ import annotations

import uuid
from pathlib import Path

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ShareFetchRequest, ShareFetchResponse
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.admin_manager import AdminManager
from tidelog.server.broker import Broker
from tidelog.server.clock import ManualClock
from tidelog.server.config import load_broker_config

GROUP = "g"
CONFIGS = {
    GROUP: {
        "share.auto.offset.reset": "earliest",
        "share.release.backoff.ms": "100",
        "share.release.backoff.multiplier": "2",
        "share.release.backoff.max.ms": "300",
        "share.delivery.count.limit": "10",
    }
}


def test_release_backoff_spacing(tmp_path: Path) -> None:
    clock = ManualClock()
    config, _ = load_broker_config(
        None,
        {
            "log.dirs": str(tmp_path),
            "share.coordinator.state.topic.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        },
    )
    broker = Broker(config, clock=clock)
    try:
        assert isinstance(broker.admin, AdminManager)
        topic = broker.admin.create_topic_now("t", 1, 1, {})
        broker.shares.group_configs = lambda group: CONFIGS.get(group, {})
        batch = encode_batch([SimpleRecord(value=b"x", timestamp=clock.now_ms())])
        error, _, _ = broker.replicas.append("t", 0, batch, now_ms=clock.now_ms())
        assert error == ErrorCode.NONE
        member = uuid.uuid4().hex
        epoch = 0

        def fetch(release: int | None = None) -> list[tuple[int, int, int]]:
            nonlocal epoch
            acks = []
            if release is not None:
                acks = [
                    ShareFetchRequest.AcknowledgementBatch(
                        first_offset=release, last_offset=release, acknowledge_types=[2]
                    )
                ]
            request = ShareFetchRequest(
                group_id=GROUP,
                member_id=member,
                share_session_epoch=epoch,
                max_wait_ms=0,
                max_bytes=1 << 20,
                max_records=10,
                topics=[
                    ShareFetchRequest.FetchTopic(
                        topic_id=topic.topic_id,
                        partitions=[
                            ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=acks)
                        ],
                    )
                ],
            )
            epoch += 1
            answer = broker.shares.fetch(request)
            assert isinstance(answer, ShareFetchResponse)
            part = answer.responses[0].partitions[0]
            assert (part.error_code, part.acknowledge_error_code) == (ErrorCode.NONE, ErrorCode.NONE)
            return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]

        assert fetch() == [(0, 0, 1)]
        gaps = []
        for delivery in (2, 3, 4, 5):
            assert fetch(release=0) == []  # released now: not before its backoff
            waited = 0
            while waited < 1000:
                clock.advance(1)
                waited += 1
                got = fetch()
                if got:
                    assert got == [(0, 0, delivery)]
                    break
            gaps.append(waited)
        assert gaps == [100, 200, 300, 300]  # 100 ms, doubled, capped at 300 ms
    finally:
        broker.logs.shutdown(clock.now_ms())
