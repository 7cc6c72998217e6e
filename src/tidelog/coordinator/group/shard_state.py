"""Everything one ``__consumer_offsets`` partition's coordinator holds, and the one way records change it.

A shard's state is its groups (classic and KIP-848 consumer groups, which never share an id), its
committed offsets and the timers it asked for. The durable part (offsets, groups' existence, the
membership of loaded groups, everything about consumer groups) changes only in :meth:`ShardState.replay`,
which is fed either by loading (every record of the partition, in log order) or, live, by
:meth:`ShardState.write` for the records the shard itself emits. Records are replayed live exactly as
Kafka's runtime replays them: offset commits and all tombstones at once; a ``GroupMetadataValue``
is only a snapshot of a live group (Kafka appends it with ``replayRecords=false``: the live group
object is the authority for a classic group's in-flight rebalance, which no record describes), so
it is applied when loading only. Consumer-group records (types 3-8) describe the whole group and are
always replayed (:mod:`tidelog.coordinator.group.consumer_group_replay`), and so are share-group records
(types 9-15, into :attr:`ShardState.share_groups`, :mod:`tidelog.coordinator.group.share_group_records`).

Invariants:

- While a call is being handled, ``out`` collects its result; :meth:`begin` / :meth:`finish` bracket
  every public entry point of the shard.
- ``timers`` holds exactly the timers this shard scheduled and has not cancelled or fired; every
  schedule/cancel here is also emitted in ``out.timers``.
- Replaying a shard's own emitted records, in order, into an empty shard reproduces its durable
  state: the same offsets, and every group that is Stable or Empty with the same generation,
  protocol, leader, members and assignments (tested by property).
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from tidelog.coordinator.common.records import CoordinatorRecord
from tidelog.coordinator.common.result import CancelTimer, CoordinatorResult, DeferredResponse, ScheduleTimer
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.classic_group_member import ClassicGroupMember
from tidelog.coordinator.group.classic_group_state import ClassicGroupState
from tidelog.coordinator.group.config import GroupCoordinatorConfig
from tidelog.coordinator.group.consumer_group import ConsumerGroup
from tidelog.coordinator.group.consumer_group_replay import replay_consumer_group_record
from tidelog.coordinator.group.offsets import OffsetAndMetadata, OffsetStore
from tidelog.coordinator.group.records import (
    ConsumerGroupRecordKey,
    ConsumerGroupRecordValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
    encode_key,
    encode_value,
)
from tidelog.coordinator.group.share_group_records import (
    ShareGroupImage,
    ShareGroupRecordValue,
    replay_share_group_record,
)
from tidelog.coordinator.group.timers import (
    JoinTimer,
    MemberRebalanceTimer,
    PendingTimer,
    SyncTimer,
    TimerKey,
    TimerKind,
)
from tidelog.coordinator.group.txn_offsets import PendingTransactionalOffsets
from tidelog.protocol.records import NO_PRODUCER_ID
from tidelog.protocol.schema import Response

__all__ = ["ShardState"]


class ShardState:
    def __init__(
        self,
        partition: int,
        config: GroupCoordinatorConfig,
        *,
        new_uuid: Callable[[], UUID],
        next_handle_id: Callable[[], int],
    ) -> None:
        self.partition = partition
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.share_groups: dict[str, ShareGroupImage] = {}
        """KIP-932 share groups' durable part (the live groups are the share runtime's)."""
        self.offsets = OffsetStore()
        self.pending_offsets = PendingTransactionalOffsets()
        """Offsets of open transactions (TxnOffsetCommit), by producer, until their markers."""
        self.timers: dict[TimerKey, PendingTimer] = {}
        self.out: CoordinatorResult[TimerKey] = CoordinatorResult()
        self._new_uuid = new_uuid
        self._next_handle_id = next_handle_id

    # -- call bracket --------------------------------------------------------------------------------

    def begin(self) -> None:
        self.out = CoordinatorResult()

    def finish(self) -> CoordinatorResult[TimerKey]:
        out, self.out = self.out, CoordinatorResult()
        return out

    # -- outputs -------------------------------------------------------------------------------------

    def timer_key(self, kind: TimerKind, group_id: str = "", member_id: str = "") -> TimerKey:
        return TimerKey(kind, self.partition, group_id, member_id)

    def schedule(
        self,
        key: TimerKey,
        deadline_ms: int,
        payload: JoinTimer | SyncTimer | MemberRebalanceTimer | None = None,
    ) -> None:
        self.timers[key] = PendingTimer(deadline_ms, payload)
        self.out.timers.append(ScheduleTimer(key, deadline_ms))

    def cancel(self, key: TimerKey) -> None:
        if self.timers.pop(key, None) is not None:
            self.out.timers.append(CancelTimer(key))

    def cancel_group_timers(self, group_id: str) -> None:
        for key in [
            k for k in self.timers if k.group_id == group_id and k.kind is not TimerKind.GROUP_EXPIRATION
        ]:
            self.cancel(key)

    def pop_due_timer(self, key: TimerKey, now_ms: int) -> PendingTimer | None:
        """The timer for ``key`` if it is still scheduled and due (a stale firing gets ``None``)."""
        timer = self.timers.get(key)
        if timer is None or timer.deadline_ms > now_ms:
            return None
        del self.timers[key]
        return timer

    def complete(self, handle: DeferredResponse | None, response: Response) -> None:
        if handle is not None:
            self.out.completions.append((handle, response))

    def new_handle(self, api_key: int, api_version: int, group_id: str, member_id: str) -> DeferredResponse:
        return DeferredResponse(self._next_handle_id(), api_key, api_version, group_id, member_id)

    def new_member_id(self, prefix: str) -> str:
        """Kafka's member ids: ``<client id or group instance id>-<random UUID>``."""
        return f"{prefix}-{self._new_uuid()}"

    def write(
        self, key: RecordKey, value: RecordValue | None, *, replay: bool, producer_id: int = NO_PRODUCER_ID
    ) -> None:
        """Emit a record for this partition; ``replay`` applies it to this shard at once (as a record of
        ``producer_id``'s transaction if one is given: TxnOffsetCommit)."""
        encoded = encode_key(key), (None if value is None else encode_value(value))
        self.out.records.setdefault(self.partition, []).append(CoordinatorRecord(*encoded))
        if replay:
            self.replay(key, value, producer_id=producer_id)

    # -- replay --------------------------------------------------------------------------------------

    def replay(self, key: RecordKey, value: RecordValue | None, *, producer_id: int = NO_PRODUCER_ID) -> None:
        """Apply one decoded record. ``producer_id`` is the batch's: an offset record of a transaction
        (TxnOffsetCommit) stays pending until that producer's end marker (:meth:`replay_end_transaction_marker`);
        other record types ignore it, as in Kafka."""
        if isinstance(key, OffsetCommitKey):
            if value is None:
                self.offsets.remove(key.group, key.topic, key.partition)
                self.pending_offsets.on_tombstone(key.group, key.topic, key.partition)
            else:
                assert isinstance(value, OffsetCommitValue)
                if key.group not in self.groups and key.group not in self.consumer_groups:
                    # Offsets committed without group membership: Kafka keeps a "simple" classic group.
                    self.groups[key.group] = ClassicGroup(key.group)
                offset = OffsetAndMetadata.from_record(value)
                if producer_id == NO_PRODUCER_ID:
                    self.offsets.put(key.group, key.topic, key.partition, offset)
                    self.pending_offsets.on_committed(key.group, key.topic, key.partition)
                else:
                    self.pending_offsets.add(producer_id, key.group, key.topic, key.partition, offset)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.remove_group(key.group)
            else:
                assert isinstance(value, GroupMetadataValue)
                self.load_group(key, value)
        elif isinstance(key, ConsumerGroupRecordKey):
            assert value is None or isinstance(value, ConsumerGroupRecordValue)
            replay_consumer_group_record(self.groups, self.consumer_groups, key, value)
        else:
            assert value is None or isinstance(value, ShareGroupRecordValue)
            replay_share_group_record(self.share_groups, key, value)

    def replay_end_transaction_marker(self, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` landed in this partition: its pending transactional
        offsets become committed or are dropped."""
        for group_id in self.pending_offsets.complete(producer_id, committed, self.offsets):
            if group_id not in self.groups and group_id not in self.consumer_groups:
                self.groups[group_id] = ClassicGroup(group_id)

    def load_group(self, key: GroupMetadataKey, value: GroupMetadataValue) -> None:
        """Rebuild a group from its metadata record: Stable with its members, or Empty without."""
        group = ClassicGroup(
            key.group,
            ClassicGroupState.STABLE if value.members else ClassicGroupState.EMPTY,
            current_state_timestamp=None
            if value.current_state_timestamp == -1
            else value.current_state_timestamp,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            group.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.session_timeout
                    if m.rebalance_timeout == -1
                    else m.rebalance_timeout,
                    session_timeout_ms=m.session_timeout,
                    protocol_type=value.protocol_type,
                    supported_protocols=((value.protocol or "", bytes(m.subscription)),),
                    assignment=bytes(m.assignment),
                )
            )
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[key.group] = group

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.previous_state, group.state = group.state, ClassicGroupState.DEAD
            self.cancel_group_timers(group_id)
