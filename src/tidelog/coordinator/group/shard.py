"""The coordinator of one ``__consumer_offsets`` partition (Kafka's ``GroupCoordinatorShard``).

A shard owns the groups that hash to its partition and their offsets. It is created *loading*: the
runtime feeds it every record of the partition with :meth:`GroupCoordinatorShard.replay`, then calls
:meth:`complete_loading`; requests before that are answered COORDINATOR_LOAD_IN_PROGRESS by
:class:`~tidelog.coordinator.group.coordinator.GroupCoordinator`. Every method that changes anything
returns a :class:`~tidelog.coordinator.common.result.CoordinatorResult`.

Invariants: pure (no clock, no I/O: ``now_ms`` comes in); single-threaded; one call at a time (the
runtime serialises events per shard); requests reach a loaded shard only; after :meth:`unload` the
shard answers nothing and holds no timers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from uuid import UUID

from tidelog.coordinator.common.result import CoordinatorResult, DeferredResponse
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.classic_protocol import ClassicGroupManager
from tidelog.coordinator.group.config import GroupCoordinatorConfig
from tidelog.coordinator.group.consumer_group import ConsumerGroup
from tidelog.coordinator.group.consumer_protocol import ConsumerGroupManager
from tidelog.coordinator.group.errors import CoordinatorError
from tidelog.coordinator.group.offset_manager import OffsetManager
from tidelog.coordinator.group.records import GroupMetadataKey, decode_key, decode_value
from tidelog.coordinator.group.responses import join_group_response
from tidelog.coordinator.group.shard_state import ShardState
from tidelog.coordinator.group.share_group_records import ShareGroupImage, share_group_records
from tidelog.coordinator.group.timers import JoinTimer, MemberRebalanceTimer, SyncTimer, TimerKey, TimerKind
from tidelog.coordinator.group.txn_offset_commit import commit_transactional_offsets
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from tidelog.protocol.records import NO_PRODUCER_ID

__all__ = ["GroupCoordinatorShard"]

_S = ClassicGroupState


class GroupCoordinatorShard:
    def __init__(
        self,
        partition: int,
        config: GroupCoordinatorConfig,
        *,
        new_uuid: Callable[[], UUID],
        next_handle_id: Callable[[], int],
    ) -> None:
        self.state = ShardState(partition, config, new_uuid=new_uuid, next_handle_id=next_handle_id)
        self.classic = ClassicGroupManager(self.state)
        self.consumer = ConsumerGroupManager(self.state, new_uuid=new_uuid)
        self.offset_manager = OffsetManager(self.state)
        self.loading = True

    @property
    def partition(self) -> int:
        return self.state.partition

    # -- loading -------------------------------------------------------------------------------------

    def replay(
        self, key: bytes | memoryview, value: bytes | memoryview | None, *, producer_id: int = NO_PRODUCER_ID
    ) -> None:
        """Apply one record of the partition's log (in log order; ``producer_id`` of its batch)."""
        if not self.loading:
            raise RuntimeError(
                f"partition {self.partition} is loaded: live records are applied by the shard itself"
            )
        decoded_key = decode_key(key)
        self.state.replay(decoded_key, decode_value(decoded_key, value), producer_id=producer_id)

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        """A transaction marker in the partition (loading, or live when the transaction coordinator wrote
        it): that producer's pending offsets become committed (COMMIT) or are dropped (ABORT)."""
        self.state.replay_end_transaction_marker(producer_id, committed)

    def complete_loading(self, now_ms: int) -> CoordinatorResult[TimerKey]:
        """The whole partition has been replayed: start serving, arm heartbeats and the expiry job."""
        self.state.begin()
        self.loading = False
        self.classic.r.on_loaded(now_ms)
        self.consumer.on_loaded(now_ms)
        self._schedule_expiration(now_ms)
        return self.state.finish()

    def unload(self) -> CoordinatorResult[TimerKey]:
        """The partition moves away (or the broker stops): answer parked requests, drop all timers."""
        self.state.begin()
        self.classic.r.on_unloaded()
        for key in list(self.state.timers):
            self.state.cancel(key)
        self.loading = True
        return self.state.finish()

    def _schedule_expiration(self, now_ms: int) -> None:
        interval = self.state.config.offsets_retention_check_interval_ms
        self.state.schedule(self.state.timer_key(TimerKind.GROUP_EXPIRATION), now_ms + interval)

    # -- single-group requests -----------------------------------------------------------------------

    def join_group(
        self, request: JoinGroupRequest, api_version: int, *, client_id: str, client_host: str, now_ms: int
    ) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        consumer_group = self.state.consumer_groups.get(request.group_id)
        response: JoinGroupResponse | DeferredResponse
        if request.group_id in self.state.share_groups or (
            consumer_group is not None and not consumer_group.is_empty
        ):
            # A classic member cannot join a KIP-848 consumer group (no online migration) nor a share group.
            response = join_group_response(
                api_version, error=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id
            )
        else:
            if consumer_group is not None:
                # An Empty consumer group makes way for the classic group (its offsets stay).
                self.consumer.delete_group(consumer_group)
            response = self.classic.join_group(
                request, api_version, client_id=client_id, client_host=client_host, now_ms=now_ms
            )
        result = self.state.finish()
        result.response = response
        return result

    def sync_group(
        self, request: SyncGroupRequest, api_version: int, *, now_ms: int
    ) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        response = self.classic.sync_group(request, api_version, now_ms=now_ms)
        result = self.state.finish()
        result.response = response
        return result

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        response = self.classic.heartbeat(request, now_ms=now_ms)
        result = self.state.finish()
        result.response = response
        return result

    def leave_group(
        self, request: LeaveGroupRequest, api_version: int, *, now_ms: int
    ) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        response = self.classic.leave_group(request, api_version, now_ms=now_ms)
        result = self.state.finish()
        result.response = response
        return result

    def commit_offsets(
        self, request: OffsetCommitRequest, api_version: int, *, now_ms: int
    ) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        response, refresh = self.offset_manager.commit_offsets(request, api_version, now_ms=now_ms)
        if refresh is not None:
            # A classic member committing offsets is alive: the commit counts as a heartbeat.
            self.classic.r.reschedule_heartbeat(refresh, refresh.member(request.member_id), now_ms)
        result = self.state.finish()
        result.response = response
        return result

    def txn_offset_commit(
        self, request: TxnOffsetCommitRequest, *, now_ms: int
    ) -> CoordinatorResult[TimerKey]:
        """TxnOffsetCommit: the records returned belong in a transactional batch of ``request.producer_id``;
        the offsets stay pending until the transaction's marker."""
        self.state.begin()
        response = commit_transactional_offsets(self.state, request, now_ms=now_ms)
        result = self.state.finish()
        result.response = response
        return result

    def consumer_group_heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        api_version: int,
        *,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        response = self.consumer.heartbeat(
            request, api_version, client_id=client_id, client_host=client_host, now_ms=now_ms
        )
        result = self.state.finish()
        result.response = response
        return result

    def write_share_group(self, group_id: str, image: ShareGroupImage | None) -> CoordinatorResult[TimerKey]:
        """The share runtime changed ``group_id``'s share group to ``image`` (None: deleted it): the records
        that take the persisted image there, applied at once (:mod:`.share_group_records`)."""
        self.state.begin()
        for key, value in share_group_records(self.state.share_groups.get(group_id), image):
            self.state.write(key, value, replay=True)
        return self.state.finish()

    def delete_offsets(self, request: OffsetDeleteRequest) -> CoordinatorResult[TimerKey]:
        self.state.begin()
        response = self.offset_manager.delete_offsets(request)
        result = self.state.finish()
        result.response = response
        return result

    # -- parts of multi-group requests (read-only unless said) ---------------------------------------

    def fetch_offsets(
        self, group: OffsetFetchRequest.OffsetFetchRequestGroup, require_stable: bool
    ) -> OffsetFetchResponse.OffsetFetchResponseGroup:
        return self.offset_manager.fetch_group(group, require_stable)

    def describe_group(self, group_id: str) -> DescribeGroupsResponse.DescribedGroup:
        group = self.state.groups.get(group_id)
        if group is None:
            return DescribeGroupsResponse.DescribedGroup(group_id=group_id, group_state=_S.DEAD.value)
        if group.is_in_state(_S.STABLE):
            members = [m.describe(group.protocol_name) for m in group.members.values()]
            protocol_data = group.protocol_name or ""
        else:
            members = [m.describe_no_metadata() for m in group.members.values()]
            protocol_data = ""
        return DescribeGroupsResponse.DescribedGroup(
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=protocol_data,
            members=members,
        )

    def consumer_group_describe(self, group_id: str) -> ConsumerGroupDescribeResponse.DescribedGroup:
        return self.consumer.describe(group_id)

    def list_groups(
        self, states_filter: Iterable[str], types_filter: Iterable[str]
    ) -> list[ListGroupsResponse.ListedGroup]:
        """Groups matching both filters (case-insensitive; an empty filter matches everything)."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        groups: list[ClassicGroup | ConsumerGroup] = [
            *self.state.groups.values(),
            *self.state.consumer_groups.values(),
        ]
        return [
            group.as_listed_group()
            for group in groups
            if (not states or group.is_in_states(states)) and (not types or group.group_type.value in types)
        ]

    def delete_groups(
        self, group_ids: Iterable[str]
    ) -> tuple[list[DeleteGroupsResponse.DeletableGroupResult], CoordinatorResult[TimerKey]]:
        """Delete Empty groups: tombstones for all their offsets, then for the group itself."""
        self.state.begin()
        results = []
        for group_id in group_ids:
            error = ErrorCode.NONE
            try:
                consumer_group = self.state.consumer_groups.get(group_id)
                if consumer_group is not None:
                    consumer_group.validate_delete_group()
                    self.offset_manager.delete_all_offsets(group_id)
                    self.consumer.delete_group(consumer_group)
                else:
                    group = self.state.groups.get(group_id)
                    if group is None:
                        raise CoordinatorError(ErrorCode.GROUP_ID_NOT_FOUND)
                    group.validate_delete_group()
                    self.offset_manager.delete_all_offsets(group_id)
                    self.state.write(GroupMetadataKey(group=group_id), None, replay=True)
            except CoordinatorError as exc:
                error = exc.error_code
            results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error))
        return results, self.state.finish()

    # -- time ----------------------------------------------------------------------------------------

    def on_timeout(self, key: TimerKey, now_ms: int) -> CoordinatorResult[TimerKey]:
        """A timer this shard scheduled has fired (stale or early firings are ignored)."""
        self.state.begin()
        timer = self.state.pop_due_timer(key, now_ms)
        if timer is not None and not self.loading:
            if key.kind is TimerKind.HEARTBEAT:
                self.classic.r.on_heartbeat_expired(key.group_id, key.member_id, now_ms)
            elif key.kind is TimerKind.JOIN:
                assert isinstance(timer.payload, JoinTimer)
                self.classic.r.on_join_timer(key.group_id, timer.payload, now_ms)
            elif key.kind is TimerKind.SYNC:
                assert isinstance(timer.payload, SyncTimer)
                self.classic.r.on_sync_timer(key.group_id, timer.payload, now_ms)
            elif key.kind is TimerKind.CONSUMER_SESSION:
                self.consumer.on_session_expired(key.group_id, key.member_id)
            elif key.kind is TimerKind.CONSUMER_REBALANCE:
                assert isinstance(timer.payload, MemberRebalanceTimer)
                self.consumer.on_rebalance_timeout(key.group_id, key.member_id, timer.payload)
            else:
                self._expire(now_ms)
                self._schedule_expiration(now_ms)
        return self.state.finish()

    def expire_offsets(self, now_ms: int) -> CoordinatorResult[TimerKey]:
        """Kafka's ``cleanupGroupMetadata``: tombstone expired offsets, then delete Empty groups left
        without offsets. Runs by itself every ``offsets.retention.check.interval.ms``."""
        self.state.begin()
        self._expire(now_ms)
        return self.state.finish()

    def _expire(self, now_ms: int) -> None:
        groups: list[ClassicGroup | ConsumerGroup] = [
            *self.state.groups.values(),
            *self.state.consumer_groups.values(),
        ]
        for group in groups:
            if self.offset_manager.cleanup_expired_offsets(group, now_ms):
                self._delete_if_empty(group)

    def on_topics_deleted(self, topics: Collection[str]) -> CoordinatorResult[TimerKey]:
        """Kafka's ``onPartitionsDeleted``: tombstones for every committed and pending offset of the deleted
        ``topics`` in every group; a group this leaves Empty without offsets is deleted (Dead, tombstoned)."""
        self.state.begin()
        for group_id in self.offset_manager.groups_with_offsets():
            if not self.offset_manager.delete_topic_offsets(group_id, topics):
                continue
            group: ClassicGroup | ConsumerGroup | None = self.state.consumer_groups.get(group_id)
            if group is None:
                group = self.state.groups.get(group_id)
            if group is not None and not self.offset_manager.has_offsets(group_id):
                self._delete_if_empty(group)
        return self.state.finish()

    def _delete_if_empty(self, group: ClassicGroup | ConsumerGroup) -> None:
        """Delete a group left without offsets if it has no members: the end of Kafka's
        ``cleanupGroupMetadata`` (a classic group becomes Dead by its tombstone)."""
        if isinstance(group, ConsumerGroup):
            if group.is_empty:
                self.consumer.delete_group(group)
        elif group.is_in_state(_S.EMPTY):
            self.state.write(GroupMetadataKey(group=group.group_id), None, replay=True)
