"""The group coordinator runtime in-process (no sockets): loading, failed appends, shutdown, timers.

- A broker that starts with ``__consumer_offsets`` on disk answers COORDINATOR_LOAD_IN_PROGRESS until the
  loader has replayed the group's partition, then serves the offsets it replayed.
- A failed append answers the request with the mapped error (KAFKA_STORAGE_ERROR -> NOT_COORDINATOR), and the
  partition is reloaded from its log: the failed commit is gone, the earlier one is served again.
- Shutdown answers a parked JoinGroup with NOT_COORDINATOR at once.
- A member that stops heartbeating is removed by the session timer on the timing wheel (an Empty group
  after its session timeout), and the clock task never fires a timer early.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from tests.server import inprocess
from tests.server.group_harness import subscription
from tests.server.inprocess import ctx, until

from tidelog.coordinator.common import partition_for
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ApiKey,
    DescribeGroupsRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from tidelog.server.broker import Broker
from tidelog.server.group_runtime import OFFSETS_TOPIC


def make_broker(data: Path, **overrides: str) -> Broker:
    return inprocess.make_broker(data, topic=None, **overrides)


def running(broker: Broker) -> contextlib.AbstractAsyncContextManager[list[asyncio.Task[None]]]:
    """The group runtime's loader and clock tasks, as Broker.start runs them."""
    return inprocess.running(broker, transactions=False)


def commit_request(group: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(committed_offset=offset)],
            )
        ],
    )


def fetch(broker: Broker, group: str) -> tuple[int, int]:
    """(top-level error, committed offset of t-0)."""
    response = broker.groups.handle(
        ctx(ApiKey.OFFSET_FETCH, 7),
        OffsetFetchRequest(
            group_id=group,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
        ),
    )
    offset = response.topics[0].partitions[0].committed_offset if response.topics else -1
    return response.error_code, offset


def test_loading_then_serving(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            for offset in (5, 9):
                answer = broker.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request("g", offset))
                assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
            assert fetch(broker, "g") == (ErrorCode.NONE, 9)

        again = make_broker(tmp_path)
        again.groups.start()  # every partition loading, nothing replayed yet
        assert fetch(again, "g") == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
        async with running(again):
            await until(lambda: not again.groups.coordinator.is_loading(partition_for("g", 50)))
            assert fetch(again, "g") == (ErrorCode.NONE, 9)
            assert again.groups.coordinator.owned_partitions == list(range(50))

    asyncio.run(scenario())


def test_failed_append_reloads_the_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            broker.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request("g", 5))
            real_append = broker.replicas.append
            calls: list[str] = []

            def failing_append(topic: str, index: int, records: Any, **kwargs: Any) -> Any:
                calls.append(topic)
                return ErrorCode.KAFKA_STORAGE_ERROR, None, "disk on fire"

            monkeypatch.setattr(broker.replicas, "append", failing_append)
            answer = broker.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request("g", 7))
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
            assert calls == [OFFSETS_TOPIC]
            monkeypatch.setattr(broker.replicas, "append", real_append)
            # The shard's memory had 7; the log has 5: the partition reloads from the log.
            assert fetch(broker, "g")[0] in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NONE)
            await until(lambda: not broker.groups.coordinator.is_loading(partition_for("g", 50)))
            assert fetch(broker, "g") == (ErrorCode.NONE, 5)

    asyncio.run(scenario())


def join_request(group: str, member: str = "", session_ms: int = 6000) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms,
        member_id=member,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription("t"))],
    )


def test_shutdown_answers_parked_joins(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path, **{"group.initial.rebalance.delay.ms": "60000"})
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            parked = broker.groups.handle(ctx(ApiKey.JOIN_GROUP, 3), join_request("g"))
            assert isinstance(parked, asyncio.Future)
            await asyncio.sleep(0.05)
            assert not parked.done()
            broker.groups.shutdown()
            assert parked.done()
            assert parked.result().error_code == ErrorCode.NOT_COORDINATOR

    asyncio.run(scenario())


def test_session_timeout_removes_a_silent_member(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(
            tmp_path, **{"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "200"}
        )
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            loop = asyncio.get_running_loop()
            joined = broker.groups.handle(ctx(ApiKey.JOIN_GROUP, 3), join_request("g", session_ms=300))
            if isinstance(joined, asyncio.Future):
                joined = await joined
            assert joined.error_code == ErrorCode.NONE
            synced = broker.groups.handle(
                ctx(ApiKey.SYNC_GROUP, 3),
                SyncGroupRequest(
                    group_id="g", generation_id=joined.generation_id, member_id=joined.member_id
                ),
            )
            assert synced.error_code == ErrorCode.NONE
            started = loop.time()

            def state() -> str:
                described = broker.groups.handle(
                    ctx(ApiKey.DESCRIBE_GROUPS, 5), DescribeGroupsRequest(groups=["g"])
                )
                return str(described.groups[0].group_state)

            assert state() == "Stable"
            await until(lambda: state() == "Empty", limit_s=5)
            assert loop.time() - started >= 0.29  # not before the 300 ms session ran out

    asyncio.run(scenario())
