"""One coordinator runtime for every coordinator (Kafka's ``CoordinatorRuntime``): the I/O around a pure
:class:`~tidelog.coordinator.common.PartitionedCoordinator` on the broker's event loop, single-threaded.
The group and the transaction coordinator plug into it (:mod:`.group_runtime`, :mod:`.txn_runtime`); what
differs between them are the hooks a subclass overrides: how its records become a batch, what happens
after its records are committed (the transaction coordinator's markers), and what it does around loading.

Invariants:

- The coordinator's state lives in an internal, compacted topic (``__consumer_offsets``,
  ``__transaction_state``) created on first use (FindCoordinator). A partition is served only once it is
  loaded: at start (a single node owns every partition; they all become *loading* before a connection is
  accepted) or when this broker becomes its leader (cluster: coordinator epoch = leader epoch), its log is
  replayed up to the high watermark, in chunks of the load buffer, yielding to the loop between chunks;
  meanwhile its keys get COORDINATOR_LOAD_IN_PROGRESS. Losing the leadership unloads it (NOT_COORDINATOR).
- Every :class:`~tidelog.coordinator.common.CoordinatorResult` is applied in the coordinator's order: its
  records are appended first, one batch per partition; then the response is released (a
  :class:`~tidelog.coordinator.common.DeferredResponse` parks the request: its connection awaits a future
  resolved exactly once, by a later completion or with NOT_COORDINATOR when the partition is unloaded or
  the broker stops), then the completions of parked requests, then the timers; and only if every append
  succeeded, the subclass's after-commit effects (:meth:`CoordinatorRuntime._after_commit`).
- A failed append answers the request and the completions with the coordinator's mapped error, drops the
  after-commit effects (the records that decided them may not be in the log), and unloads the partition
  and loads it again from its log, which is the truth.
- Timers live on a timing wheel driven by one clock task: scheduling a key replaces its earlier timer; a
  timer fires through ``on_timeout`` in the clock task only, never inside another coordinator call, and
  never before its deadline.
- A damaged batch met while loading is skipped with a warning (:func:`.coordinator_support.read_records`),
  a record that does not parse too: one bit flip never makes a partition's other keys unavailable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidelog.coordinator.common import (
    CancelTimer,
    CoordinatorRecord,
    CoordinatorRecordError,
    CoordinatorResult,
    DeferredResponse,
    PartitionedCoordinator,
    ScheduleTimer,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import ControlRecordType, Record, RecordBatchHeader, decode_control_record
from tidelog.protocol.schema import Request, Response
from tidelog.replication.partition import Partition
from tidelog.storage.producer_state import AppendOrigin

from .admin_manager import TopicAdmin
from .clock import Clock
from .coordinator_support import KeyedTimers, read_records, run_partition_loader
from .dispatch import Answer
from .metadata_cache import MetadataCache, TopicInfo
from .replica_manager import ReplicaManager

__all__ = ["CoordinatorRuntime"]

log = logging.getLogger("tidelog.coordinator_runtime")

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Parked:
    future: asyncio.Future[Response]
    request: Request
    api_version: int


class CoordinatorRuntime(Generic[K]):
    """Runs one coordinator over the partitions of its internal topic that this broker leads."""

    what = "keys"
    """What the coordinator's keys are, for log lines ("groups", "transactional ids")."""

    def __init__(
        self,
        coordinator: PartitionedCoordinator[K],
        *,
        admin: TopicAdmin,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        clock: Clock,
        load_buffer_bytes: int,
        topic_configs: dict[str, str],
        replication_factor: int = 1,
    ) -> None:
        self.coordinator = coordinator
        self._admin = admin
        self._metadata = metadata
        self._replicas = replicas
        self._clock = clock.now_ms
        self._load_buffer = max(load_buffer_bytes, 1024)
        self._topic_configs = topic_configs
        self._replication_factor = replication_factor
        self.timers: KeyedTimers[K] = KeyedTimers(self._on_timer, clock=self._clock, name=self.topic)
        self._parked: dict[int, _Parked] = {}
        self._to_load: list[int] = []
        self._load_wakeup = asyncio.Event()
        self._stopped = False
        replicas.add_leadership_listener(self._on_leadership)

    # -- the topic -------------------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self.coordinator.topic_name

    @property
    def num_partitions(self) -> int:
        return self.coordinator.num_partitions

    def topic_configs(self) -> dict[str, str]:
        return dict(self._topic_configs)

    def partition_for(self, key: str) -> int:
        return self.coordinator.partition_for(key)

    def ensure_topic(self) -> TopicInfo | None:
        """The internal topic, created if it does not exist (None while a cluster creates it). A single
        node's new, empty partitions are loaded at once; in a cluster each loads when its leadership
        arrives."""
        topic = self._admin.ensure_topic(
            self.topic, self.num_partitions, self._replication_factor, self._topic_configs, is_internal=True
        )
        if topic is None or self._replicas.cluster_mode:
            return topic
        for partition in range(topic.num_partitions):
            replica = self._replicas.get(self.topic, partition)
            if replica is None or not replica.is_leader or partition in self.coordinator.owned_partitions:
                continue
            self._begin_loading(partition)
            self._load_now(partition)
        return topic

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Broker start: every partition of an existing internal topic this broker leads becomes loading
        now (so no request sees a half-loaded coordinator); :meth:`run_loader` replays them."""
        topic = self._metadata.topic(self.topic)
        if topic is None:
            return
        for partition in range(topic.num_partitions):
            replica = self._replicas.get(self.topic, partition)
            if (
                partition not in self.coordinator.owned_partitions
                and replica is not None
                and replica.is_leader
            ):
                self._queue_load(partition)

    async def run_loader(self) -> None:
        """Loads the partitions queued at start, on becoming leader and after failed appends, one at a time."""
        await run_partition_loader(
            self._to_load,
            self._load_wakeup,
            is_loading=self.coordinator.is_loading,
            load=self._load,
            stopped=lambda: self._stopped,
            topic=self.topic,
            what=self.what,
        )

    async def run_clock(self) -> None:
        """Fires coordinator timers when due (see :class:`~tidelog.server.coordinator_support.KeyedTimers`)."""
        await self.timers.run()

    def shutdown(self) -> None:
        """Broker stop: unload every partition (parked requests are answered NOT_COORDINATOR now)."""
        self._stopped = True
        for partition in self.coordinator.owned_partitions:
            self.apply(self.coordinator.unload(partition))
        self._answer_parked(ErrorCode.NOT_COORDINATOR)
        self.timers.clear()

    def _on_leadership(self, partition: Partition, is_leader: bool) -> None:
        """Coordinators follow leadership: load a partition of the internal topic on becoming its leader (at
        the new leader epoch), unload it on losing it."""
        if partition.topic != self.topic or self._stopped:
            return
        owned = partition.index in self.coordinator.owned_partitions
        if owned:
            self.apply(self.coordinator.unload(partition.index))
        if is_leader:
            self._queue_load(partition.index)

    # -- loading ---------------------------------------------------------------------------------------

    def _queue_load(self, partition: int) -> None:
        self._begin_loading(partition)
        self._to_load.append(partition)
        self._load_wakeup.set()

    def _begin_loading(self, partition: int) -> None:
        replica = self._replicas.get(self.topic, partition)
        coordinator_epoch = max(replica.leader_epoch, 0) if replica is not None else 0
        self.coordinator.begin_loading(partition, coordinator_epoch)
        self._on_begin_loading(partition)

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        count = 0
        try:
            replica = self._replicas.get(self.topic, partition)
            if replica is not None:
                for chunk in read_records(replica, self._load_buffer):
                    count += self._replay(partition, chunk)
                    await asyncio.sleep(0)
                    if self._stopped or not self.coordinator.is_loading(partition):
                        return
            self._complete_loading(partition, count, started)
        finally:
            self._on_load_ended(partition)

    def _load_now(self, partition: int) -> None:
        """Load ``partition`` synchronously (a new, empty one)."""
        started = time.monotonic()
        count = 0
        replica = self._replicas.get(self.topic, partition)
        if replica is not None:
            for chunk in read_records(replica, self._load_buffer):
                count += self._replay(partition, chunk)
        self._complete_loading(partition, count, started)
        self._on_load_ended(partition)

    def _replay(self, partition: int, chunk: list[tuple[RecordBatchHeader, list[Record]]]) -> int:
        """Replay one chunk of the partition's log; returns how many records it held."""
        replayed = 0
        for header, records in chunk:
            if header.is_control:
                for record in records:
                    kind, _epoch = decode_control_record(record)
                    self.coordinator.replay_end_transaction_marker(
                        partition, header.producer_id, kind is ControlRecordType.COMMIT
                    )
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            for record in records:
                if record.key is None:
                    continue
                try:
                    self.coordinator.replay(partition, record.key, record.value, producer_id=producer_id)
                except CoordinatorRecordError as exc:
                    log.warning(
                        "skipping record at offset %d of %s-%d: %s", record.offset, self.topic, partition, exc
                    )
                replayed += 1
        return replayed

    def _complete_loading(self, partition: int, count: int, started: float) -> None:
        self.apply(self.coordinator.complete_loading(partition, self._clock()))
        if count:
            log.info(
                "loaded %s-%d: %d records, %s in %.0f ms",
                self.topic,
                partition,
                count,
                self._loaded_summary(partition),
                (time.monotonic() - started) * 1000,
            )

    def _reload(self, partition: int) -> None:
        """After a failed append the coordinator is ahead of its log: unload the partition, load it again."""
        self.apply(self.coordinator.unload(partition))
        if self._stopped:
            return
        replica = self._replicas.get(self.topic, partition)
        if replica is not None and replica.is_leader:
            self._queue_load(partition)

    # -- requests and results --------------------------------------------------------------------------

    def handle_request(
        self,
        request: Request,
        api_version: int,
        *,
        client_id: str = "",
        client_host: str = "",
        producer: tuple[int, int] | None = None,
    ) -> Answer:
        """Serve one request: the response, or a future of it for a parked request."""
        result = self.coordinator.handle(
            request, api_version, now_ms=self._clock(), client_id=client_id, client_host=client_host
        )
        answer = self.apply(result, request, api_version, producer)
        assert answer is not None, f"the coordinator gave no response to {type(request).__name__}"
        return answer

    def apply(
        self,
        result: CoordinatorResult[K],
        request: Request | None = None,
        api_version: int = 0,
        producer: tuple[int, int] | None = None,
    ) -> Answer | None:
        """Carry out ``result`` (see the module docstring); returns the request's answer. ``producer``:
        (producer id, epoch) whose transactional batch the records form (TxnOffsetCommit)."""
        failure: ErrorCode | None = None
        failed: list[int] = []
        for partition, records in result.records.items():
            if not records:
                continue
            error = self._append(partition, records, producer)
            if error is not ErrorCode.NONE:
                failure = self.coordinator.append_error_to_response_error(error)
                failed.append(partition)
        answer: Answer | None
        if isinstance(result.response, DeferredResponse):
            assert request is not None
            future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
            self._parked[result.response.handle_id] = _Parked(future, request, api_version)
            answer = future
        elif failure is not None and request is not None and result.response is not None:
            answer = self.coordinator.error_response(request, api_version, failure)
        else:
            answer = result.response
        for handle, response in result.completions:
            parked = self._parked.pop(handle.handle_id, None)
            if parked is None or parked.future.done():
                continue  # its connection went away
            if failure is not None:
                response = self.coordinator.error_response(parked.request, parked.api_version, failure)
            parked.future.set_result(response)
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers.schedule(op.key, op.deadline_ms)
            else:
                assert isinstance(op, CancelTimer)
                self.timers.cancel(op.key)
        if failed:
            for partition in failed:
                self._reload(partition)
            return answer
        self._after_commit(result)
        return answer

    def _append(
        self, partition: int, records: list[CoordinatorRecord], producer: tuple[int, int] | None
    ) -> ErrorCode:
        now = self._clock()
        batch, origin = self._batch(records, now, producer)
        error, _info, message = self._replicas.append(self.topic, partition, batch, now_ms=now, origin=origin)
        if error is not ErrorCode.NONE:
            log.warning(
                "appending %d records to %s-%d failed: %s %s",
                len(records),
                self.topic,
                partition,
                error.name,
                message or "",
            )
        return ErrorCode(error)

    def _answer_parked(self, error: ErrorCode) -> None:
        for parked in self._parked.values():
            if not parked.future.done():
                parked.future.set_result(
                    self.coordinator.error_response(parked.request, parked.api_version, error)
                )
        self._parked.clear()

    def _on_timer(self, key: K, now_ms: int) -> None:
        self.apply(self.coordinator.on_timeout(key, now_ms))

    # -- hooks -----------------------------------------------------------------------------------------

    def _batch(
        self, records: list[CoordinatorRecord], now_ms: int, producer: tuple[int, int] | None
    ) -> tuple[bytes, AppendOrigin]:
        """The record batch ``records`` are appended as, and the append's origin."""
        raise NotImplementedError

    def _after_commit(self, result: CoordinatorResult[K]) -> None:
        """What follows a result whose records are all in the log (nothing by default)."""

    def _on_begin_loading(self, partition: int) -> None:
        """``partition`` became loading (nothing by default)."""

    def _on_load_ended(self, partition: int) -> None:
        """Loading ``partition`` ended, completed or not (nothing by default)."""

    def _loaded_summary(self, partition: int) -> str:
        """What a loaded partition holds, for the log line."""
        return f"partition {partition}"
