"""Share groups (KIP-932) on this broker: ShareGroupHeartbeat, ShareFetch, ShareAcknowledge and
ShareGroupDescribe over the pure :mod:`tidelog.coordinator.share` state.

Invariants:
- Each (group, topic, partition) has one :class:`~tidelog.coordinator.share.share_partition.SharePartition`,
  created at the first ShareFetch that names it, starting at the log start offset (group config
  ``share.auto.offset.reset=earliest``) or at the high watermark (``latest``, Kafka's default).
- A ShareFetch first applies its piggy-backed acknowledgements, then acquires: it reads whole batches from
  the first acquirable offset (below the high watermark, or the last stable offset under
  ``share.isolation.level=read_committed``) and acquires only offsets inside what it read, so every
  acquired record travels in the response; the client keeps the records inside ``AcquiredRecords``.
  What records new to the window need before they join it (delivery times, skipped ranges, batch ends)
  is worked out from the bytes read, or taken from the scan of those same batches made after the
  member's previous fetch was answered (:mod:`tidelog.server.share_admission`, read_uncommitted only).
- With nothing to acquire and ``MaxWaitMs`` > 0, the fetch waits in the fetch purgatory on its partitions:
  an append, or a release by another member, completes it; lock expiry is seen when its wait ends.
- Share sessions (per group and member): epoch 0 opens one (replacing any), -1 closes it and releases the
  member's records, any other epoch must be the next one (INVALID_SHARE_SESSION_EPOCH; none open:
  SHARE_SESSION_NOT_FOUND).
- Lock expiry and member sessions are checked lazily, with the clock's ``now_ms``, on every request that
  touches the partition or the group; a fenced or departed member's records are released at once, and
  that release is written at once (below) whatever request saw it, a heartbeat or a describe too: not
  left for the next ShareFetch, which a failover or a restart of the share-partition's leader may forestall
  (the delivery it counts would be lost, letting a poison record past ``share.delivery.count.limit``).
- Group configs come from the injected ``group_configs`` lookup (group id → keys explicitly set for it),
  read at each request, over the broker's ``group.share.*`` configs.

- Durable (given a :class:`~tidelog.server.share_persister.ShareStateStore`: the broker's
  :class:`~tidelog.server.share_state_runtime.ShareStateRuntime`, in a cluster the
  :class:`~tidelog.server.share_persister.SharePersister`): a share-partition
  met for the first time is read from ``__share_group_state`` (ReadShareGroupState); after every request,
  each share-partition it touched whose persisted view (start offset, state batches: acknowledged,
  archived, available with delivery counts; acquisitions are not persisted) changed is written
  (WriteShareGroupState), and the request is answered only after those writes are committed. So an
  acknowledgement a client was told succeeded survives a crash; an acquisition does not need to.
- Membership (given a :class:`~tidelog.server.share_membership.ShareMembership`): every change of a share
  group is written to ``__consumer_offsets``, and a heartbeat is answered once what it changed is committed
  there (a member fenced on the way is written at once, with no answer waiting for it); a group deleted is
  tombstoned (its DeleteGroups answered once that is committed), and the groups of a coordinator partition are adopted from it once it is
  loaded (:meth:`ShareRuntime.on_coordinator_partition`); while it loads, heartbeats are
  COORDINATOR_LOAD_IN_PROGRESS.
- State epochs (Kafka's): a share-partition is written with the state epoch it was read with. A write
  refused with FENCED_STATE_EPOCH (an administrator reset or deleted the group's state at the share
  coordinator, possibly through another broker, since this leader read it) drops the share-partition from
  memory (:meth:`ShareRuntime._fenced`) and fails its request (a client is not told that what it
  acknowledged is persisted; an admin reset or delete needs a group without members, so nothing acquired
  is lost: a later member's acquisitions from the stale window are simply forgotten); the next request
  reads the new state.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tidelog.coordinator.share.acquire_mode import batch_last_offsets
from tidelog.coordinator.share.config import ShareBrokerDefaults, ShareGroupSettings, resolve_settings
from tidelog.coordinator.share.share_group import ShareGroup
from tidelog.coordinator.share.share_partition import AcquiredRange, RecordState, SharePartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from tidelog.protocol.schema import Response
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.clock import Clock
from tidelog.server.config import BrokerConfig
from tidelog.server.dispatch import Answer, RequestContext
from tidelog.server.fetch_purgatory import FetchPurgatory, PredicateWait
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.regions import RegionList
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.share_admission import ReadAhead, admission, scan
from tidelog.server.share_dead_letter import ShareDeadLetters
from tidelog.server.share_persister import ShareStateFencedError, ShareStateStore

if TYPE_CHECKING:
    from tidelog.coordinator.group.share_group_records import ShareGroupImage
    from tidelog.server.share_membership import ShareMembership

__all__ = ["GroupConfigLookup", "ShareRuntime", "no_group_configs", "share_defaults"]

GroupConfigLookup = Callable[[str], Mapping[str, str]]
"""Group id → the group configs explicitly set for it (Kafka's key names)."""

_EMPTY = b""
_ZERO_UUID = uuid.UUID(int=0)
_SHARE_KEY = tuple[str, str, int]
_NOT_SERVED = (
    ErrorCode.INVALID_GROUP_ID,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
)
"""Heartbeat errors before the group was looked at: nothing of it to persist."""


def no_group_configs(_group_id: str) -> Mapping[str, str]:
    """No group sets anything: every group runs with the broker's defaults."""
    return {}


def share_defaults(config: BrokerConfig) -> ShareBrokerDefaults:
    return ShareBrokerDefaults(
        record_lock_duration_ms=config.group_share_record_lock_duration_ms,
        min_record_lock_duration_ms=config.group_share_min_record_lock_duration_ms,
        max_record_lock_duration_ms=config.group_share_max_record_lock_duration_ms,
        delivery_count_limit=config.group_share_delivery_count_limit,
        partition_max_record_locks=config.group_share_partition_max_record_locks,
        session_timeout_ms=config.group_share_session_timeout_ms,
        heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        max_size=config.group_share_max_size,
    )


@dataclass(slots=True)
class _Session:
    epoch: int
    """The epoch the next request must carry."""
    partitions: dict[tuple[uuid.UUID, int], None] = field(default_factory=dict)
    """The session's partitions, in the order they were named."""
    left_at_ms: int | None = None
    """When its member left the group (a leave heartbeat) while the session was open: the session stays
    for the client's final ShareAcknowledge / ShareFetch (epoch -1), whose acknowledgements apply before the
    rest of its records are released; a session not closed within the group's session timeout is closed
    (and its records released) by the next heartbeat of the group."""


@dataclass(slots=True)
class _Acquired:
    topic: str
    partition: int
    ranges: list[AcquiredRange]
    records: object


class ShareRuntime:
    """Share groups, their share-partitions and share sessions."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        purgatory: FetchPurgatory,
        clock: Clock,
        defaults: ShareBrokerDefaults,
        group_configs: GroupConfigLookup = no_group_configs,
        state: ShareStateStore | None = None,
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._purgatory = purgatory
        self._clock = clock
        self.defaults = defaults
        self.group_configs = group_configs
        """The group-config lookup; the group-config store is plugged in here (see broker.py)."""
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[_SHARE_KEY, SharePartition] = {}
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._state = state
        self._membership: ShareMembership | None = None
        self._persisted: dict[_SHARE_KEY, tuple[int, list[tuple[int, int, int, int]]]] = {}
        """Per share-partition: the view last written to (or read from) ``__share_group_state``."""
        self._touched: set[_SHARE_KEY] = set()
        self._state_epochs: dict[_SHARE_KEY, int] = {}
        """Per share-partition: the state epoch its state was read with, and is written with."""
        self._wakeups: dict[tuple[str, int], int] = {}
        """Per (topic, partition): the time a wake-up is scheduled for."""
        self._ahead: dict[_SHARE_KEY, ReadAhead] = {}
        """Per share-partition: the batches after its window, scanned for its next fetch (share_admission)."""
        self._settings: dict[str, tuple[ShareBrokerDefaults, dict[str, str], ShareGroupSettings]] = {}
        """Per group: the defaults and group configs its settings were last resolved from, and those."""
        self.dead_letters = ShareDeadLetters(
            replicas=replicas,
            metadata=metadata,
            clock=clock,
            settings=self.settings,
            persist=self._persist_now,
            lookup=self.partitions.get,
        )
        """KIP-1191: copies REJECTed and delivery-limit records onto the group's dead-letter topic."""

    # -- settings and state ------------------------------------------------------------------------------

    def settings(self, group_id: str) -> ShareGroupSettings:
        """The group's settings: its group configs (looked up at every call) over :attr:`defaults`, resolved
        again only when either changed (a ShareFetch asks several times; resolving costs more than comparing)."""
        keys = self.group_configs(group_id)
        cached = self._settings.get(group_id)
        if cached is not None and cached[0] is self.defaults and cached[1] == keys:
            return cached[2]
        settings = resolve_settings(keys, self.defaults)
        self._settings[group_id] = (self.defaults, dict(keys), settings)
        return settings

    def _share_partition(
        self, group_id: str, topic: str, index: int, settings: ShareGroupSettings
    ) -> SharePartition | ErrorCode:
        partition = self._replicas.leader_partition(topic, index)
        if isinstance(partition, ErrorCode):
            return partition
        key = (group_id, topic, index)
        sp = self.partitions.get(key)
        if sp is None:
            loaded = self._read_state(group_id, topic, index)
            if isinstance(loaded, ErrorCode):
                return loaded
            if loaded is None:
                start = self._reset_offset(partition, settings)
                sp = SharePartition(start)
            else:
                sp = SharePartition(loaded[0])
                sp.load(loaded[0], loaded[1])
                self._persisted[key] = (sp.start_offset, sp.state_batches())
                self._defer_loaded(sp, partition)
            self.partitions[key] = sp
        self._touched.add(key)
        sp.max_record_locks = settings.max_record_locks
        sp.delivery_count_limit = settings.delivery_count_limit
        sp.backoff = settings.backoff
        sp.dead_letter = settings.dead_letter_topic is not None
        if partition.log_start_offset > sp.start_offset:
            sp.move_start(partition.log_start_offset)
        return sp

    def _reset_offset(self, partition: Partition, settings: ShareGroupSettings) -> int:
        """Where a share-partition without state starts (``share.auto.offset.reset``)."""
        if settings.auto_offset_reset == "earliest":
            return partition.log_start_offset
        if settings.auto_offset_reset == "by_duration":
            found = partition.offset_for_timestamp(self._clock.now_ms() - settings.reset_duration_ms)
            if found is not None:
                return max(min(found.offset, partition.high_watermark), partition.log_start_offset)
        return partition.high_watermark

    def set_state_store(self, state: ShareStateStore) -> None:
        """Where share-partition state is read and written (issue 13 cluster hook: a
        :class:`~tidelog.server.share_persister.SharePersister` in a cluster)."""
        self._state = state

    def set_membership(self, membership: ShareMembership) -> None:
        """Where share groups' membership is persisted (``__consumer_offsets``, through the group runtime)."""
        self._membership = membership
        membership.listen(self.on_coordinator_partition)

    def on_coordinator_partition(self, partition: int, images: Mapping[str, ShareGroupImage] | None) -> None:
        """``__consumer_offsets-partition`` was loaded here (``images``: its share groups, adopted with their
        members' sessions starting now) or began loading or went away (None: its groups are dropped)."""
        assert self._membership is not None
        for group_id in [g for g in self.groups if self._membership.partition_for(g) == partition]:
            del self.groups[group_id]
        if images is None:
            return
        now = self._clock.now_ms()
        for group_id, image in images.items():
            self.groups[group_id] = ShareGroup.restore(image, self._metadata.topic_name, now)

    def _topic_id(self, name: str) -> uuid.UUID | None:
        info = self._metadata.topic(name)
        return None if info is None else info.topic_id

    def _persist(self, group_id: str, group: ShareGroup | None) -> None:
        """Write ``group_id``'s share group (None: deleted) to ``__consumer_offsets``, if it changed (a fenced
        member, a deleted group: no request waits for it)."""
        if self._membership is not None:
            self._membership.write(group_id, None if group is None else group.image(self._topic_id))

    def session_partitions(self, group_id: str, member_id: str) -> list[tuple[uuid.UUID, int]]:
        """The partitions of the member's open share session (issue 13 cluster hook: loaded first)."""
        session = self._sessions.get((group_id, member_id))
        return list(session.partitions) if session is not None else []

    def drop_partition(self, topic: str, index: int) -> None:
        """Forget every group's share-partition of ``topic-index`` (issue 13 cluster hook, see
        :mod:`tidelog.server.share_routing`: its leadership moved; its next leader loads it from
        ``__share_group_state``); fetches waiting on it are woken."""
        for key in [k for k in self.partitions if k[1] == topic and k[2] == index]:
            del self.partitions[key]
            self._persisted.pop(key, None)
            self._touched.discard(key)
            self._state_epochs.pop(key, None)
            self._ahead.pop(key, None)
        self._purgatory.on_append((topic, index))

    def _defer_loaded(self, sp: SharePartition, partition: Partition) -> None:
        """A loaded window's never-delivered records get their delivery times back from their headers."""
        now = self._clock.now_ms()
        for first, last in [
            (r.first, r.last) for r in sp.ranges if r.state is RecordState.AVAILABLE and r.delivery_count == 0
        ]:
            pos = first
            while pos <= last:
                try:
                    data = partition.read(
                        pos, 1 << 20, isolation=FetchIsolation.HIGH_WATERMARK, min_one_batch=True
                    )
                except KafkaProtocolError:
                    break
                if not data.regions or data.next_offset <= pos:
                    break
                delays, _ = admission(data.read_bytes(), pos, min(data.next_offset, last + 1), now, [])
                for offset, due in delays:
                    sp.defer(offset, due)
                pos = data.next_offset

    def _release_member(self, group_id: str, member_id: str) -> None:
        now = self._clock.now_ms()
        released = []
        for (group, topic, index), sp in self.partitions.items():
            if group == group_id and any(r.member_id == member_id for r in sp.acquired()):
                sp.release_member(member_id, now)
                released.append((topic, index))
                self._touched.add((group, topic, index))
        for key in released:
            self._purgatory.on_append(key)

    def _expire_members(self, group: ShareGroup) -> None:
        now = self._clock.now_ms()
        timeout = self.settings(group.group_id).session_timeout_ms
        gone = group.expire(now, timeout)
        for member_id in gone:
            self._sessions.pop((group.group_id, member_id), None)
            self._release_member(group.group_id, member_id)
        if gone:
            self._persist(group.group_id, group)
        for (group_id, member_id), session in list(self._sessions.items()):
            if (
                group_id == group.group_id
                and session.left_at_ms is not None
                and now - session.left_at_ms > timeout
            ):
                self._close_session(group_id, member_id)

    def _member_left(self, group_id: str, member_id: str) -> None:
        """A leave heartbeat. Kafka's share-partition leaders release a member's records when its share
        session closes, not when it leaves the group: librdkafka may leave first and then send its final
        acknowledgements (epoch -1), which must still find the session and the records it holds."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            self._release_member(group_id, member_id)
        elif session.left_at_ms is None:
            session.left_at_ms = self._clock.now_ms()

    def expired_group(self, group_id: str) -> ShareGroup | None:
        """``group_id``'s share group after fencing the members whose session ran out (None: no such group)."""
        group = self.groups.get(group_id)
        if group is not None:
            self._expire_members(group)
            self._flush()  # their releases
        return group

    def forget(self, group_id: str, topics: set[str] | None = None) -> Answer | None:
        """Drop what this runtime holds in memory for ``group_id``'s share-partitions (of ``topics``; all of
        them, and the group and its sessions, when None): the admin side (:mod:`.share_admin`) rewrote or
        deleted their persisted state, which the next ShareFetch reads afresh. A group dropped is deleted in
        ``__consumer_offsets`` too: the answer of that write (committed), for the deleting request to await
        (None: no group, or no membership to write to)."""
        written: Answer | None = None
        for key in [k for k in self.partitions if k[0] == group_id and (topics is None or k[1] in topics)]:
            del self.partitions[key]
            self._persisted.pop(key, None)
            self._touched.discard(key)
            self._state_epochs.pop(key, None)
            self._ahead.pop(key, None)
        if topics is None:
            if self.groups.pop(group_id, None) is not None and self._membership is not None:
                written = self._membership.delete(group_id)
            self._settings.pop(group_id, None)
            for session in [k for k in self._sessions if k[0] == group_id]:
                del self._sessions[session]
        return written

    # -- persistence -------------------------------------------------------------------------------------

    def _read_state(
        self, group_id: str, topic: str, index: int
    ) -> tuple[int, list[tuple[int, int, int, int]]] | ErrorCode | None:
        """The persisted (start offset, state batches) of a share-partition, None if it has none."""
        info = self._metadata.topic(topic)
        if self._state is None or info is None:
            return None
        if self._state.ensure_topic() is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        request = ReadShareGroupStateRequest(
            group_id=group_id,
            topics=[
                ReadShareGroupStateRequest.ReadStateData(
                    topic_id=info.topic_id,
                    partitions=[ReadShareGroupStateRequest.PartitionData(partition=index)],
                )
            ],
        )
        answer = self._state.handle_request(request, 0)
        if not isinstance(answer, ReadShareGroupStateResponse):
            _discard(answer)
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # waits for a commit (cluster): asked again later
        result = answer.results[0].partitions[0]
        if result.error_code != ErrorCode.NONE:
            return ErrorCode(result.error_code)
        self._state_epochs[(group_id, topic, index)] = result.state_epoch  # written with (fencing)
        if result.start_offset < 0:
            return None
        return result.start_offset, [
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in result.state_batches
        ]

    def _flush(self) -> list[Awaitable[Response]]:
        """Write every touched share-partition whose persisted view changed; the writes not yet committed."""
        touched, self._touched = self._touched, set()
        for key in touched:  # dead letters: copied once this state is written (see share_dead_letter)
            self.dead_letters.changed(key, self.partitions.get(key))
        if self._state is None:
            return []
        waits: list[Awaitable[Response]] = []
        for key in sorted(touched):
            sp = self.partitions.get(key)
            info = self._metadata.topic(key[1])
            if sp is None or info is None:
                continue
            view = (sp.start_offset, sp.state_batches())
            if self._persisted.get(key) == view:
                continue
            self._persisted[key] = view
            request = WriteShareGroupStateRequest(
                group_id=key[0],
                topics=[
                    WriteShareGroupStateRequest.WriteStateData(
                        topic_id=info.topic_id,
                        partitions=[
                            WriteShareGroupStateRequest.PartitionData(
                                partition=key[2],
                                state_epoch=self._state_epochs.get(key, 0),
                                start_offset=view[0],
                                state_batches=[
                                    WriteShareGroupStateRequest.StateBatch(
                                        first_offset=f, last_offset=last, delivery_state=st, delivery_count=c
                                    )
                                    for f, last, st, c in view[1]
                                ],
                            )
                        ],
                    )
                ],
            )
            answer = self._state.handle_request(request, 0)
            if isinstance(answer, asyncio.Future):
                answer.add_done_callback(functools.partial(self._fenced, key, sp))
            elif _fenced_now(answer):
                self._fenced(key, sp, None)
            if inspect.isawaitable(answer):
                waits.append(answer)
        return waits

    def _fenced(self, key: _SHARE_KEY, sp: SharePartition, done: asyncio.Future[Response] | None) -> None:
        """Drop ``sp`` (``key``'s share-partition) if its write was refused with FENCED_STATE_EPOCH (issue 13
        hook: an admin reset or delete at the share coordinator); the next request reloads it."""
        if done is not None and (done.cancelled() or not isinstance(done.exception(), ShareStateFencedError)):
            return
        if self.partitions.get(key) is sp:
            del self.partitions[key]
            self._persisted.pop(key, None)
            self._touched.discard(key)
            self._state_epochs.pop(key, None)
            self._ahead.pop(key, None)
            self._purgatory.on_append((key[1], key[2]))

    def _persist_now(self, key: _SHARE_KEY) -> list[Awaitable[Response]]:
        """Write ``key``'s state now if it changed (for the dead-letter writer); the commits to await."""
        self._touched.add(key)
        return self._flush()

    def _answer(self, response: Response) -> Answer:
        """``response`` once this request's state writes are committed."""
        waits = self._flush()
        if not waits:
            return response

        async def after() -> Response:
            await asyncio.gather(*waits)
            return response

        return after()

    def _scan_ahead_soon(self, key: _SHARE_KEY, max_bytes: int, max_records: int) -> None:
        """Scan the batches after ``key``'s window for its next fetch (:mod:`.share_admission`) once this
        fetch's answer is on its way: two loop turns later (the connection's writer is woken by the answer
        and runs first). Without a running loop (driven in process) nothing is scheduled."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon(loop.call_soon, self._scan_ahead, key, max_bytes, max_records)

    def _scan_ahead(self, key: _SHARE_KEY, max_bytes: int, max_records: int) -> None:
        """Read and scan what ``key``'s next fetch would read from its window's end, if the member fetches
        ``max_records`` and ``max_bytes`` again; the result waits in ``_ahead`` for that fetch."""
        sp = self.partitions.get(key)
        partition = self._replicas.leader_partition(key[1], key[2])
        if sp is None or isinstance(partition, ErrorCode):
            return
        first = sp.end_offset
        end = partition.fetchable_offset(FetchIsolation.HIGH_WATERMARK)
        if first >= end or self.settings(key[0]).read_committed:
            return
        try:
            data = partition.read(
                first,
                max_bytes,
                isolation=FetchIsolation.HIGH_WATERMARK,
                min_one_batch=True,
                max_offset=first + max_records,
            )
            if not data.regions:
                return
            raw = data.read_bytes()
        except (KafkaProtocolError, OSError, EOFError, ValueError):
            return  # the fetch reads it again and meets the error itself (ValueError: a file closed at shutdown)
        admitted = scan(raw, first, data.next_offset, min(data.next_offset, end), self._clock.now_ms())
        self._ahead[key] = ReadAhead(end, max_bytes, first + max_records, data, admitted)

    def _wake_at(self, sp: SharePartition, topic: str, index: int, now_ms: int) -> None:
        """Wake the fetches waiting on (topic, index) when its next lock expires or record becomes
        available (backoff, deliver-at time): a delayed operation on the fetch purgatory's timing wheel."""
        due = sp.next_deadline()
        key = (topic, index)
        if due is None or (key in self._wakeups and self._wakeups[key] <= due):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # driven in process without a loop (tests): the next fetch sees the time
        self._wakeups[key] = due

        def fired(_future: object) -> None:
            if self._wakeups.get(key) == due:
                del self._wakeups[key]
            self._purgatory.on_append(key)

        wakeup = self._purgatory.delay(
            PredicateWait([("share-wakeup", topic, index)], lambda: False),
            max(due - now_ms, 0) + 1,
            lambda: None,
        )
        wakeup.add_done_callback(fired)

    # -- ShareGroupHeartbeat -----------------------------------------------------------------------------

    def heartbeat(self, ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> Answer:
        """ShareGroupHeartbeat, answered once the group's change is in ``__consumer_offsets`` (committed, in a
        cluster)."""
        response = self._heartbeat(ctx, request)
        self._flush()  # fenced or departed members' releases: written now, the answer depends on none of them
        group = self.groups.get(request.group_id)
        if self._membership is None or group is None or response.error_code in _NOT_SERVED:
            return response
        return self._membership.write(group.group_id, group.image(self._topic_id), request, response)

    def _heartbeat(
        self, ctx: RequestContext, request: ShareGroupHeartbeatRequest
    ) -> ShareGroupHeartbeatResponse:
        if not request.group_id:
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        if self._membership is not None:
            ready = self._membership.ready(request.group_id)
            if ready != ErrorCode.NONE:
                return ShareGroupHeartbeatResponse(error_code=ready)
        group = self.groups.setdefault(request.group_id, ShareGroup(request.group_id))
        self._expire_members(group)
        partitions_of = {t.name: t.num_partitions for t in self._metadata.topics() if not t.is_internal}
        result = group.heartbeat(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            subscribed=request.subscribed_topic_names,
            rack_id=request.rack_id,
            client_id=ctx.client_id or "",
            client_host=ctx.client_host,
            now_ms=self._clock.now_ms(),
            partitions_of=partitions_of,
            new_member_id=lambda: str(uuid.uuid4()),
            max_size=self.defaults.max_size,
        )
        if result.left is not None:
            self._member_left(group.group_id, result.left)
            return ShareGroupHeartbeatResponse(member_id=result.left, member_epoch=-1)
        member = result.member
        if result.error != ErrorCode.NONE or member is None:
            return ShareGroupHeartbeatResponse(error_code=result.error)
        assignment = ShareGroupHeartbeatResponse.Assignment()
        for topic, partitions in sorted(member.assignment.items()):
            info = self._metadata.topic(topic)
            if info is not None:
                assignment.topic_partitions.append(
                    ShareGroupHeartbeatResponse.TopicPartitions(
                        topic_id=info.topic_id, partitions=list(partitions)
                    )
                )
        return ShareGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.settings(group.group_id).heartbeat_interval_ms,
            assignment=assignment,
        )

    # -- ShareGroupDescribe ------------------------------------------------------------------------------

    def describe(self, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
        response = self._describe(request)
        self._flush()  # fenced members' releases: nothing in the answer depends on them
        return response

    def _describe(self, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
        response = ShareGroupDescribeResponse()
        for group_id in request.group_ids:
            group = self.groups.get(group_id)
            if group is None:
                loading = self._membership is not None and self._membership.loading(group_id)
                response.groups.append(
                    ShareGroupDescribeResponse.DescribedGroup(
                        group_id=group_id,
                        error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                        if loading
                        else ErrorCode.GROUP_ID_NOT_FOUND,
                        group_state="" if loading else "Dead",
                    )
                )
                continue
            self._expire_members(group)
            described = ShareGroupDescribeResponse.DescribedGroup(
                group_id=group_id,
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.group_epoch,
                assignor_name="simple",
            )
            for member in group.members.values():
                assignment = ShareGroupDescribeResponse.Assignment()
                for topic, partitions in sorted(member.assignment.items()):
                    info = self._metadata.topic(topic)
                    assignment.topic_partitions.append(
                        ShareGroupDescribeResponse.TopicPartitions(
                            topic_id=info.topic_id if info else _ZERO_UUID,
                            topic_name=topic,
                            partitions=list(partitions),
                        )
                    )
                described.members.append(
                    ShareGroupDescribeResponse.Member(
                        member_id=member.member_id,
                        rack_id=member.rack_id,
                        member_epoch=member.member_epoch,
                        client_id=member.client_id,
                        client_host=member.client_host,
                        subscribed_topic_names=list(member.subscribed),
                        assignment=assignment,
                    )
                )
            response.groups.append(described)
        return response

    # -- acknowledgements --------------------------------------------------------------------------------

    def _acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        index: int,
        batches: list[ShareFetchRequest.AcknowledgementBatch]
        | list[ShareAcknowledgeRequest.AcknowledgementBatch],
        settings: ShareGroupSettings,
    ) -> ErrorCode:
        sp = self._share_partition(group_id, topic, index, settings)
        if isinstance(sp, ErrorCode):
            return sp
        now = self._clock.now_ms()
        sp.expire_locks(now)
        error = ErrorCode.NONE
        for batch in batches:
            answer, _archived = sp.acknowledge(
                member_id, batch.first_offset, batch.last_offset, batch.acknowledge_types, now
            )
            if answer != ErrorCode.NONE and error == ErrorCode.NONE:
                error = answer
        if batches:
            self._purgatory.on_append((topic, index))
        return error

    def acknowledge(self, request: ShareAcknowledgeRequest) -> Answer:
        return self._answer(self._acknowledge_request(request))

    def _acknowledge_request(self, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
        group_id, member_id = request.group_id or "", request.member_id or ""
        session_error = self._advance_session(
            group_id, member_id, request.share_session_epoch, acknowledge_only=True
        )
        if session_error != ErrorCode.NONE:
            return ShareAcknowledgeResponse(error_code=session_error)
        settings = self.settings(group_id)
        response = ShareAcknowledgeResponse()
        for topic in request.topics:
            name = self._metadata.topic_name(topic.topic_id)
            result = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse(topic_id=topic.topic_id)
            for p in topic.partitions:
                error = (
                    ErrorCode.UNKNOWN_TOPIC_ID
                    if name is None
                    else self._acknowledge(
                        group_id, member_id, name, p.partition_index, p.acknowledgement_batches, settings
                    )
                )
                result.partitions.append(
                    ShareAcknowledgeResponse.PartitionData(
                        partition_index=p.partition_index, error_code=error
                    )
                )
            response.responses.append(result)
        if request.share_session_epoch == -1:
            self._close_session(group_id, member_id)
        return response

    # -- share sessions ----------------------------------------------------------------------------------

    def _advance_session(
        self, group_id: str, member_id: str, epoch: int, *, acknowledge_only: bool = False
    ) -> ErrorCode:
        key = (group_id, member_id)
        if epoch == 0:
            if acknowledge_only:
                return ErrorCode.INVALID_SHARE_SESSION_EPOCH
            self._sessions[key] = _Session(epoch=1)
            return ErrorCode.NONE
        session = self._sessions.get(key)
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch == -1:
            return ErrorCode.NONE
        if epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        session.epoch = epoch + 1 if epoch < 0x7FFFFFFF else 1
        return ErrorCode.NONE

    def _close_session(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)
        self._release_member(group_id, member_id)

    # -- ShareFetch --------------------------------------------------------------------------------------

    def fetch(self, request: ShareFetchRequest) -> Answer:
        answer = self._fetch(request)
        if isinstance(answer, ShareFetchResponse):
            return self._answer(answer)
        waits = self._flush()  # the acknowledgements applied before the wait
        if not waits:
            return answer

        async def after() -> Response:
            await asyncio.gather(*waits)
            return await answer

        return after()

    def _fetch(self, request: ShareFetchRequest) -> ShareFetchResponse | asyncio.Future[ShareFetchResponse]:
        group_id, member_id = request.group_id or "", request.member_id or ""
        if not group_id or not member_id:
            return ShareFetchResponse(error_code=ErrorCode.INVALID_REQUEST)
        group = self.groups.get(group_id)
        if group is not None:
            self._expire_members(group)
        epoch = request.share_session_epoch
        session_error = self._advance_session(group_id, member_id, epoch)
        if session_error != ErrorCode.NONE:
            return ShareFetchResponse(error_code=session_error)
        settings = self.settings(group_id)
        lock_ms = settings.record_lock_duration_ms
        ack_errors: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        for topic in request.topics:
            name = self._metadata.topic_name(topic.topic_id)
            for p in topic.partitions:
                if p.acknowledgement_batches:
                    ack_errors[(topic.topic_id, p.partition_index)] = (
                        ErrorCode.UNKNOWN_TOPIC_ID
                        if name is None
                        else self._acknowledge(
                            group_id, member_id, name, p.partition_index, p.acknowledgement_batches, settings
                        )
                    )
        if epoch == -1:
            self._close_session(group_id, member_id)
            return self._response(request, ack_errors, [], {}, lock_ms)
        session = self._sessions[(group_id, member_id)]
        for topic in request.topics:
            for p in topic.partitions:
                session.partitions[(topic.topic_id, p.partition_index)] = None
        for forgotten in request.forgotten_topics_data:
            for index in forgotten.partitions:
                session.partitions.pop((forgotten.topic_id, index), None)
        wanted = list(session.partitions)
        errors: dict[tuple[uuid.UUID, int], ErrorCode] = {}

        def acquire() -> list[tuple[uuid.UUID, _Acquired]]:
            return self._acquire(group_id, member_id, wanted, request, settings, errors)

        acquired = acquire()
        if acquired or request.max_wait_ms <= 0 or errors:
            return self._response(request, ack_errors, acquired, errors, lock_ms)
        held: list[list[tuple[uuid.UUID, _Acquired]]] = []

        def enough() -> bool:
            got = acquire()
            if got:
                held.append(got)
            return bool(got) or bool(errors)

        def build() -> ShareFetchResponse:
            got = held[0] if held else acquire()
            self._flush()  # lock expiries seen on the way: the answer depends on none of them
            return self._response(request, ack_errors, got, errors, lock_ms)

        keys = []
        for topic_id, index in wanted:
            name = self._metadata.topic_name(topic_id)
            if name is not None:
                keys.append((name, index))
        return self._purgatory.delay(PredicateWait(keys, enough), request.max_wait_ms, build)

    def _acquire(
        self,
        group_id: str,
        member_id: str,
        wanted: list[tuple[uuid.UUID, int]],
        request: ShareFetchRequest,
        settings: ShareGroupSettings,
        errors: dict[tuple[uuid.UUID, int], ErrorCode],
    ) -> list[tuple[uuid.UUID, _Acquired]]:
        now = self._clock.now_ms()
        budget_records = request.max_records if request.max_records > 0 else 500
        budget_bytes = max(request.max_bytes, 1)
        isolation = FetchIsolation.TXN_COMMITTED if settings.read_committed else FetchIsolation.HIGH_WATERMARK
        out: list[tuple[uuid.UUID, _Acquired]] = []
        for topic_id, index in wanted:
            if budget_records <= 0 or budget_bytes <= 0:
                break
            name = self._metadata.topic_name(topic_id)
            if name is None:
                errors[(topic_id, index)] = ErrorCode.UNKNOWN_TOPIC_ID
                continue
            sp = self._share_partition(group_id, name, index, settings)
            if isinstance(sp, ErrorCode):
                errors[(topic_id, index)] = sp
                continue
            partition = self._replicas.leader_partition(name, index)
            if isinstance(partition, ErrorCode):
                errors[(topic_id, index)] = partition
                continue
            end = partition.fetchable_offset(isolation)
            sp.expire_locks(now)
            first = sp.next_acquirable(now, end)
            key = (group_id, name, index)
            ahead = self._ahead.pop(key, None)
            if first is None:
                continue
            # no further than the records this fetch may take: the batches are sent, and new ones decoded
            cap = max(first, sp.end_offset) + budget_records
            if (
                ahead is not None
                and not settings.read_committed
                and not out
                and ahead.same_read(first, end, budget_bytes, cap)
            ):
                data = ahead.data  # read after the member's last fetch, exactly as this read would
            else:
                try:
                    data = partition.read(
                        first, budget_bytes, isolation=isolation, min_one_batch=not out, max_offset=cap
                    )
                except KafkaProtocolError as exc:
                    errors[(topic_id, index)] = ErrorCode(exc.error_code)
                    continue
            if not data.regions:
                continue
            upto = min(data.next_offset, end)
            scanned = (
                ahead.admission.covering(first, data.next_offset, upto)
                if ahead is not None and first == sp.end_offset and not settings.read_committed
                else None
            )
            delays: list[tuple[int, int]] = []
            skip: list[tuple[int, int]] = []
            batch_ends: Sequence[int] = ()
            if scanned is not None:  # scanned ahead, after the member's last fetch (see share_admission)
                delays, skip, batch_ends = scanned
            else:
                read_bytes = data.read_bytes() if sp.end_offset < upto or not settings.record_limit else b""
                if sp.end_offset < upto:
                    aborted = (
                        partition.aborted_transactions(sp.end_offset, upto) if settings.read_committed else []
                    )
                    delays, skip = admission(read_bytes, sp.end_offset, upto, now, aborted)
                batch_ends = batch_last_offsets(read_bytes)
            # share.acquire.mode (KIP-1206): batch_optimized rounds the record budget up to a batch's end
            if settings.record_limit:
                batch_ends = ()
            window_end = sp.end_offset
            ranges = sp.acquire(
                member_id,
                budget_records,
                upto,
                now,
                settings.record_lock_duration_ms,
                delays,
                skip,
                batch_ends,
            )
            self._wake_at(sp, name, index, now)
            if not ranges:
                continue
            if sp.end_offset > window_end and not settings.read_committed:
                self._scan_ahead_soon(key, budget_bytes, budget_records)
            stop = ranges[-1].last_offset + 1
            # send no batch after the last acquired one: read again only if it ends before the first read's
            # limit (the usual fetch acquires up to ``cap``, and that read is the one it would repeat)
            if stop < data.next_offset and stop < cap:
                data = partition.read(
                    first,
                    budget_bytes,
                    isolation=isolation,
                    min_one_batch=not out,
                    max_offset=stop,
                )
            budget_records -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
            budget_bytes -= data.nbytes
            regions = data.regions
            records = regions[0] if len(regions) == 1 else RegionList(list(regions))
            out.append((topic_id, _Acquired(name, index, ranges, records)))
        return out

    def _response(
        self,
        request: ShareFetchRequest,
        ack_errors: dict[tuple[uuid.UUID, int], ErrorCode],
        acquired: list[tuple[uuid.UUID, _Acquired]],
        errors: dict[tuple[uuid.UUID, int], ErrorCode],
        lock_ms: int,
    ) -> ShareFetchResponse:
        parts: dict[tuple[uuid.UUID, int], ShareFetchResponse.PartitionData] = {}

        def part(topic_id: uuid.UUID, index: int) -> ShareFetchResponse.PartitionData:
            found = parts.get((topic_id, index))
            if found is None:
                found = ShareFetchResponse.PartitionData(partition_index=index, records=_EMPTY)
                parts[(topic_id, index)] = found
            return found

        for topic in request.topics:
            for p in topic.partitions:
                part(topic.topic_id, p.partition_index)
        for (topic_id, index), error in ack_errors.items():
            part(topic_id, index).acknowledge_error_code = error
        for (topic_id, index), error in errors.items():
            part(topic_id, index).error_code = error
        for topic_id, got in acquired:
            data = part(topic_id, got.partition)
            data.records = got.records  # type: ignore[assignment]
            data.acquired_records = [
                ShareFetchResponse.AcquiredRecords(
                    first_offset=r.first_offset, last_offset=r.last_offset, delivery_count=r.delivery_count
                )
                for r in got.ranges
            ]
        response = ShareFetchResponse(acquisition_lock_timeout_ms=lock_ms)
        by_topic: dict[uuid.UUID, ShareFetchResponse.ShareFetchableTopicResponse] = {}
        for (topic_id, _index), data in parts.items():
            topic_response = by_topic.get(topic_id)
            if topic_response is None:
                topic_response = ShareFetchResponse.ShareFetchableTopicResponse(topic_id=topic_id)
                by_topic[topic_id] = topic_response
                response.responses.append(topic_response)
            topic_response.partitions.append(data)
        return response


def _fenced_now(answer: Answer) -> bool:
    """Whether a write's immediate answer is FENCED_STATE_EPOCH (a local share coordinator refused it)."""
    return isinstance(answer, WriteShareGroupStateResponse) and any(
        p.error_code == ErrorCode.FENCED_STATE_EPOCH for r in answer.results for p in r.partitions
    )


def _discard(answer: object) -> None:
    """An answer this runtime does not wait for (a coroutine is closed so it is never left unawaited)."""
    if inspect.iscoroutine(answer):
        answer.close()
