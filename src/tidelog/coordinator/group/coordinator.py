"""The group coordinator of one broker: its shards, and the routing of requests to them.

This is the object the server runtime talks to (Kafka's ``GroupCoordinatorService``, minus the
threads: the runtime brings its own event loop and appends the records). A group lives on the shard
of ``partition_for(group_id, offsets.topic.num.partitions)``; a broker has a shard for each
``__consumer_offsets`` partition it leads.

Lifecycle of a partition: :meth:`begin_loading` (requests get COORDINATOR_LOAD_IN_PROGRESS), feed
every record of the partition's log to :meth:`replay` in order, :meth:`complete_loading`; later
:meth:`unload` when leadership moves or the broker stops. Requests for groups on partitions this
broker does not lead get NOT_COORDINATOR.

It has the entry points every coordinator has (:class:`~tidelog.coordinator.common.coordinator_protocol.
PartitionedCoordinator`), so a runtime can drive it as it drives the transaction coordinator; topics
(:meth:`GroupCoordinator.on_topics_deleted`, :meth:`GroupCoordinator.set_topics_image`) and offset expiry
are its own.

Invariants: pure (time comes in as ``now_ms``; randomness only for new member ids, through
``new_uuid``); every entry point returns a :class:`~tidelog.coordinator.common.result.CoordinatorResult`;
multi-group requests (OffsetFetch v8+, DescribeGroups, ConsumerGroupDescribe, ListGroups, DeleteGroups)
are split per shard and merged in request order, with per-group errors where the response has room for
them; a deleted topic's offsets are removed from every shard, a loading one's as soon as it is loaded.
KIP-848 consumer groups assign partitions of the topics in :attr:`GroupCoordinator.topics_image`, which
the runtime keeps current with :meth:`GroupCoordinator.set_topics_image`.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from tidelog.coordinator.common.coordinator_protocol import PartitionedCoordinator
from tidelog.coordinator.common.internal_topics import GROUP_METADATA_TOPIC_NAME
from tidelog.coordinator.common.partitioning import partition_for
from tidelog.coordinator.common.result import CoordinatorResult
from tidelog.coordinator.group.config import GroupCoordinatorConfig
from tidelog.coordinator.group.responses import (
    group_append_error_to_response_error,
    group_error_response,
    offset_fetch_error_group,
    offset_fetch_response,
)
from tidelog.coordinator.group.shard import GroupCoordinatorShard
from tidelog.coordinator.group.share_group_records import ShareGroupImage
from tidelog.coordinator.group.timers import TimerKey
from tidelog.coordinator.group.topics_image import TopicsImage
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from tidelog.protocol.records import NO_PRODUCER_ID
from tidelog.protocol.schema import Request, Response

__all__ = ["GROUP_COORDINATOR_REQUESTS", "GroupCoordinator"]

GROUP_COORDINATOR_REQUESTS: tuple[type[Request], ...] = (
    JoinGroupRequest,
    SyncGroupRequest,
    HeartbeatRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetDeleteRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    DeleteGroupsRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupDescribeRequest,
    TxnOffsetCommitRequest,
)
"""The requests :meth:`GroupCoordinator.handle` takes."""


class GroupCoordinator:
    def __init__(
        self, config: GroupCoordinatorConfig | None = None, *, new_uuid: Callable[[], UUID] = uuid.uuid4
    ) -> None:
        self.config = config or GroupCoordinatorConfig()
        self._new_uuid = new_uuid
        self._handle_ids = itertools.count(1)
        self._shards: dict[int, GroupCoordinatorShard] = {}
        self._topics_deleted_while_loading: dict[int, dict[str, None]] = {}
        """Per partition: topics deleted while its shard was loading, to delete offsets of once loaded."""
        self.topics_image = TopicsImage.EMPTY

    def set_topics_image(self, image: TopicsImage) -> None:
        """The cluster's topics changed (created, deleted, partitions added): consumer groups assign
        from ``image`` from now on (each group notices at its members' next heartbeat)."""
        self.topics_image = image
        for shard in self._shards.values():
            shard.consumer.topics = image

    # -- partitions ----------------------------------------------------------------------------------

    @property
    def topic_name(self) -> str:
        return GROUP_METADATA_TOPIC_NAME

    @property
    def num_partitions(self) -> int:
        return self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    @property
    def owned_partitions(self) -> list[int]:
        return sorted(self._shards)

    def shard(self, partition: int) -> GroupCoordinatorShard | None:
        return self._shards.get(partition)

    def is_loading(self, partition: int) -> bool:
        shard = self._shards.get(partition)
        return shard is not None and shard.loading

    def begin_loading(self, partition: int, coordinator_epoch: int = 0) -> GroupCoordinatorShard:
        """Become the coordinator of ``partition``: a fresh shard, loading until :meth:`complete_loading`.
        ``coordinator_epoch`` (the partition's leader epoch) is not used: no group record or response
        carries it."""
        del coordinator_epoch
        if partition in self._shards:
            raise RuntimeError(f"__consumer_offsets-{partition} is already owned")
        if not 0 <= partition < self.config.offsets_topic_num_partitions:
            raise ValueError(f"no __consumer_offsets partition {partition}")
        shard = GroupCoordinatorShard(
            partition, self.config, new_uuid=self._new_uuid, next_handle_id=lambda: next(self._handle_ids)
        )
        shard.consumer.topics = self.topics_image
        self._shards[partition] = shard
        return shard

    def replay(
        self,
        partition: int,
        key: bytes | memoryview,
        value: bytes | memoryview | None,
        producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        """Apply one record of ``partition``'s log while it loads (``producer_id``: its batch's, if the
        batch is transactional: a TxnOffsetCommit's offsets stay pending until the marker)."""
        self._shards[partition].replay(key, value, producer_id=producer_id)

    def replay_end_transaction_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` in ``partition``'s log (read while loading, or written
        live by the transaction coordinator): the producer's pending offsets there become committed or are
        dropped."""
        self._shards[partition].replay_end_transaction_marker(producer_id, committed)

    def complete_loading(self, partition: int, now_ms: int) -> CoordinatorResult[TimerKey]:
        """The partition is replayed: serve it, after deleting the offsets of topics deleted meanwhile."""
        shard = self._shards[partition]
        result = shard.complete_loading(now_ms)
        deleted = self._topics_deleted_while_loading.pop(partition, None)
        if deleted:
            result.merge(shard.on_topics_deleted(deleted))
        return result

    def unload(self, partition: int) -> CoordinatorResult[TimerKey]:
        """Stop coordinating ``partition``: its parked requests get NOT_COORDINATOR, its timers go."""
        shard = self._shards.pop(partition, None)
        return CoordinatorResult() if shard is None else shard.unload()

    def _route(self, group_id: str) -> GroupCoordinatorShard | ErrorCode:
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None:
            return ErrorCode.NOT_COORDINATOR
        if shard.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return shard

    # -- share groups (KIP-932: the share runtime runs them, this coordinator persists them) ----------

    def share_group_images(self, partition: int) -> dict[str, ShareGroupImage]:
        """The share groups persisted in loaded ``partition`` (empty if it is not loaded here)."""
        shard = self._shards.get(partition)
        return {} if shard is None or shard.loading else dict(shard.state.share_groups)

    def write_share_group(
        self, group_id: str, image: ShareGroupImage | None
    ) -> CoordinatorResult[TimerKey] | ErrorCode:
        """Persist ``group_id``'s share group as ``image`` (None: deleted); NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS where its partition is not served here."""
        shard = self._route(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        return shard.write_share_group(group_id, image)

    # -- requests ------------------------------------------------------------------------------------

    def handle(
        self, request: Request, api_version: int, *, now_ms: int, client_id: str = "", client_host: str = ""
    ) -> CoordinatorResult[TimerKey]:
        """Serve one group coordinator request (any version's body, with that version).

        ``client_id`` and ``client_host`` are the request header's client id and the peer's address
        (Kafka stores ``/<ip>``); JoinGroup records them for DescribeGroups."""
        if isinstance(request, OffsetFetchRequest) and api_version >= 8:
            return self._fetch_offsets_multi(request, api_version)
        if isinstance(request, DescribeGroupsRequest):
            return self._describe_groups(request)
        if isinstance(request, ListGroupsRequest):
            return self._list_groups(request)
        if isinstance(request, DeleteGroupsRequest):
            return self._delete_groups(request)
        if isinstance(request, ConsumerGroupDescribeRequest):
            return self._consumer_group_describe(request)
        if not isinstance(request, GROUP_COORDINATOR_REQUESTS):
            raise TypeError(f"{type(request).__name__} is not a group coordinator request")
        group_id: str = getattr(request, "group_id", "")
        if not group_id:
            return CoordinatorResult(
                response=group_error_response(request, api_version, ErrorCode.INVALID_GROUP_ID)
            )
        shard = self._route(group_id)
        if isinstance(shard, ErrorCode):
            return CoordinatorResult(response=group_error_response(request, api_version, shard))
        if isinstance(request, JoinGroupRequest):
            return shard.join_group(
                request, api_version, client_id=client_id, client_host=client_host, now_ms=now_ms
            )
        if isinstance(request, SyncGroupRequest):
            return shard.sync_group(request, api_version, now_ms=now_ms)
        if isinstance(request, ConsumerGroupHeartbeatRequest):
            return shard.consumer_group_heartbeat(
                request, api_version, client_id=client_id, client_host=client_host, now_ms=now_ms
            )
        if isinstance(request, HeartbeatRequest):
            return shard.heartbeat(request, now_ms=now_ms)
        if isinstance(request, LeaveGroupRequest):
            return shard.leave_group(request, api_version, now_ms=now_ms)
        if isinstance(request, OffsetCommitRequest):
            return shard.commit_offsets(request, api_version, now_ms=now_ms)
        if isinstance(request, TxnOffsetCommitRequest):
            return shard.txn_offset_commit(request, now_ms=now_ms)
        if isinstance(request, OffsetDeleteRequest):
            return shard.delete_offsets(request)
        assert isinstance(request, OffsetFetchRequest)
        fetched = shard.offset_manager.fetch_offsets(request, api_version)
        return CoordinatorResult(response=fetched)

    @staticmethod
    def error_response(request: Request, api_version: int, error: ErrorCode) -> Response:
        """Answer a whole group coordinator request with ``error`` (NOT_COORDINATOR, an append failure ...)."""
        return group_error_response(request, api_version, error)

    @staticmethod
    def append_error_to_response_error(error: ErrorCode) -> ErrorCode:
        """What the client is told when this coordinator's records could not be appended."""
        return group_append_error_to_response_error(error)

    def _fetch_offsets_multi(
        self, request: OffsetFetchRequest, api_version: int
    ) -> CoordinatorResult[TimerKey]:
        groups = []
        for group in request.groups:
            if not group.group_id:
                groups.append(offset_fetch_error_group(group, ErrorCode.INVALID_GROUP_ID))
                continue
            shard = self._route(group.group_id)
            if isinstance(shard, ErrorCode):
                groups.append(offset_fetch_error_group(group, shard))
            else:
                groups.append(shard.fetch_offsets(group, request.require_stable))
        return CoordinatorResult(response=offset_fetch_response(api_version, groups))

    def _describe_groups(self, request: DescribeGroupsRequest) -> CoordinatorResult[TimerKey]:
        described = []
        for group_id in request.groups:
            shard = self._route(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
            if isinstance(shard, ErrorCode):
                described.append(DescribeGroupsResponse.DescribedGroup(group_id=group_id, error_code=shard))
            else:
                described.append(shard.describe_group(group_id))
        return CoordinatorResult(response=DescribeGroupsResponse(groups=described))

    def _consumer_group_describe(self, request: ConsumerGroupDescribeRequest) -> CoordinatorResult[TimerKey]:
        described = []
        for group_id in request.group_ids:
            shard = self._route(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
            if isinstance(shard, ErrorCode):
                described.append(
                    ConsumerGroupDescribeResponse.DescribedGroup(group_id=group_id, error_code=shard)
                )
            else:
                described.append(shard.consumer_group_describe(group_id))
        return CoordinatorResult(response=ConsumerGroupDescribeResponse(groups=described))

    def _list_groups(self, request: ListGroupsRequest) -> CoordinatorResult[TimerKey]:
        error = ErrorCode.NONE
        listed = []
        for partition in sorted(self._shards):
            shard = self._shards[partition]
            if shard.loading:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            listed.extend(shard.list_groups(request.states_filter, request.types_filter))
        return CoordinatorResult(response=ListGroupsResponse(error_code=error, groups=listed))

    def _delete_groups(self, request: DeleteGroupsRequest) -> CoordinatorResult[TimerKey]:
        result: CoordinatorResult[TimerKey] = CoordinatorResult()
        by_group: dict[str, DeleteGroupsResponse.DeletableGroupResult] = {}
        by_shard: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(request.groups_names):
            shard = self._route(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
            if isinstance(shard, ErrorCode):
                by_group[group_id] = DeleteGroupsResponse.DeletableGroupResult(
                    group_id=group_id, error_code=shard
                )
            else:
                by_shard.setdefault(shard.partition, []).append(group_id)
        for partition, group_ids in by_shard.items():
            results, shard_result = self._shards[partition].delete_groups(group_ids)
            by_group.update((r.group_id, r) for r in results)
            result.merge(shard_result)
        result.response = DeleteGroupsResponse(
            results=[by_group[g] for g in dict.fromkeys(request.groups_names)]
        )
        return result

    # -- topics --------------------------------------------------------------------------------------

    def on_topics_deleted(self, topics: Iterable[str]) -> CoordinatorResult[TimerKey]:
        """Topics were deleted (Kafka's ``onPartitionsDeleted``): every loaded shard tombstones their
        committed and pending offsets in all its groups and deletes the Empty groups this leaves without
        offsets. A loading shard does it when :meth:`complete_loading` is called, before it serves any
        request (also across an unload and reload of the partition)."""
        names = list(dict.fromkeys(topics))
        result: CoordinatorResult[TimerKey] = CoordinatorResult()
        for partition in sorted(self._shards):
            shard = self._shards[partition]
            if shard.loading:
                self._topics_deleted_while_loading.setdefault(partition, {}).update(dict.fromkeys(names))
            else:
                result.merge(shard.on_topics_deleted(names))
        return result

    # -- time ----------------------------------------------------------------------------------------

    def on_timeout(self, key: TimerKey, now_ms: int) -> CoordinatorResult[TimerKey]:
        """A timer the coordinator asked for has fired."""
        shard = self._shards.get(key.partition)
        return CoordinatorResult() if shard is None else shard.on_timeout(key, now_ms)

    def expire_offsets(self, now_ms: int) -> CoordinatorResult[TimerKey]:
        """Run offset/group expiry on every loaded shard now (it also runs by itself on its timer)."""
        result: CoordinatorResult[TimerKey] = CoordinatorResult()
        for partition in sorted(self._shards):
            shard = self._shards[partition]
            if not shard.loading:
                result.merge(shard.expire_offsets(now_ms))
        return result


if TYPE_CHECKING:

    def _is_a_partitioned_coordinator(coordinator: GroupCoordinator) -> PartitionedCoordinator[TimerKey]:
        """mypy checks here that a runtime can drive :class:`GroupCoordinator` through the protocol."""
        return coordinator
