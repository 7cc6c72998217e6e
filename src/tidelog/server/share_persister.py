"""Where a share-partition leader reads and writes its share-partitions' state in a cluster (Kafka's
``Persister``, its ``DefaultStatePersister``): at the share coordinator, the leader of the
``__share_group_state`` partition of the group (``partition_for(group_id)``), on this broker or another.

Invariants:
- The coordinator of a group's states is looked up in the metadata cache at every attempt: this broker
  is asked directly (:class:`~tidelog.server.share_state_runtime.ShareStateRuntime`), another over the
  inter-broker :class:`~tidelog.server.cluster.broker_client.BrokerClient` with ReadShareGroupState (84) /
  WriteShareGroupState (85) / DeleteShareGroupState (86) / ReadShareGroupStateSummary (87), v0.
- The admin side's writes and deletes (:meth:`SharePersister.persist`, the group coordinator's
  AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) go the same way, retried the same way,
  carrying the leader epoch they were given (not stamped: this broker need not lead the partition).
- A write resolves only once the coordinator answered NONE for every share-partition in it, which it does
  once its ShareSnapshot record is committed (acks=all on the replicated ``__share_group_state``). Any other
  answer, or no answer, is retried (the coordinator looked up again: it may have moved) every
  ``retry_backoff_ms`` until ``timeout_ms``; then the write raises :class:`ShareStateWriteError` (the
  request's connection closes: a client is never told an acknowledgement succeeded that is not
  persisted). Retrying is safe because a write carries the share-partition's whole persisted window.
- FENCED_LEADER_EPOCH is final: a newer leader of the share-partition wrote already (this one is stale).
  So is FENCED_STATE_EPOCH (an administrator reset or deleted the state since this leader read it), raised
  as :class:`ShareStateFencedError`: the share runtime then drops its share-partition and reloads it.
- A write nobody waits for (the runtime's lock expiries seen on the way) still runs; its failure is
  logged.
- Writes of one share-partition reach the coordinator in the order they were made: each waits for the one
  before it (a write holds the whole window, so a reordered one would bring an older window back). Every
  read and write carries the leader epoch of this broker's replica of the partition (the coordinator
  fences older epochs; a new leader's first read fences the ones before it).
- Reads: :meth:`SharePersister.load` fetches share-partitions' states before a request uses them (retried as
  writes are, but a failure leaves them unloaded); the share runtime's synchronous read then takes the
  loaded answer (once). A read not loaded first is asked of a local coordinator as before, and otherwise
  answered COORDINATOR_LOAD_IN_PROGRESS while a load starts, so the client's next request finds it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from typing import Protocol, TypeVar

from tidelog.coordinator.share.state_coordinator import SHARE_STATE_TOPIC
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.server.cluster.broker_client import BrokerClient, BrokerClientError
from tidelog.server.dispatch import Answer
from tidelog.server.metadata_cache import NO_LEADER, MetadataCache, TopicInfo
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.share_state_runtime import ShareStateRuntime

__all__ = ["SharePersister", "ShareStateFencedError", "ShareStateStore", "ShareStateWriteError", "StateKey"]

log = logging.getLogger("tidelog.share_persister")

StateKey = tuple[str, uuid.UUID, int]
"""(group id, topic id, partition)"""

STATE_API_VERSION = 0

R = TypeVar(
    "R",
    ReadShareGroupStateResponse,
    WriteShareGroupStateResponse,
    DeleteShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
)


class ShareStateStore(Protocol):
    """What the share runtime reads and writes share-partition state through."""

    def ensure_topic(self) -> TopicInfo | None: ...

    def handle_request(self, request: Request, api_version: int) -> Answer: ...


class ShareStateWriteError(Exception):
    """A share-partition state write that the share coordinator did not take in time (or fenced)."""


class ShareStateFencedError(ShareStateWriteError):
    """A write refused with FENCED_STATE_EPOCH: the state was reset or deleted since the writer read it."""


class _RetryableError(Exception):
    """One attempt did not get a committed answer; ``error`` says why."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class SharePersister:
    """Reads and writes share-partition state at each group's share coordinator, here or elsewhere."""

    def __init__(
        self,
        *,
        local: ShareStateRuntime,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        client: BrokerClient,
        retry_backoff_ms: int = 100,
        timeout_ms: int = 30_000,
    ) -> None:
        self._local = local
        self._metadata = metadata
        self._replicas = replicas
        self._client = client
        self._backoff_s = retry_backoff_ms / 1000
        self._timeout_s = timeout_ms / 1000
        self._loaded: dict[StateKey, ReadShareGroupStateResponse] = {}
        self._last_write: dict[StateKey, asyncio.Future[WriteShareGroupStateResponse]] = {}
        self._loading: set[StateKey] = set()

    # -- the runtime's interface -------------------------------------------------------------------------

    def ensure_topic(self) -> TopicInfo | None:
        return self._local.ensure_topic()

    def handle_request(self, request: Request, api_version: int) -> Answer:
        del api_version  # both APIs have v0 only
        if isinstance(request, ReadShareGroupStateRequest):
            return self._read_now(request)
        assert isinstance(request, WriteShareGroupStateRequest), type(request).__name__
        return self._write_in_order(request)

    def persist(self, request: WriteShareGroupStateRequest | DeleteShareGroupStateRequest) -> Answer:
        """An administrator's write or delete of share-partition state, at the group's share coordinator;
        resolves once committed there (else raises :class:`ShareStateWriteError`)."""
        loop = asyncio.get_running_loop()
        if isinstance(request, DeleteShareGroupStateRequest):
            return loop.create_task(self._until_committed(request, DeleteShareGroupStateResponse))
        return loop.create_task(self._until_committed(request, WriteShareGroupStateResponse))

    async def summary(self, request: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
        """The start offsets the share coordinator holds (ReadShareGroupStateSummary, retried as writes are;
        raises :class:`ShareStateWriteError` when none comes in time)."""
        return await self._until_committed(request, ReadShareGroupStateSummaryResponse)

    def forget(self, topic_id: uuid.UUID, partition: int) -> None:
        """Drop loaded answers of a partition whose leadership changed here (they may be stale)."""
        for key in [k for k in self._loaded if k[1] == topic_id and k[2] == partition]:
            del self._loaded[key]

    def is_loaded(self, key: StateKey) -> bool:
        return key in self._loaded

    # -- reads ---------------------------------------------------------------------------------------------

    def _read_now(self, request: ReadShareGroupStateRequest) -> Answer:
        topic = request.topics[0]
        key = (request.group_id, topic.topic_id, topic.partitions[0].partition)
        loaded = self._loaded.pop(key, None)
        if loaded is not None:
            return loaded
        if self._coordinator(request.group_id) == self._metadata.node_id:
            self._stamp(request)
            return self._local.handle_request(request, api_version=STATE_API_VERSION)
        if key not in self._loading:
            asyncio.get_running_loop().create_task(self.load([key]))
        return ReadShareGroupStateResponse(
            results=[
                ReadShareGroupStateResponse.ReadStateResult(
                    topic_id=key[1],
                    partitions=[
                        ReadShareGroupStateResponse.PartitionResult(
                            partition=key[2], error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                        )
                    ],
                )
            ]
        )

    async def load(self, keys: Iterable[StateKey]) -> None:
        """Read the states of ``keys`` from their coordinators (one request per group), for the runtime's
        next synchronous read of each; a group whose read fails in time stays unloaded."""
        by_group: dict[str, list[StateKey]] = {}
        for key in keys:
            if key not in self._loaded and key not in self._loading:
                by_group.setdefault(key[0], []).append(key)
        if not by_group:
            return
        await asyncio.gather(*(self._load_group(group, wanted) for group, wanted in by_group.items()))

    async def _load_group(self, group_id: str, keys: list[StateKey]) -> None:
        self._loading.update(keys)
        try:
            by_topic: dict[uuid.UUID, list[int]] = {}
            for _group, topic_id, partition in keys:
                by_topic.setdefault(topic_id, []).append(partition)
            request = ReadShareGroupStateRequest(
                group_id=group_id,
                topics=[
                    ReadShareGroupStateRequest.ReadStateData(
                        topic_id=topic_id,
                        partitions=[
                            ReadShareGroupStateRequest.PartitionData(partition=p) for p in partitions
                        ],
                    )
                    for topic_id, partitions in by_topic.items()
                ],
            )
            self._stamp(request)
            try:
                response = await self._until_committed(request, ReadShareGroupStateResponse)
            except ShareStateWriteError as exc:
                log.warning("share group %s: state not read: %s", group_id, exc)
                return
            for result in response.results:
                for p in result.partitions:
                    self._loaded[(group_id, result.topic_id, p.partition)] = ReadShareGroupStateResponse(
                        results=[
                            ReadShareGroupStateResponse.ReadStateResult(
                                topic_id=result.topic_id, partitions=[p]
                            )
                        ]
                    )
        finally:
            self._loading.difference_update(keys)

    # -- writes --------------------------------------------------------------------------------------------

    def _write_in_order(
        self, request: WriteShareGroupStateRequest
    ) -> asyncio.Future[WriteShareGroupStateResponse]:
        self._stamp(request)
        keys = [(request.group_id, t.topic_id, p.partition) for t in request.topics for p in t.partitions]
        before = [self._last_write[k] for k in keys if k in self._last_write]
        task = asyncio.get_running_loop().create_task(self._write(request, before))
        for key in keys:
            self._last_write[key] = task
        task.add_done_callback(lambda done: self._written(keys, done))
        return task

    def _written(self, keys: list[StateKey], done: asyncio.Future[WriteShareGroupStateResponse]) -> None:
        for key in keys:
            if self._last_write.get(key) is done:
                del self._last_write[key]
        if not done.cancelled() and (error := done.exception()) is not None:  # also when nobody awaits it
            log.warning("share-partition state not written: %s", error)

    async def _write(
        self, request: WriteShareGroupStateRequest, before: list[asyncio.Future[WriteShareGroupStateResponse]]
    ) -> WriteShareGroupStateResponse:
        if before:
            await asyncio.gather(*before, return_exceptions=True)
        return await self._until_committed(request, WriteShareGroupStateResponse)

    def _stamp(self, request: ReadShareGroupStateRequest | WriteShareGroupStateRequest) -> None:
        """Each share-partition named gets this broker's leader epoch of its partition (fencing)."""
        for topic in request.topics:
            name = self._metadata.topic_name(topic.topic_id)
            for p in topic.partitions:
                replica = self._replicas.get(name, p.partition) if name is not None else None
                if replica is not None:
                    p.leader_epoch = replica.leader_epoch

    # -- one request, retried ------------------------------------------------------------------------------

    async def _until_committed(self, request: Request, expect: type[R]) -> R:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        group_id = getattr(request, "group_id", "")
        last = "no attempt"
        while True:
            try:
                return await self._attempt(request, expect, group_id, deadline - loop.time())
            except _RetryableError as retry:
                last = retry.error
            if loop.time() + self._backoff_s >= deadline:
                raise ShareStateWriteError(f"share group {group_id}: no committed answer in time ({last})")
            await asyncio.sleep(self._backoff_s)

    async def _attempt(self, request: Request, expect: type[R], group_id: str, left_s: float) -> R:
        coordinator = self._coordinator(group_id)
        if coordinator == NO_LEADER:
            raise _RetryableError("COORDINATOR_NOT_AVAILABLE")
        if coordinator == self._metadata.node_id:
            answer = self._local.handle_request(request, api_version=STATE_API_VERSION)
            response = answer if isinstance(answer, Response) else await answer
        else:
            try:
                response = await self._client.send(
                    coordinator,
                    request,
                    STATE_API_VERSION,
                    timeout_ms=max(int(left_s * 1000), 1),
                    expect=expect,
                )
            except BrokerClientError as exc:
                raise _RetryableError(f"broker {coordinator}: {exc}") from None
        if not isinstance(response, expect):
            raise _RetryableError(f"answered by a {type(response).__name__}")
        errors = {
            p.error_code
            for result in response.results
            for p in result.partitions
            if p.error_code != ErrorCode.NONE
        }
        if ErrorCode.FENCED_LEADER_EPOCH in errors:
            raise ShareStateWriteError(
                f"share group {group_id}: a newer share-partition leader wrote its state"
            )
        if ErrorCode.FENCED_STATE_EPOCH in errors:
            raise ShareStateFencedError(
                f"share group {group_id}: the state was reset or deleted (FENCED_STATE_EPOCH)"
            )
        if errors:
            raise _RetryableError(", ".join(ErrorCode(e).name for e in sorted(errors)))
        return response

    def _coordinator(self, group_id: str) -> int:
        """The broker leading the group's ``__share_group_state`` partition (NO_LEADER if none yet)."""
        topic = self._metadata.topic(SHARE_STATE_TOPIC)
        if topic is None:
            topic = self._local.ensure_topic()
        partition = topic.partition(self._local.partition_for(group_id)) if topic is not None else None
        return partition.leader if partition is not None else NO_LEADER
