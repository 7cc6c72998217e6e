"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, deleted topics and offset expiry (Kafka's
``OffsetMetadataManager``).

Invariants:

- Offsets change only by replaying OffsetCommit records; every handler here validates, answers, and
  emits the records (which the shard replays at once), never touching the store directly.
- A commit with generation -1 and no member id (group-less consumers, admin tools) is accepted when
  the group is Empty or does not exist; a group that does not exist is then created as a "simple"
  group by the replay of the first offset record.
- A KIP-848 consumer group's members commit (OffsetCommit v9+) and fetch (OffsetFetch v9+) with their
  member epoch instead of a generation (STALE_MEMBER_EPOCH when it is not the current one).
- An offset without an explicit expire timestamp expires ``offsets.retention.minutes`` after its
  group became Empty (or after the commit, for simple groups and for stable consumer groups no
  longer subscribed to the topic); offsets of a topic a consumer group subscribes to never expire.
- Offsets of open transactions (TxnOffsetCommit, :mod:`tidelog.coordinator.group.txn_offsets`) are pending, not
  committed: OffsetFetch ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them, expiry keeps them
  and their group, OffsetDelete and DeleteGroups tombstone them too.
- Deleting a topic tombstones its committed and pending offsets in every group, whatever the group's
  state or subscription (Kafka's ``onPartitionsDeleted``), so neither the group nor a topic created
  later with the same name sees them again, live or after a reload.
"""

from __future__ import annotations

from collections.abc import Collection

from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.consumer_group import ConsumerGroup
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.offsets import OffsetAndMetadata, is_offset_expired
from tidelog.coordinator.group.records import OffsetCommitKey
from tidelog.coordinator.group.responses import offset_fetch_error_group, offset_fetch_response
from tidelog.coordinator.group.shard_state import ShardState
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

__all__ = ["INVALID_OFFSET", "OffsetManager"]

INVALID_OFFSET = -1
"""What OffsetFetch answers for a partition without a committed offset."""

_DEFAULT_RETENTION_TIME = -1
_DEFAULT_TIMESTAMP = -1
_S = ClassicGroupState

_FetchGroup = OffsetFetchRequest.OffsetFetchRequestGroup
_FetchedGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FetchedTopic = OffsetFetchResponse.OffsetFetchResponseTopics
_FetchedPartition = OffsetFetchResponse.OffsetFetchResponsePartitions


def _commit_response(request: OffsetCommitRequest, error: ErrorCode) -> OffsetCommitResponse:
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


def _fetched(
    partition: int, offset: OffsetAndMetadata | None, error: ErrorCode = ErrorCode.NONE
) -> _FetchedPartition:
    if offset is None or error != ErrorCode.NONE:
        return _FetchedPartition(
            partition_index=partition,
            committed_offset=INVALID_OFFSET,
            committed_leader_epoch=-1,
            metadata="",
            error_code=error,
        )
    return _FetchedPartition(
        partition_index=partition,
        committed_offset=offset.committed_offset,
        committed_leader_epoch=offset.leader_epoch,
        metadata=offset.metadata,
    )


class OffsetManager:
    def __init__(self, state: ShardState) -> None:
        self.s = state

    def has_pending_transactional_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an offset of the partition was committed by a still-open transaction."""
        return self.s.pending_offsets.has_pending(group_id, topic, partition)

    # -- OffsetCommit --------------------------------------------------------------------------------

    def _validate_commit(self, request: OffsetCommitRequest, api_version: int) -> ClassicGroup | None:
        """The classic group the commit goes to (``None``: it does not exist yet and the commit is
        group-less, or it goes to a consumer group)."""
        consumer_group = self.s.consumer_groups.get(request.group_id)
        if consumer_group is not None:
            consumer_group.validate_offset_commit(
                request.member_id, request.generation_id_or_member_epoch, api_version
            )
            return None
        group = self.s.groups.get(request.group_id)
        if group is None:
            if request.generation_id_or_member_epoch < 0:
                return None
            # From v9 a missing group is GROUP_ID_NOT_FOUND; before, ILLEGAL_GENERATION for compatibility.
            raise CoordinatorError(
                ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
            )
        group.validate_offset_commit(
            request.member_id, request.group_instance_id, request.generation_id_or_member_epoch
        )
        return group

    def commit_offsets(
        self, request: OffsetCommitRequest, api_version: int, *, now_ms: int
    ) -> tuple[OffsetCommitResponse, ClassicGroup | None]:
        """Validate and write the commit. Returns the response and the group whose member's session the
        commit refreshes (classic groups in Stable or PreparingRebalance), for the caller to reschedule."""
        if not request.group_id:
            return _commit_response(request, ErrorCode.INVALID_GROUP_ID), None
        try:
            group = self._validate_commit(request, api_version)
        except CoordinatorError as exc:
            return _commit_response(request, exc.error_code), None
        refresh = group if group is not None and group.state in (_S.STABLE, _S.PREPARING_REBALANCE) else None
        expire_timestamp_ms = (
            -1 if request.retention_time_ms == _DEFAULT_RETENTION_TIME else now_ms + request.retention_time_ms
        )
        max_metadata = self.s.config.offset_metadata_max_bytes
        response = OffsetCommitResponse()
        for topic in request.topics:
            topic_response = OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name)
            response.topics.append(topic_response)
            for p in topic.partitions:
                metadata = p.committed_metadata or ""
                if len(metadata) > max_metadata:
                    error = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    error = ErrorCode.NONE
                    offset = OffsetAndMetadata(
                        committed_offset=p.committed_offset,
                        leader_epoch=p.committed_leader_epoch,
                        metadata=metadata,
                        commit_timestamp_ms=now_ms
                        if p.commit_timestamp == _DEFAULT_TIMESTAMP
                        else p.commit_timestamp,
                        expire_timestamp_ms=expire_timestamp_ms,
                    )
                    key = OffsetCommitKey(
                        group=request.group_id, topic=topic.name, partition=p.partition_index
                    )
                    self.s.write(key, offset.to_record(), replay=True)
                topic_response.partitions.append(
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                )
        return response, refresh

    # -- OffsetFetch ---------------------------------------------------------------------------------

    def fetch_offsets(self, request: OffsetFetchRequest, api_version: int) -> OffsetFetchResponse:
        if api_version >= 8:
            groups = request.groups
        else:
            topics = None
            if request.topics is not None:
                topics = [
                    OffsetFetchRequest.OffsetFetchRequestTopics(
                        name=t.name, partition_indexes=t.partition_indexes
                    )
                    for t in request.topics
                ]
            groups = [_FetchGroup(group_id=request.group_id, topics=topics)]
        return offset_fetch_response(
            api_version, [self.fetch_group(g, request.require_stable) for g in groups]
        )

    def fetch_group(self, request: _FetchGroup, require_stable: bool) -> _FetchedGroup:
        """One group's offsets: those asked for, or all of them when ``topics`` is null."""
        if not request.group_id:
            return offset_fetch_error_group(request, ErrorCode.INVALID_GROUP_ID)
        group = self.s.groups.get(request.group_id)
        consumer_group = self.s.consumer_groups.get(request.group_id)
        if consumer_group is not None:
            try:
                consumer_group.validate_offset_fetch(request.member_id, request.member_epoch)
            except CoordinatorError as exc:
                return offset_fetch_error_group(request, exc.error_code)
        known = consumer_group is not None or (group is not None and not group.is_in_state(_S.DEAD))
        group_id = request.group_id
        topics: list[_FetchedTopic] = []
        if request.topics is None:
            if known:
                for name, partitions in self.s.offsets.group_offsets(group_id).items():
                    topics.append(
                        _FetchedTopic(
                            name=name,
                            partitions=[
                                self._fetched_partition(group_id, name, index, offset, require_stable)
                                for index, offset in partitions.items()
                            ],
                        )
                    )
        else:
            topics.extend(
                _FetchedTopic(
                    name=t.name,
                    partitions=[
                        self._fetched_partition(
                            group_id,
                            t.name,
                            index,
                            self.s.offsets.get(group_id, t.name, index) if known else None,
                            require_stable,
                        )
                        for index in t.partition_indexes
                    ],
                )
                for t in request.topics
            )
        return _FetchedGroup(group_id=group_id, topics=topics)

    def _fetched_partition(
        self,
        group_id: str,
        topic: str,
        partition: int,
        offset: OffsetAndMetadata | None,
        require_stable: bool,
    ) -> _FetchedPartition:
        if require_stable and self.has_pending_transactional_offsets(group_id, topic, partition):
            return _fetched(partition, None, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        return _fetched(partition, offset)

    # -- OffsetDelete --------------------------------------------------------------------------------

    def delete_offsets(self, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
        if not request.group_id:
            return OffsetDeleteResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        group: ClassicGroup | ConsumerGroup | None = self.s.consumer_groups.get(request.group_id)
        if group is None:
            group = self.s.groups.get(request.group_id)
        try:
            if group is None:
                raise CoordinatorError(ErrorCode.GROUP_ID_NOT_FOUND)
            group.validate_offset_delete()
        except CoordinatorError as exc:
            return OffsetDeleteResponse(error_code=exc.error_code)
        response = OffsetDeleteResponse()
        for topic in request.topics:
            subscribed = group.is_subscribed_to_topic(topic.name)
            partitions = []
            for p in topic.partitions:
                if subscribed:
                    error = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    error = ErrorCode.NONE
                    if self.s.offsets.get(request.group_id, topic.name, p.partition_index) is not None or (
                        self.has_pending_transactional_offsets(
                            request.group_id, topic.name, p.partition_index
                        )
                    ):
                        self._tombstone(request.group_id, topic.name, p.partition_index)
                partitions.append(
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                )
            response.topics.append(
                OffsetDeleteResponse.OffsetDeleteResponseTopic(name=topic.name, partitions=partitions)
            )
        return response

    def delete_all_offsets(self, group_id: str) -> int:
        """Tombstones for every offset of the group (DeleteGroups); returns how many were written."""
        return self._tombstone_offsets(group_id, None)

    def groups_with_offsets(self) -> list[str]:
        """Every group with a committed or pending offset (a snapshot, in the order of first commits)."""
        return list(dict.fromkeys([*self.s.offsets.group_ids(), *self.s.pending_offsets.group_ids()]))

    def has_offsets(self, group_id: str) -> bool:
        """Whether the group has a committed or pending offset."""
        return self.s.offsets.has_offsets(group_id) or self.s.pending_offsets.has_pending_group(group_id)

    def delete_topic_offsets(self, group_id: str, topics: Collection[str]) -> int:
        """Tombstones for the group's committed and pending offsets of ``topics`` (they were deleted:
        Kafka's ``onPartitionsDeleted``); returns how many. All partitions of a topic go, also those it
        never had, so a topic created again with the same name starts without committed offsets."""
        return self._tombstone_offsets(group_id, topics)

    def _tombstone_offsets(self, group_id: str, topics: Collection[str] | None) -> int:
        """Tombstones for the group's committed offsets of ``topics`` (None: all), then for its partitions
        of them that have only pending transactional offsets (one per partition); returns how many."""
        pending = [
            (topic, partition)
            for topic, partition in self.s.pending_offsets.pending_partitions(group_id)
            if topics is None or topic in topics
        ]
        count = 0
        for topic, partition, _ in self.s.offsets.iter_group(group_id):
            if topics is None or topic in topics:
                self._tombstone(group_id, topic, partition)
                count += 1
        for topic, partition in pending:
            if self.s.pending_offsets.has_pending(group_id, topic, partition):
                self._tombstone(group_id, topic, partition)
                count += 1
        return count

    def _tombstone(self, group_id: str, topic: str, partition: int) -> None:
        self.s.write(OffsetCommitKey(group=group_id, topic=topic, partition=partition), None, replay=True)

    # -- expiry --------------------------------------------------------------------------------------

    def cleanup_expired_offsets(self, group: ClassicGroup | ConsumerGroup, now_ms: int) -> bool:
        """Tombstone the group's expired offsets; True when it has none left (it may then be deleted)."""
        if not self.s.offsets.has_offsets(group.group_id):
            return not self.s.pending_offsets.has_pending_group(group.group_id)
        base = group.offset_expiration_base()
        if base is None:
            return False
        retention_ms = self.s.config.offsets_retention_ms
        all_expired = True
        for topic, partition, offset in self.s.offsets.iter_group(group.group_id):
            if group.is_subscribed_to_topic(topic):
                all_expired = False
            elif is_offset_expired(offset, base(offset), now_ms, retention_ms) and not (
                self.has_pending_transactional_offsets(group.group_id, topic, partition)
            ):
                self._tombstone(group.group_id, topic, partition)
            else:
                all_expired = False
        return all_expired
