"""Share-state writes no request waits for (a member fenced by a heartbeat, its acquired records released)
are written at once, as a request's are: they reach ``__share_group_state`` without another ShareFetch, so
a restart or a failover of the share-partition's leader keeps the delivery they count."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.share_groups import in_process_broker

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ApiKey,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.admin_manager import AdminManager
from tidelog.server.clock import ManualClock
from tidelog.server.dispatch import RequestContext

GROUP = "g"
CONFIGS = {GROUP: {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"}}
AVAILABLE = 0


def test_a_member_fenced_by_a_heartbeat_has_its_release_written_at_once(tmp_path: Path) -> None:
    clock = ManualClock()
    broker = in_process_broker(tmp_path, clock)
    try:
        assert isinstance(broker.admin, AdminManager)
        topic = broker.admin.create_topic_now("t", 1, 1, {})
        broker.shares.group_configs = lambda group: CONFIGS.get(group, {})
        batch = encode_batch([SimpleRecord(value=b"x", timestamp=clock.now_ms())])
        assert broker.replicas.append("t", 0, batch, now_ms=clock.now_ms())[0] == ErrorCode.NONE
        ctx = RequestContext(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, "test", "127.0.0.1", 1)

        def join(member_id: str) -> None:
            beat = broker.shares.heartbeat(
                ctx,
                ShareGroupHeartbeatRequest(
                    group_id=GROUP, member_id=member_id, member_epoch=0, subscribed_topic_names=["t"]
                ),
            )
            assert isinstance(beat, ShareGroupHeartbeatResponse)
            assert beat.error_code == ErrorCode.NONE

        def persisted() -> tuple[int, list[tuple[int, int, int, int]]]:
            answer = broker.share_states.handle_request(
                ReadShareGroupStateRequest(
                    group_id=GROUP,
                    topics=[
                        ReadShareGroupStateRequest.ReadStateData(
                            topic_id=topic.topic_id,
                            partitions=[ReadShareGroupStateRequest.PartitionData(partition=0)],
                        )
                    ],
                ),
                0,
            )
            assert isinstance(answer, ReadShareGroupStateResponse)
            (p,) = answer.results[0].partitions
            assert p.error_code == ErrorCode.NONE
            return p.start_offset, [
                (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches
            ]

        first = uuid.uuid4().hex
        join(first)
        fetched = broker.shares.fetch(
            ShareFetchRequest(
                group_id=GROUP,
                member_id=first,
                share_session_epoch=0,
                max_wait_ms=0,
                max_bytes=1 << 20,
                max_records=10,
                topics=[
                    ShareFetchRequest.FetchTopic(
                        topic_id=topic.topic_id,
                        partitions=[ShareFetchRequest.FetchPartition(partition_index=0)],
                    )
                ],
            )
        )
        assert isinstance(fetched, ShareFetchResponse)
        acquired = fetched.responses[0].partitions[0].acquired_records
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in acquired] == [(0, 0, 1)]
        assert persisted() == (0, [])  # an acquisition is not persisted

        clock.advance(45_001)  # the first member's session runs out (group.share.session.timeout.ms)
        join(uuid.uuid4().hex)  # this heartbeat fences it: its record is released, one delivery counted
        assert broker.shares.groups[GROUP].members.keys() != {first}
        assert persisted() == (0, [(0, 0, AVAILABLE, 1)])
    finally:
        broker.logs.shutdown(clock.now_ms())
