"""A share group's own ``share.session.timeout.ms``, ``share.heartbeat.interval.ms`` and
``share.partition.max.record.locks`` group configs, on a manual clock in process: the heartbeat answer carries
the group's interval; a member silent for longer than the group's session timeout (shorter than the
broker's) is removed and its acquired records go to the next member; one fetch acquires at most the group's
record-lock limit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.share_groups import in_process_broker

from tidelog.coordinator.share.config import ShareBrokerDefaults, iso_duration_ms, resolve_settings
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.admin_manager import AdminManager
from tidelog.server.broker import Broker
from tidelog.server.clock import ManualClock
from tidelog.server.dispatch import RequestContext

GROUP = "workers"
CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "share.session.timeout.ms": "5000",
    "share.heartbeat.interval.ms": "7000",
    "share.partition.max.record.locks": "100",
    "share.record.lock.duration.ms": "60000",
    "share.acquire.mode": "record_limit",  # the record-lock limit exactly (batch_optimized: to a batch's end)
}


def test_resolved_settings_take_the_groups_keys_over_the_brokers() -> None:
    broker = ShareBrokerDefaults()
    settings = resolve_settings(CONFIGS, broker)
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms, settings.max_record_locks) == (
        5000,
        7000,
        100,
    )
    defaults = resolve_settings({"share.session.timeout.ms": "soon"}, broker)
    assert (defaults.session_timeout_ms, defaults.heartbeat_interval_ms, defaults.max_record_locks) == (
        45_000,
        5000,
        2000,
    )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Broker, ManualClock]]:
    clock = ManualClock()
    b = in_process_broker(tmp_path, clock)
    try:
        b.shares.group_configs = lambda group: CONFIGS if group == GROUP else {}
        yield b, clock
    finally:
        b.logs.shutdown(clock.now_ms())


def _context() -> RequestContext:
    return RequestContext(
        api_key=76,
        api_version=1,
        correlation_id=1,
        client_id="test",
        client_host="127.0.0.1",
        connection_id=1,
    )


def _join(b: Broker) -> ShareGroupHeartbeatResponse:
    answer = b.shares.heartbeat(
        _context(),
        ShareGroupHeartbeatRequest(
            group_id=GROUP, member_id=uuid.uuid4().hex, member_epoch=0, subscribed_topic_names=["t"]
        ),
    )
    assert isinstance(answer, ShareGroupHeartbeatResponse)  # a single node answers at once
    assert answer.error_code == ErrorCode.NONE
    return answer


def _fetch(b: Broker, topic_id: uuid.UUID, member: str, epoch: int) -> list[tuple[int, int, int]]:
    request = ShareFetchRequest(
        group_id=GROUP,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=0,
        max_bytes=1 << 20,
        max_records=500,
        topics=[
            ShareFetchRequest.FetchTopic(
                topic_id=topic_id, partitions=[ShareFetchRequest.FetchPartition(partition_index=0)]
            )
        ],
    )
    answer = b.shares.fetch(request)
    assert isinstance(answer, ShareFetchResponse)
    part = answer.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]


def test_group_session_timeout_heartbeat_interval_and_record_locks(
    broker: tuple[Broker, ManualClock],
) -> None:
    b, clock = broker
    assert isinstance(b.admin, AdminManager)
    topic = b.admin.create_topic_now("t", 1, 1, {})
    records = [SimpleRecord(value=b"%d" % i, timestamp=clock.now_ms()) for i in range(150)]
    error, _, _ = b.replicas.append("t", 0, encode_batch(records), now_ms=clock.now_ms())
    assert error == ErrorCode.NONE

    first = _join(b)
    assert first.heartbeat_interval_ms == 7000  # the group's, not the broker's 5000
    assert first.member_id is not None
    assert _fetch(b, topic.topic_id, first.member_id, 0) == [(0, 99, 1)]  # the group's 100 locks

    clock.advance(5001)  # past the group's 5 s session timeout, far short of the broker's 45 s
    second = _join(b)
    assert second.member_id is not None
    assert _fetch(b, topic.topic_id, second.member_id, 0) == [(0, 99, 2)]  # the silent member's, released


def test_iso_durations() -> None:
    assert [iso_duration_ms(t) for t in ("PT1H", "P1DT2M", "PT0.5S", "PT", "1H", "P2D")] == [
        3_600_000,
        86_520_000,
        500,
        None,
        None,
        172_800_000,
    ]


def test_by_duration_starts_at_the_first_record_no_older_than_the_duration(
    broker: tuple[Broker, ManualClock],
) -> None:
    b, clock = broker
    assert isinstance(b.admin, AdminManager)
    topic = b.admin.create_topic_now("t", 1, 1, {})
    hour = 3_600_000
    now = clock.now_ms()
    for age in (3 * hour, 2 * hour, hour // 2, 0):  # offsets 0..3
        batch = encode_batch([SimpleRecord(value=b"x", timestamp=now - age)])
        assert b.replicas.append("t", 0, batch, now_ms=now)[0] == ErrorCode.NONE
    configs = {"share.auto.offset.reset": "by_duration:PT1H", "share.record.lock.duration.ms": "60000"}
    b.shares.group_configs = lambda group: configs
    member = _join(b).member_id
    assert member is not None
    assert _fetch(b, topic.topic_id, member, 0) == [(2, 3, 1)]  # the last hour: offsets 2 and 3


def _leave(b: Broker, member: str) -> None:
    answer = b.shares.heartbeat(
        _context(),
        ShareGroupHeartbeatRequest(group_id=GROUP, member_id=member, member_epoch=-1),
    )
    assert isinstance(answer, ShareGroupHeartbeatResponse)
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.NONE, -1)


def test_a_left_members_records_wait_for_its_session_to_close_or_time_out(
    broker: tuple[Broker, ManualClock],
) -> None:
    b, clock = broker
    assert isinstance(b.admin, AdminManager)
    topic = b.admin.create_topic_now("t", 1, 1, {})
    records = [SimpleRecord(value=b"%d" % i, timestamp=clock.now_ms()) for i in range(20)]
    assert b.replicas.append("t", 0, encode_batch(records), now_ms=clock.now_ms())[0] == ErrorCode.NONE
    first, second = _join(b).member_id, _join(b).member_id
    assert first is not None
    assert second is not None
    assert _fetch(b, topic.topic_id, first, 0) == [(0, 19, 1)]
    _leave(b, first)  # its share session is still open: its final acknowledgements may follow
    assert _fetch(b, topic.topic_id, second, 0) == []
    clock.advance(5001)  # past the group's session timeout: the next heartbeat closes the left session
    third = _join(b).member_id  # (the silent second member is gone too)
    assert third is not None
    assert _fetch(b, topic.topic_id, third, 0) == [(0, 19, 2)]
