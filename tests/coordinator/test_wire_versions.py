"""Every version of every group request gets an answer that encodes at that version.

The harness encodes each response and completion at its request's version, so these scenarios
fail on any field a version cannot carry (a null where the version has a non-nullable string ...).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.coordinator.harness import Harness

from tidelog.coordinator.group import GROUP_COORDINATOR_REQUESTS, group_error_response
from tidelog.protocol import codec
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from tidelog.protocol.schema import Request


def versions(cls: type[Request]) -> list[int]:
    low, high = cls.VALID_VERSIONS
    return list(range(low, high + 1))


@pytest.mark.parametrize("version", versions(JoinGroupRequest))
def test_join_and_sync_at_every_join_version(version: int) -> None:
    h = Harness()
    first = h.join("g", version=version)
    if version >= 4:
        assert h.response(first).error_code == ErrorCode.MEMBER_ID_REQUIRED
        first = h.join("g", h.response(first).member_id, version=version)
    h.advance(3000)
    joined = h.response(first)
    assert isinstance(joined, JoinGroupResponse)
    assert joined.error_code == 0
    assert joined.protocol_name == "range"
    for sync_version in versions(SyncGroupRequest):
        h.sync("g", joined.member_id, joined.generation_id, {joined.member_id: b"x"}, version=sync_version)
    error = h.response(h.join("g", "nobody", version=version))
    assert error.protocol_name == ("" if version < 7 else None)  # non-nullable before v7


@pytest.mark.parametrize("version", versions(LeaveGroupRequest))
def test_heartbeat_and_leave_at_every_version(version: int) -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    for hb_version in versions(HeartbeatRequest):
        request = HeartbeatRequest(group_id="g", generation_id=gen, member_id=a)
        assert h.send(request, hb_version).error_code == 0
    assert h.response(h.leave("g", ("x", None), version=version)).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID if version < 3 else 0
    )
    h.leave("g", (a, None), version=version)
    assert h.group("g").members == {}


@pytest.mark.parametrize("version", versions(OffsetCommitRequest))
def test_offsets_at_every_commit_and_fetch_version(version: int) -> None:
    h = Harness()
    assert h.commit("g", {("t", 0): 5}, version=version) == {("t", 0): 0}
    fetch_version = min(version, 7)
    assert h.fetch("g", {"t": [0]}, version=fetch_version).topics[0].partitions[0].committed_offset == 5
    if fetch_version >= 2:
        assert h.fetch("g", None, version=fetch_version).topics[0].partitions[0].committed_offset == 5
    for v in (8, 9):
        group = OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None)
        response = h.send(OffsetFetchRequest(groups=[group]), v)
        assert response.groups[0].topics[0].partitions[0].committed_offset == 5


def test_admin_requests_at_every_version() -> None:
    h = Harness()
    h.form_group("g", ["a"])
    h.commit("simple", {("t", 0): 1})
    for v in versions(DescribeGroupsRequest):
        assert h.send(DescribeGroupsRequest(groups=["g", "x"]), v).groups[0].group_state == "Stable"
    for v in versions(ListGroupsRequest):
        assert len(h.send(ListGroupsRequest(), v).groups) == 2
    request = OffsetDeleteRequest(
        group_id="simple",
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="t", partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]
            )
        ],
    )
    assert h.send(request, 0).error_code == 0
    for v in versions(DeleteGroupsRequest):
        assert h.send(DeleteGroupsRequest(groups_names=["simple", "g"]), v).results[1].error_code == (
            ErrorCode.NON_EMPTY_GROUP
        )


def _sample_request(cls: type[Request]) -> Request:
    if cls is OffsetFetchRequest:
        return OffsetFetchRequest(
            group_id="g",
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])],
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g")],
        )
    if cls is OffsetCommitRequest:
        partition = OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=3)
        return OffsetCommitRequest(
            group_id="g",
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[partition])],
        )
    if cls is TxnOffsetCommitRequest:
        txn_partition = TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=3)
        return TxnOffsetCommitRequest(
            group_id="g",
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="t", partitions=[txn_partition])],
        )
    if cls is DescribeGroupsRequest:
        return DescribeGroupsRequest(groups=["g", "h"])
    if cls is DeleteGroupsRequest:
        return DeleteGroupsRequest(groups_names=["g"])
    if cls is ConsumerGroupDescribeRequest:
        return ConsumerGroupDescribeRequest(group_ids=["g"])
    factory: Any = cls
    request: Request = factory(group_id="g") if any(f.name == "group_id" for f in cls.FIELDS) else factory()
    return request


@pytest.mark.parametrize(
    ("cls", "version"), [(cls, v) for cls in GROUP_COORDINATOR_REQUESTS for v in versions(cls)]
)
def test_error_responses_encode_at_every_version(cls: type[Request], version: int) -> None:
    response = group_error_response(_sample_request(cls), version, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert response.API_KEY == cls.API_KEY
    raw = codec.encode(response, version)
    assert ErrorCode.COORDINATOR_LOAD_IN_PROGRESS.to_bytes(2, "big") in raw  # the error reaches the wire


def test_public_surface_is_pinned() -> None:
    from tidelog.coordinator import common, group

    for package in (common, group):
        assert package.__all__ == sorted(package.__all__, key=lambda n: (not n.isupper(), n))
    assert set(common.__all__) == {
        "COORDINATOR_APPEND_ERRORS",
        "GROUP_METADATA_TOPIC_NAME",
        "INTERNAL_TOPICS",
        "TRANSACTION_STATE_TOPIC_NAME",
        "CancelTimer",
        "CoordinatorRecord",
        "CoordinatorRecordError",
        "CoordinatorResult",
        "DeferredResponse",
        "PartitionedCoordinator",
        "ScheduleTimer",
        "TimerOp",
        "WriteTxnMarkers",
        "java_string_hash",
        "partition_for",
    }
    assert set(group.__all__) == {
        "GROUP_COORDINATOR_REQUESTS",
        "ClassicGroup",
        "ClassicGroupState",
        "ConsumerGroup",
        "ConsumerGroupState",
        "GroupCoordinator",
        "GroupCoordinatorConfig",
        "GroupCoordinatorShard",
        "GroupType",
        "TimerKey",
        "TimerKind",
        "TopicImage",
        "TopicsImage",
        "UnsupportedRecordTypeError",
        "group_append_error_to_response_error",
        "group_error_response",
    }
