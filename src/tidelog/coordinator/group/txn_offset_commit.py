"""TxnOffsetCommit in one ``__consumer_offsets`` shard (Kafka's ``OffsetMetadataManager.commitTransactionalOffset``).

The request's offsets are written as ordinary OffsetCommit records in a transactional batch of
``request.producer_id`` and replayed at once, which makes them *pending* offsets of that producer
(:mod:`tidelog.coordinator.group.txn_offsets`) until its transaction's marker.

Invariant: validation is Kafka's for TxnOffsetCommit: member id, generation and instance id are checked
only when one of them is given (versions before 3 carry none: accepted in every group state); a group
that does not exist accepts generation -1 (a simple group is created by the replay) and refuses others
with ILLEGAL_GENERATION; a KIP-848 member's stale epoch is ILLEGAL_GENERATION. A refused request writes
nothing.
"""

from __future__ import annotations

from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.consumer_group import ConsumerGroup
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.offsets import OffsetAndMetadata
from tidelog.coordinator.group.records import OffsetCommitKey
from tidelog.coordinator.group.responses import txn_offset_commit_response
from tidelog.coordinator.group.shard_state import ShardState
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

__all__ = ["commit_transactional_offsets", "validate_transactional_commit"]


def validate_transactional_commit(
    request: TxnOffsetCommitRequest, classic: ClassicGroup | None, consumer: ConsumerGroup | None
) -> None:
    """Kafka's ``validateTransactionalOffsetCommit`` for the group the request names (a classic group, a
    KIP-848 consumer group, or neither when it does not exist)."""
    generation_id, member_id, instance_id = (
        request.generation_id,
        request.member_id,
        request.group_instance_id,
    )
    if consumer is not None:
        if generation_id < 0 and not consumer.members:
            return
        if generation_id < 0 and not member_id and instance_id is None:
            return  # TxnOffsetCommit needs no member fields: checked only when given
        member = consumer.members.get(member_id)
        if member is None:
            raise CoordinatorError(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation_id != member.member_epoch:
            raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)  # a stale member epoch, as Kafka maps it
        return
    if classic is not None:
        classic.validate_offset_commit(member_id, instance_id, generation_id, is_transactional=True)
        return
    if generation_id >= 0:
        raise CoordinatorError(ErrorCode.ILLEGAL_GENERATION)


def commit_transactional_offsets(
    state: ShardState, request: TxnOffsetCommitRequest, *, now_ms: int
) -> TxnOffsetCommitResponse:
    """Validate a TxnOffsetCommit and emit its offset records, replayed at once as pending offsets of
    ``request.producer_id`` (the runtime appends them in a transactional batch of that producer)."""
    if not request.group_id:
        return txn_offset_commit_response(request, ErrorCode.INVALID_GROUP_ID)
    try:
        validate_transactional_commit(
            request, state.groups.get(request.group_id), state.consumer_groups.get(request.group_id)
        )
    except CoordinatorError as exc:
        return txn_offset_commit_response(request, exc.error_code)
    max_metadata = state.config.offset_metadata_max_bytes
    response = TxnOffsetCommitResponse()
    for topic in request.topics:
        topic_response = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=topic.name)
        response.topics.append(topic_response)
        for p in topic.partitions:
            metadata = p.committed_metadata or ""
            error = ErrorCode.NONE
            if len(metadata) > max_metadata:
                error = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                offset = OffsetAndMetadata(
                    committed_offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch,
                    metadata=metadata,
                    commit_timestamp_ms=now_ms,
                    expire_timestamp_ms=-1,
                )
                key = OffsetCommitKey(group=request.group_id, topic=topic.name, partition=p.partition_index)
                state.write(key, offset.to_record(), replay=True, producer_id=request.producer_id)
            topic_response.partitions.append(
                TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=error
                )
            )
    return response
