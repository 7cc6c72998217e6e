"""Response bodies the group coordinator builds, including whole-request error responses.

Invariants: every builder takes the api version the response will be encoded at and only sets fields
that version carries the way Kafka does (JoinGroup's protocol name is ``""`` rather than null before
v7 and null rather than ``""`` from v7; LeaveGroup before v3 folds its one member's error into the
top-level error; OffsetFetch before v8 speaks of one group, from v8 of many). :func:`group_error_response`
answers any coordinator request with one error everywhere it can go (COORDINATOR_LOAD_IN_PROGRESS
while loading, NOT_COORDINATOR, or an append failure mapped by
:func:`group_append_error_to_response_error`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from tidelog.coordinator.common.append_errors import COORDINATOR_APPEND_ERRORS
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from tidelog.protocol.schema import Request, Response

__all__ = [
    "group_append_error_to_response_error",
    "group_error_response",
    "join_group_response",
    "leave_group_response",
    "offset_fetch_error_group",
    "offset_fetch_response",
    "sync_group_response",
    "txn_offset_commit_response",
]


_GROUP_APPEND_ERRORS: Final[Mapping[ErrorCode, ErrorCode]] = {
    **COORDINATOR_APPEND_ERRORS,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def group_append_error_to_response_error(error: ErrorCode) -> ErrorCode:
    """Kafka's ``appendGroupMetadataErrorToResponseError``: what a client is told when the group
    coordinator's records could not be appended (the common translation, plus INVALID_FETCH_SIZE)."""
    return _GROUP_APPEND_ERRORS.get(error, error)


def join_group_response(
    api_version: int,
    *,
    error: ErrorCode = ErrorCode.NONE,
    member_id: str = "",
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str | None = "",
    skip_assignment: bool = False,
    members: Sequence[JoinGroupResponse.JoinGroupResponseMember] = (),
) -> JoinGroupResponse:
    if api_version < 7 and protocol_name is None:
        protocol_name = ""
    elif api_version >= 7 and protocol_name == "":
        protocol_name = None
    return JoinGroupResponse(
        error_code=error,
        generation_id=generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader or "",
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=list(members),
    )


def sync_group_response(
    *,
    error: ErrorCode = ErrorCode.NONE,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=error, protocol_type=protocol_type, protocol_name=protocol_name, assignment=assignment
    )


def leave_group_response(
    api_version: int, members: Sequence[LeaveGroupResponse.MemberResponse], error: ErrorCode = ErrorCode.NONE
) -> LeaveGroupResponse:
    if api_version >= 3:
        return LeaveGroupResponse(error_code=error, members=list(members))
    if error == ErrorCode.NONE:
        error = next((ErrorCode.of(m.error_code) for m in members if m.error_code), ErrorCode.NONE)
    return LeaveGroupResponse(error_code=error)


def offset_fetch_error_group(
    group: OffsetFetchRequest.OffsetFetchRequestGroup, error: ErrorCode
) -> OffsetFetchResponse.OffsetFetchResponseGroup:
    return OffsetFetchResponse.OffsetFetchResponseGroup(group_id=group.group_id, error_code=error)


def offset_fetch_response(
    api_version: int, groups: list[OffsetFetchResponse.OffsetFetchResponseGroup]
) -> OffsetFetchResponse:
    """Wrap per-group results (the v8+ shape) in the response of ``api_version``.

    Before v8 there is exactly one group; its error goes to the top-level ``error_code`` from v2, and
    into every partition before that (v0-v1 have no group-level error)."""
    if api_version >= 8:
        return OffsetFetchResponse(groups=groups)
    (group,) = groups
    topics = [
        OffsetFetchResponse.OffsetFetchResponseTopic(
            name=t.name,
            partitions=[
                OffsetFetchResponse.OffsetFetchResponsePartition(
                    partition_index=p.partition_index,
                    committed_offset=p.committed_offset,
                    committed_leader_epoch=p.committed_leader_epoch,
                    metadata=p.metadata,
                    error_code=p.error_code or (group.error_code if api_version < 2 else 0),
                )
                for p in t.partitions
            ],
        )
        for t in group.topics
    ]
    return OffsetFetchResponse(topics=topics, error_code=group.error_code)


def _offset_fetch_error(
    request: OffsetFetchRequest, api_version: int, error: ErrorCode
) -> OffsetFetchResponse:
    if api_version >= 8:
        return OffsetFetchResponse(groups=[offset_fetch_error_group(g, error) for g in request.groups])
    if api_version >= 2:
        return OffsetFetchResponse(error_code=error)
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name=t.name,
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=i, committed_offset=-1, error_code=error
                    )
                    for i in t.partition_indexes
                ],
            )
            for t in request.topics or ()
        ]
    )


def group_error_response(request: Request, api_version: int, error: ErrorCode) -> Response:
    """The response to a group coordinator ``request`` that carries ``error`` wherever Kafka would put a request-wide error."""
    if isinstance(request, JoinGroupRequest):
        return join_group_response(api_version, error=error, member_id=request.member_id)
    if isinstance(request, SyncGroupRequest):
        return sync_group_response(error=error)
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse(error_code=error)
    if isinstance(request, LeaveGroupRequest):
        return LeaveGroupResponse(error_code=error)
    if isinstance(request, OffsetCommitRequest):
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=error
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )
    if isinstance(request, TxnOffsetCommitRequest):
        return txn_offset_commit_response(request, error)
    if isinstance(request, OffsetFetchRequest):
        return _offset_fetch_error(request, api_version, error)
    if isinstance(request, OffsetDeleteRequest):
        return OffsetDeleteResponse(error_code=error)
    if isinstance(request, DescribeGroupsRequest):
        return DescribeGroupsResponse(
            groups=[
                DescribeGroupsResponse.DescribedGroup(group_id=g, error_code=error) for g in request.groups
            ]
        )
    if isinstance(request, ListGroupsRequest):
        return ListGroupsResponse(error_code=error)
    if isinstance(request, ConsumerGroupHeartbeatRequest):
        return ConsumerGroupHeartbeatResponse(error_code=error)
    if isinstance(request, ShareGroupHeartbeatRequest):  # its records: share_group_records
        return ShareGroupHeartbeatResponse(error_code=error)
    if isinstance(request, ConsumerGroupDescribeRequest):
        return ConsumerGroupDescribeResponse(
            groups=[
                ConsumerGroupDescribeResponse.DescribedGroup(group_id=g, error_code=error)
                for g in request.group_ids
            ]
        )
    if isinstance(request, DeleteGroupsRequest):
        return DeleteGroupsResponse(
            results=[
                DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=error)
                for g in request.groups_names
            ]
        )
    raise TypeError(f"{type(request).__name__} is not a group coordinator request")


def txn_offset_commit_response(request: TxnOffsetCommitRequest, error: ErrorCode) -> TxnOffsetCommitResponse:
    """``error`` for every partition of the request, in request order."""
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )
