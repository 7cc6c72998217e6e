"""The admin side of share groups (KIP-932): DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92), share groups in ListGroups and DeleteGroups, and group ids kept apart from
classic and consumer groups.

Invariants:
- A share group exists while :class:`~tidelog.server.share_runtime.ShareRuntime` knows it (a member has
  heartbeated since the broker started) or ``__share_group_state`` holds state for it (so a group whose
  members are gone is still listed, described and deletable after a restart).
- Offsets are altered or deleted, and a group deleted, only while the group has no members (members whose
  session ran out are fenced first): else NON_EMPTY_GROUP. A group id that a classic or consumer group
  holds is GROUP_ID_NOT_FOUND to every share API, and a share group's id is GROUP_ID_NOT_FOUND to
  ConsumerGroupHeartbeat and OffsetCommit and INCONSISTENT_GROUP_PROTOCOL to JoinGroup (Kafka's GroupMetadataManager).
- Every change is persisted before it is answered: an alter writes a ShareSnapshot with the new start
  offset and no in-flight batches at the partition's current leader epoch (the share coordinator fences
  older ones; the leader's next write is not fenced by it) and at the share-partition's state epoch + 1
  (Kafka's state-epoch bump: read from the share coordinator first), a delete writes a ShareSnapshot
  tombstone per share-partition and the share coordinator remembers the deleted state epoch + 1 (through
  the share coordinator's WriteShareGroupState / DeleteShareGroupState); this broker's runtime drops its
  in-memory share-partitions, and the next ShareFetch reads the new state.
- A share-partition leader on another broker that still holds the group's share-partition in memory is
  fenced by state epoch (see :mod:`tidelog.coordinator.share.state_coordinator`): its next state write
  carries the state epoch it read, lower than the reset's or the deleted one's, and is refused with
  FENCED_STATE_EPOCH, so it neither overwrites the reset nor resurrects deleted state; the leader then
  drops its share-partition and its next request reads the new state (start offset, or none: the group's
  ``share.auto.offset.reset``). A reset or delete needs a group without members, so no record the leader
  had acquired is lost and no acknowledgement a client was told succeeded is undone; until that first
  write, the stale leader may hand a new member records of its old window (at least once, never lost).
- In a cluster (``cluster``, the broker's :class:`~tidelog.server.share_routing.ShareRouting`) the group
  coordinator answers, as for ShareGroupHeartbeat: DescribeShareGroupOffsets (per group), Alter- and
  DeleteShareGroupOffsets and DeleteGroups of a share group are NOT_COORDINATOR on every other broker. Their
  writes and deletes go through the :class:`~tidelog.server.share_persister.SharePersister` to the share
  coordinator (wherever it is), committed there before the answer. A group's persisted share-partitions
  are not recorded at the group coordinator: it asks the share coordinator for the state of every
  partition of every topic (ReadShareGroupStateSummary; a DeleteGroups deletes them all, deleting absent
  state being a no-op) when a request needs it: DescribeShareGroupOffsets, and ShareGroupDescribe and
  DeleteGroups of a group it does not know (a group with persisted state exists, as on a single node).
- Pending records (tidelog's tagged field on DescribeShareGroupOffsets, see
  :mod:`tidelog.protocol.share_pending`) are the acquired ranges whose lock has not run out, read without
  changing anything. They live on each share-partition's leader, not at the group coordinator: a
  DescribeShareGroupOffsets with the pending tag is answered by any broker, from its own share-partitions
  (empty for partitions it does not lead); ``tidelog share-groups pending`` asks each partition's leader.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupStateRequest,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ListGroupsResponse,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from tidelog.protocol.schema import Response
from tidelog.protocol.share_pending import PENDING_TAG, PendingRange, encode_pending
from tidelog.server.clock import Clock
from tidelog.server.dispatch import Answer
from tidelog.server.group_runtime import GroupRuntime
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.share_persister import ShareStateWriteError
from tidelog.server.share_runtime import ShareRuntime
from tidelog.server.share_state_runtime import ShareStateRuntime

if TYPE_CHECKING:
    from tidelog.server.share_routing import ShareRouting

__all__ = ["ShareAdmin", "Summary"]

Summary = dict[tuple[str, int], int]
"""A group's persisted start offsets, by (topic, partition)."""

_DescribedGroup = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
_DescribedTopic = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic
_DescribedPartition = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition


class ShareAdmin:
    """Share groups as an administrator sees them, over the share runtime and the share coordinator."""

    def __init__(
        self,
        *,
        shares: ShareRuntime,
        state: ShareStateRuntime | None,
        groups: GroupRuntime | None,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        clock: Clock,
        cluster: ShareRouting | None = None,
    ) -> None:
        self._cluster = cluster
        self._state_known: set[str] = set()  # in a cluster: groups the share coordinator held state of
        self._shares = shares
        self._state = state
        self._groups = groups
        self._metadata = metadata
        self._replicas = replicas
        self._clock = clock

    # -- which groups are share groups ---------------------------------------------------------------------

    def share_group_ids(self) -> set[str]:
        ids = set(self._shares.groups)
        if self._state is not None:
            ids |= self._state.coordinator.group_ids()
        return ids

    def is_share_group(self, group_id: str) -> bool:
        if group_id in self._shares.groups or group_id in self._state_known:
            return True
        return self._state is not None and self._state.coordinator.has_group(group_id)

    def is_other_group(self, group_id: str) -> bool:
        """Whether a classic or consumer group holds ``group_id`` (on this broker's coordinator)."""
        if self._groups is None:
            return False
        coordinator = self._groups.coordinator
        shard = coordinator.shard(coordinator.partition_for(group_id))
        return shard is not None and (
            group_id in shard.state.groups or group_id in shard.state.consumer_groups
        )

    @property
    def in_cluster(self) -> bool:
        return self._cluster is not None

    def is_coordinator(self, group_id: str) -> bool:
        """Whether this broker answers ``group_id``'s group-level requests (always, on a single node)."""
        return self._cluster is None or self._cluster.is_coordinator(group_id)

    def members(self, group_id: str) -> int:
        group = self._shares.expired_group(group_id)
        return 0 if group is None else len(group.members)

    def listed(
        self, states_filter: Iterable[str], types_filter: Iterable[str]
    ) -> list[ListGroupsResponse.ListedGroup]:
        """The share groups for ListGroups (type ``share``), filtered as Kafka filters (case-insensitive)."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and "share" not in types:
            return []
        out = []
        for group_id in sorted(self.share_group_ids()):
            state = "Stable" if self.members(group_id) else "Empty"
            if states and state.lower() not in states:
                continue
            out.append(
                ListGroupsResponse.ListedGroup(
                    group_id=group_id, protocol_type="share", group_state=state, group_type="share"
                )
            )
        return out

    # -- the share-partitions of a group -------------------------------------------------------------------

    def _partitions(self, group_id: str, summary: Summary | None = None) -> dict[tuple[str, int], int]:
        """Every share-partition of ``group_id`` (topic, partition) with its start offset: persisted here
        (or, in a cluster, in ``summary``, read from the share coordinator), or in the runtime's memory."""
        found: dict[tuple[str, int], int] = dict(summary or {})
        if self._state is not None and summary is None:
            for (topic_id, index), persisted in self._state.coordinator.states_of(group_id).items():
                name = self._metadata.topic_name(topic_id)
                if name is not None:
                    found[(name, index)] = persisted.start_offset
        for (group, topic, index), sp in self._shares.partitions.items():
            if group == group_id:
                found[(topic, index)] = sp.start_offset
        return found

    async def summaries(self, group_ids: Iterable[str]) -> dict[str, Summary]:
        """In a cluster: for each group this broker coordinates, the start offset of each share-partition the
        share coordinator holds (ReadShareGroupStateSummary of every partition of every topic)."""
        if self._cluster is None:
            return {}
        topics = [t for t in self._metadata.topics() if not t.is_internal]
        names = {t.topic_id: t.name for t in topics}
        found: dict[str, Summary] = {}
        for group_id in group_ids:
            if not self.is_coordinator(group_id) or not topics:
                continue
            request = ReadShareGroupStateSummaryRequest(
                group_id=group_id,
                topics=[
                    ReadShareGroupStateSummaryRequest.ReadStateSummaryData(
                        topic_id=t.topic_id,
                        partitions=[
                            ReadShareGroupStateSummaryRequest.PartitionData(partition=i, leader_epoch=-1)
                            for i in range(t.num_partitions)
                        ],
                    )
                    for t in topics
                ],
            )
            answer = await self._cluster.persister.summary(request)
            found[group_id] = {
                (names[r.topic_id], p.partition): p.start_offset
                for r in answer.results
                for p in r.partitions
                if p.start_offset >= 0 and r.topic_id in names
            }
            if found[group_id]:
                self._state_known.add(group_id)
            else:
                self._state_known.discard(group_id)
        return found

    def unknown(self, group_ids: Iterable[str]) -> list[str]:
        """In a cluster, those of ``group_ids`` this broker coordinates but does not know as share groups
        (their state, if any, is at the share coordinator: :meth:`summaries` learns it)."""
        if self._cluster is None:
            return []
        return [g for g in group_ids if self.is_coordinator(g) and not self.is_share_group(g)]

    def _pending(self, group_id: str, topic: str, index: int) -> list[PendingRange]:
        sp = self._shares.partitions.get((group_id, topic, index))
        if sp is None:
            return []
        now = self._clock.now_ms()
        return [
            PendingRange(r.member_id or "", r.first, r.last, r.delivery_count, r.deadline_ms - now)
            for r in sp.acquired()
            if r.deadline_ms > now
        ]

    # -- DescribeShareGroupOffsets ---------------------------------------------------------------------

    def describe_offsets(
        self, request: DescribeShareGroupOffsetsRequest, summaries: Mapping[str, Summary] | None = None
    ) -> DescribeShareGroupOffsetsResponse:
        """``summaries``: in a cluster, what :meth:`summaries` read for the groups (else state is read
        here)."""
        response = DescribeShareGroupOffsetsResponse()
        for group in request.groups:
            group_id = group.group_id
            pending = bool(group.unknown_tagged_fields and PENDING_TAG in group.unknown_tagged_fields)
            if not pending and not self.is_coordinator(group_id):
                response.groups.append(
                    _DescribedGroup(group_id=group_id, error_code=ErrorCode.NOT_COORDINATOR)
                )
                continue
            summary = None if summaries is None else summaries.get(group_id)
            if (
                not self.is_share_group(group_id)
                and not summary
                and not (pending and self._cluster is not None)
            ):
                response.groups.append(
                    _DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_ID_NOT_FOUND)
                )
                continue
            known = self._partitions(group_id, summary)
            wanted: list[tuple[str, list[int]]]
            if group.topics is None:
                by_topic: dict[str, list[int]] = {}
                for topic, index in sorted(known):
                    by_topic.setdefault(topic, []).append(index)
                wanted = list(by_topic.items())
            else:
                wanted = [(t.topic_name, list(t.partitions)) for t in group.topics]
            described = _DescribedGroup(group_id=group_id)
            for topic, indexes in wanted:
                info = self._metadata.topic(topic)
                entry = _DescribedTopic(
                    topic_name=topic, topic_id=info.topic_id if info else uuid.UUID(int=0)
                )
                for index in indexes:
                    entry.partitions.append(self._describe_partition(group_id, topic, index, known, pending))
                described.topics.append(entry)
            response.groups.append(described)
        return response

    def _describe_partition(
        self, group_id: str, topic: str, index: int, known: dict[tuple[str, int], int], pending: bool
    ) -> _DescribedPartition:
        if not self._metadata.has_partition(topic, index):
            return _DescribedPartition(
                partition_index=index,
                start_offset=-1,
                leader_epoch=-1,
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
        leader = self._replicas.leader_partition(topic, index)
        epoch = -1 if isinstance(leader, ErrorCode) else leader.leader_epoch
        part = _DescribedPartition(
            partition_index=index, start_offset=known.get((topic, index), -1), leader_epoch=epoch
        )
        if pending:
            part.unknown_tagged_fields = {PENDING_TAG: encode_pending(self._pending(group_id, topic, index))}
        return part

    # -- AlterShareGroupOffsets ------------------------------------------------------------------------

    def _group_error(self, group_id: str, *, may_create: bool) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.is_coordinator(group_id):
            return ErrorCode.NOT_COORDINATOR
        if self.is_other_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if not self.is_share_group(group_id):
            return ErrorCode.NONE if may_create else ErrorCode.GROUP_ID_NOT_FOUND
        if self.members(group_id):
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def alter_offsets(self, request: AlterShareGroupOffsetsRequest) -> Answer:
        group_id = request.group_id
        error = self._group_error(group_id, may_create=True)
        response = AlterShareGroupOffsetsResponse(error_code=error)
        writes: list[Awaitable[Response]] = []
        altered: set[str] = set()
        for topic in request.topics:
            info = self._metadata.topic(topic.topic_name)
            entry = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic(
                topic_name=topic.topic_name, topic_id=info.topic_id if info else uuid.UUID(int=0)
            )
            response.responses.append(entry)
            for p in topic.partitions:
                code = error
                if code == ErrorCode.NONE:
                    if info is None or not self._metadata.has_partition(topic.topic_name, p.partition_index):
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif p.start_offset < 0:
                        code = ErrorCode.INVALID_REQUEST
                if code == ErrorCode.NONE and info is not None:
                    code = self._write_start(
                        group_id, info.topic_id, p.partition_index, p.start_offset, writes
                    )
                    altered.add(topic.topic_name)
                entry.partitions.append(
                    AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                )
        if altered:
            self._shares.forget(group_id, altered)
        return _after(writes, response)

    def _write_start(
        self, group_id: str, topic_id: uuid.UUID, index: int, start: int, writes: list[Awaitable[Response]]
    ) -> ErrorCode:
        if self._state is None:
            return ErrorCode.NONE  # nothing persisted: the runtime's memory is all there is
        if self._state.ensure_topic() is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        name = self._metadata.topic_name(topic_id)
        info = self._metadata.partition(name, index) if name is not None else None
        epoch = info.leader_epoch if info is not None else -1  # not fenced, nor fencing the leader
        reset = WriteShareGroupStateRequest.PartitionData(
            partition=index, leader_epoch=epoch, start_offset=start
        )
        request = WriteShareGroupStateRequest(
            group_id=group_id,
            topics=[WriteShareGroupStateRequest.WriteStateData(topic_id=topic_id, partitions=[reset])],
        )
        if self._cluster is not None:  # the state epoch is at the share coordinator, wherever it is
            task = asyncio.get_running_loop().create_task(self._bump_and_store(request))
            return _collect(task, writes)
        reset.state_epoch = self._state.coordinator.state_epoch(group_id, topic_id, index) + 1
        return _collect(self._store(request), writes)

    async def _bump_and_store(self, request: WriteShareGroupStateRequest) -> Response:
        """In a cluster: ``request`` (one share-partition's reset) at the state epoch the share coordinator
        holds + 1 (read with ReadShareGroupStateSummary, which fences nobody), committed there."""
        assert self._cluster is not None
        topic = request.topics[0]
        reset = topic.partitions[0]
        summary = await self._cluster.persister.summary(
            ReadShareGroupStateSummaryRequest(
                group_id=request.group_id,
                topics=[
                    ReadShareGroupStateSummaryRequest.ReadStateSummaryData(
                        topic_id=topic.topic_id,
                        partitions=[
                            ReadShareGroupStateSummaryRequest.PartitionData(
                                partition=reset.partition, leader_epoch=-1
                            )
                        ],
                    )
                ],
            )
        )
        reset.state_epoch = summary.results[0].partitions[0].state_epoch + 1
        answer = self._store(request)
        return answer if isinstance(answer, Response) else await answer

    # -- DeleteShareGroupOffsets and DeleteGroups ----------------------------------------------------------

    def delete_offsets(self, request: DeleteShareGroupOffsetsRequest) -> Answer:
        group_id = request.group_id
        error = self._group_error(group_id, may_create=False)
        response = DeleteShareGroupOffsetsResponse(error_code=error)
        if error != ErrorCode.NONE:
            return response
        writes: list[Awaitable[Response]] = []
        deleted: set[str] = set()
        for topic in request.topics:
            info = self._metadata.topic(topic.topic_name)
            entry = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic(
                topic_name=topic.topic_name, topic_id=info.topic_id if info else uuid.UUID(int=0)
            )
            response.responses.append(entry)
            if info is None:
                entry.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            entry.error_code = self._delete_state(
                group_id, {info.topic_id: range(info.num_partitions)}, writes
            )
            deleted.add(topic.topic_name)
        if deleted:
            self._shares.forget(group_id, deleted)
        return _after(writes, response)

    def delete_group(self, group_id: str, writes: list[Awaitable[Response]]) -> ErrorCode:
        """Delete share group ``group_id`` and its state (the writes to await are added to ``writes``)."""
        error = self._group_error(group_id, may_create=False)
        if error != ErrorCode.NONE:
            return error
        partitions: dict[uuid.UUID, list[int]] = {}
        if self._cluster is not None:  # the state may be at another broker: every partition's, if any
            for topic in self._metadata.topics():
                if not topic.is_internal:
                    partitions[topic.topic_id] = list(range(topic.num_partitions))
        elif self._state is not None:
            for topic_id, index in sorted(self._state.coordinator.states_of(group_id)):
                partitions.setdefault(topic_id, []).append(index)
        error = self._delete_state(group_id, partitions, writes) if partitions else ErrorCode.NONE
        if error == ErrorCode.NONE:
            deleted = self._shares.forget(group_id)
            self._state_known.discard(group_id)
            if deleted is not None:
                writes.append(_tombstoned(group_id, deleted))
        return error

    def _delete_state(
        self, group_id: str, partitions: Mapping[uuid.UUID, Iterable[int]], writes: list[Awaitable[Response]]
    ) -> ErrorCode:
        if self._state is None:
            return ErrorCode.NONE
        if self._state.ensure_topic() is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        answer = self._store(
            DeleteShareGroupStateRequest(
                group_id=group_id,
                topics=[
                    DeleteShareGroupStateRequest.DeleteStateData(
                        topic_id=topic_id,
                        partitions=[DeleteShareGroupStateRequest.PartitionData(partition=i) for i in indexes],
                    )
                    for topic_id, indexes in partitions.items()
                ],
            )
        )
        return _collect(answer, writes)

    def _store(self, request: WriteShareGroupStateRequest | DeleteShareGroupStateRequest) -> Answer:
        """``request`` at the group's share coordinator: this broker's, or wherever it is in a cluster."""
        if self._cluster is not None:
            return self._cluster.persister.persist(request)
        assert self._state is not None
        return self._state.handle_request(request, 0)


async def _tombstoned(group_id: str, answer: Answer) -> Response:
    """The group's tombstones in ``__consumer_offsets``, committed; raises :class:`ShareStateWriteError` if
    they are not (the DeleteGroups is then not answered: its client asks again)."""
    response = answer if isinstance(answer, Response) else await answer
    error = getattr(response, "error_code", ErrorCode.NONE)
    if error != ErrorCode.NONE:
        raise ShareStateWriteError(
            f"share group {group_id}: deletion not committed ({ErrorCode(error).name})"
        )
    return response


def _collect(answer: Answer, writes: list[Awaitable[Response]]) -> ErrorCode:
    """The error of a share coordinator answer at hand; an answer still waiting for its commit is added to
    ``writes`` (its errors come as the commit's)."""
    if inspect.isawaitable(answer):
        writes.append(answer)
        return ErrorCode.NONE
    for result in getattr(answer, "results", []):
        for p in result.partitions:
            if p.error_code != ErrorCode.NONE:
                return ErrorCode(p.error_code)
    return ErrorCode.NONE


def _after(writes: list[Awaitable[Response]], response: Response) -> Answer:
    """``response`` once ``writes`` are committed."""
    if not writes:
        return response

    async def after() -> Response:
        await asyncio.gather(*writes)
        return response

    return after()
