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
  replayed up to its log end (a leader's whole log becomes committed), in chunks of the load buffer,
  yielding to the loop between chunks; meanwhile its keys get COORDINATOR_LOAD_IN_PROGRESS. Losing the
  leadership unloads it (NOT_COORDINATOR), and so does a new leader epoch before it loads again.
- Only partitions below the coordinator's configured count (``offsets.topic.num.partitions``,
  ``transaction.state.log.num.partitions``: keys hash over it) are coordinated; partitions an internal
  topic gained beyond it (a client's CreatePartitions, or a client creating the topic first) are ignored.
- Every :class:`~tidelog.coordinator.common.CoordinatorResult` is applied in the coordinator's order: its
  records are appended first, one batch per partition (in a cluster with acks=-1: an ISR below
  ``min.insync.replicas`` fails the append before anything is written); then the timers are applied; then,
  once the records are *committed*, the response is released (a
  :class:`~tidelog.coordinator.common.DeferredResponse` parks the request: its connection awaits a future
  resolved exactly once, by a later completion or with NOT_COORDINATOR when the partition is unloaded or
  the broker stops), then the completions of parked requests; and only if every append was committed,
  the subclass's after-commit effects (:meth:`CoordinatorRuntime._after_commit`: transaction markers).
- Committed means the partition's high watermark passed them (Kafka's ``CoordinatorRuntime`` waits for it
  too). On a single node it moves at the append, so everything above happens synchronously, in the call.
  In a cluster the followers must fetch the records first: the answer is a future, the wait is the replica
  manager's produce purgatory (acks=all's), bounded by the coordinator's commit timeout
  (``offsets.commit.timeout.ms`` for groups, ``request.timeout.ms`` for transactions). A result that
  appended nothing to a partition of its keys (the request's group or transactional id, its parked
  requests' groups, its markers' partition) still waits until that partition's last written offset is
  committed (Kafka's deferred event queue): nothing is answered from state that is not committed yet.
- A failed append, or a commit that fails (leadership lost: NOT_LEADER_OR_FOLLOWER; too small an ISR:
  NOT_ENOUGH_REPLICAS_AFTER_APPEND; the timeout: REQUEST_TIMED_OUT), answers the request and the
  completions with the coordinator's mapped error (``append_error_to_response_error``), drops the
  after-commit effects (the records that decided them may not stay in the log), and unloads the partition
  and loads it again from its log if this broker still leads it (in a cluster after a short backoff, so a
  partition whose ISR stays too small is not replayed in a loop); a result that only waited behind
  earlier records and has no effects there reloads nothing. Unloading a partition answers every result
  still waiting on it with NOT_COORDINATOR (its effects dropped).
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
from .produce_purgatory import PendingAppend
from .replica_manager import ReplicaManager

__all__ = ["RELOAD_BACKOFF_S", "CoordinatorRuntime", "KeyFields", "request_keys"]

log = logging.getLogger("tidelog.coordinator_runtime")

K = TypeVar("K", bound=Hashable)

RELOAD_BACKOFF_S = 0.5
"""In a cluster, the pause before a partition whose append or commit failed is loaded again."""


@dataclass(frozen=True, slots=True)
class KeyFields:
    """Where a coordinator's requests name its keys (group ids, transactional ids): single fields, and
    lists whose entries are ids or carry one in ``item_field``."""

    single: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    item_field: str = ""


def request_keys(request: Request, fields: KeyFields) -> set[str]:
    """The keys ``request`` names (empty for requests about no key in particular, such as ListGroups)."""
    keys: set[str] = set()
    for name in fields.single:
        value = getattr(request, name, None)
        if isinstance(value, str) and value:
            keys.add(value)
    for name in fields.lists:
        for item in getattr(request, name, None) or ():
            value = item if isinstance(item, str) else getattr(item, fields.item_field, None)
            if isinstance(value, str) and value:
                keys.add(value)
    return keys


@dataclass(slots=True)
class _Parked:
    future: asyncio.Future[Response]
    request: Request
    api_version: int


@dataclass(slots=True)
class _CommitStatus:
    """One partition's outcome of a commit wait (the produce purgatory fills ``error_code`` in)."""

    error_code: int = ErrorCode.NONE


@dataclass(slots=True, eq=False)
class _PendingCommit(Generic[K]):
    """A result waiting until the records it depends on are committed."""

    result: CoordinatorResult[K]
    request: Request | None
    api_version: int
    answer: asyncio.Future[Response] | None
    """The request's answer (None: no request, or a parked one whose future is in ``_parked``)."""
    appended: frozenset[int]
    """The partitions this result appended to (the others it only waits on)."""
    statuses: dict[int, _CommitStatus]
    waiting: asyncio.Future[_PendingCommit[K]] | None = None
    done: bool = False


class CoordinatorRuntime(Generic[K]):
    """Runs one coordinator over the partitions of its internal topic that this broker leads."""

    what = "keys"
    """What the coordinator's keys are, for log lines ("groups", "transactional ids")."""

    key_fields = KeyFields()
    """Where its requests name its keys (a request's answer waits for the commits of their partitions)."""

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
        commit_timeout_ms: int = 5000,
    ) -> None:
        self.coordinator = coordinator
        self._admin = admin
        self._metadata = metadata
        self._replicas = replicas
        self._clock = clock.now_ms
        self._load_buffer = max(load_buffer_bytes, 1024)
        self._topic_configs = topic_configs
        self._replication_factor = replication_factor
        self._commit_timeout_ms = commit_timeout_ms
        self.timers: KeyedTimers[K] = KeyedTimers(self._on_timer, clock=self._clock, name=self.topic)
        self._parked: dict[int, _Parked] = {}
        self._to_load: list[int] = []
        self._load_wakeup = asyncio.Event()
        self._stopped = False
        self._last_written: dict[int, int] = {}
        """Per loaded partition: the offset after the last record in its log this coordinator has applied."""
        self._pending: dict[int, list[_PendingCommit[K]]] = {}
        """Per partition: the results waiting for its commits."""
        self._reloads: dict[int, asyncio.TimerHandle] = {}
        self._loads: dict[int, int] = {}
        """Per partition: how many times it began loading (a load of an earlier one stops)."""
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
        arrives. Its replication factor is the configured one in a cluster, 1 on a single node."""
        replication_factor = self._replication_factor if self._replicas.cluster_mode else 1
        topic = self._admin.ensure_topic(
            self.topic, self.num_partitions, replication_factor, self._topic_configs, is_internal=True
        )
        if topic is None or self._replicas.cluster_mode:
            return topic
        for partition in range(min(topic.num_partitions, self.num_partitions)):
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
        for partition in range(min(topic.num_partitions, self.num_partitions)):
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
        """Broker stop: unload every partition (parked and waiting requests are answered NOT_COORDINATOR
        now)."""
        self._stopped = True
        for handle in self._reloads.values():
            handle.cancel()
        self._reloads.clear()
        for partition in self.coordinator.owned_partitions:
            self._unload(partition)
        self._answer_parked(ErrorCode.NOT_COORDINATOR)
        self.timers.clear()

    def _on_leadership(self, partition: Partition, is_leader: bool) -> None:
        """Coordinators follow leadership: load a partition of the internal topic on becoming its leader (at
        the new leader epoch), unload it on losing it."""
        if partition.topic != self.topic or self._stopped or partition.index >= self.num_partitions:
            return
        reload = self._reloads.pop(partition.index, None)
        if reload is not None:
            reload.cancel()
        if partition.index in self.coordinator.owned_partitions:
            self._unload(partition.index)
        if is_leader:
            self._queue_load(partition.index)

    def _unload(self, partition: int) -> None:
        """Stop coordinating ``partition``: what waits for its commits is answered NOT_COORDINATOR (effects
        dropped), then the coordinator answers its parked requests and drops its timers."""
        self._fail_pending(partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._last_written.pop(partition, None)
        if self.coordinator.is_loading(partition):
            self._loads[partition] = self._loads.get(partition, 0) + 1  # its load (if begun) stops
            self._on_load_ended(partition)
        self.apply(self.coordinator.unload(partition))

    # -- loading ---------------------------------------------------------------------------------------

    def _queue_load(self, partition: int) -> None:
        self._begin_loading(partition)
        self._enqueue_load(partition)

    def _enqueue_load(self, partition: int) -> None:
        self._to_load.append(partition)
        self._load_wakeup.set()

    def _begin_loading(self, partition: int) -> None:
        replica = self._replicas.get(self.topic, partition)
        coordinator_epoch = max(replica.leader_epoch, 0) if replica is not None else 0
        self._loads[partition] = self._loads.get(partition, 0) + 1
        self.coordinator.begin_loading(partition, coordinator_epoch)
        self._on_begin_loading(partition)

    async def _load(self, partition: int) -> None:
        """Replay ``partition``'s log; stops if it is unloaded (or unloaded and loading again) meanwhile,
        leaving what follows to :meth:`_unload` and the newer load."""
        started = time.monotonic()
        count = 0
        generation = self._loads.get(partition)
        try:
            replica = self._replicas.get(self.topic, partition)
            if replica is not None:
                for chunk in read_records(replica, self._load_buffer):
                    count += self._replay(partition, chunk)
                    await asyncio.sleep(0)
                    if self._stopped or self._loads.get(partition) != generation:
                        return
            self._complete_loading(partition, count, started)
        finally:
            if self._loads.get(partition) == generation:
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
        replica = self._replicas.get(self.topic, partition)
        if replica is not None:
            self._last_written[partition] = replica.log_end_offset
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
        """After a failed append or commit the coordinator may be ahead of its log, and the effects it
        dropped must be decided again: unload the partition and, if this broker still leads it, load it
        again. It is loading at once (its keys get COORDINATOR_LOAD_IN_PROGRESS, deleted topics are
        remembered for it); in a cluster its log is replayed only after :data:`RELOAD_BACKOFF_S`."""
        if partition in self.coordinator.owned_partitions:
            self._unload(partition)
        replica = self._replicas.get(self.topic, partition)
        if self._stopped or replica is None or not replica.is_leader:
            return
        if not self._replicas.cluster_mode:
            self._queue_load(partition)
            return
        self._begin_loading(partition)
        generation = self._loads[partition]

        def replay() -> None:
            self._reloads.pop(partition, None)
            if self._loads.get(partition) == generation:  # not unloaded (or loading again) meanwhile
                self._enqueue_load(partition)

        loop = asyncio.get_running_loop()
        self._reloads[partition] = loop.call_later(RELOAD_BACKOFF_S, replay)

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
        """Carry out ``result`` (see the module docstring); returns the request's answer: the response, or
        a future of it when it is parked or waits for a commit. ``producer``: (producer id, epoch) whose
        transactional batch the records form (TxnOffsetCommit)."""
        failure: ErrorCode | None = None
        failed: list[int] = []
        appended: list[int] = []
        for partition, records in result.records.items():
            if not records:
                continue
            error, end_offset = self._append(partition, records, producer)
            if error is not ErrorCode.NONE:
                failure = self.coordinator.append_error_to_response_error(error)
                failed.append(partition)
            elif end_offset is not None:
                appended.append(partition)
                self._last_written[partition] = end_offset
        parked: asyncio.Future[Response] | None = None
        if isinstance(result.response, DeferredResponse):
            assert request is not None
            parked = asyncio.get_running_loop().create_future()
            self._parked[result.response.handle_id] = _Parked(parked, request, api_version)
        for op in result.timers:
            if isinstance(op, ScheduleTimer):
                self.timers.schedule(op.key, op.deadline_ms)
            else:
                assert isinstance(op, CancelTimer)
                self.timers.cancel(op.key)
        if failure is None:
            waits = self._commit_waits(result, request, appended)
            if waits:
                answer = self._wait_for_commit(result, request, api_version, appended, waits)
                return parked if parked is not None else answer
        response = self._settle(result, request, api_version, failure)
        for partition in failed:
            self._reload(partition)
        return parked if parked is not None else response

    def _settle(
        self,
        result: CoordinatorResult[K],
        request: Request | None,
        api_version: int,
        failure: ErrorCode | None,
    ) -> Response | None:
        """Release what ``result`` answers, now that its records are committed (``failure`` None) or will
        not be (the mapped error): its response (returned), the completions of parked requests, and with
        no failure its after-commit effects."""
        response = result.response if isinstance(result.response, Response) else None
        if response is not None and failure is not None and request is not None:
            response = self.coordinator.error_response(request, api_version, failure)
        for handle, completion in result.completions:
            parked = self._parked.pop(handle.handle_id, None)
            if parked is None or parked.future.done():
                continue  # its connection went away, or it was answered when its partition was unloaded
            if failure is not None:
                completion = self.coordinator.error_response(parked.request, parked.api_version, failure)
            parked.future.set_result(completion)
        if failure is None:
            self._after_commit(result)
        return response

    # -- waiting for commits (cluster) -----------------------------------------------------------------

    def _commit_waits(
        self, result: CoordinatorResult[K], request: Request | None, appended: list[int]
    ) -> dict[int, int]:
        """The partitions ``result`` must wait on, with the offset each one's high watermark must reach:
        those it appended to and those of its keys with records not committed yet. Empty on a single node
        (the high watermark moved at the append) and when everything is committed already."""
        if not self._replicas.cluster_mode:
            return {}
        concerned = set(appended)
        if request is not None:
            concerned.update(self.partition_for(key) for key in request_keys(request, self.key_fields))
        concerned.update(self.partition_for(handle.group_id) for handle, _ in result.completions)
        concerned.update(self._effect_partitions(result))
        waits: dict[int, int] = {}
        for partition in concerned:
            offset = self._last_written.get(partition)
            if offset is None:
                continue  # not loaded here: nothing of it was answered from memory
            replica = self._replicas.get(self.topic, partition)
            if replica is None:
                waits[partition] = offset  # gone: the wait answers NOT_LEADER_OR_FOLLOWER
                continue
            done, error = replica.check_enough_replicas_reach_offset(offset)
            if not done or not self._committed(partition in appended, error):
                waits[partition] = offset
        return waits

    @staticmethod
    def _committed(appended: bool, error: ErrorCode) -> bool:
        """Whether a decided wait counts as committed: acks=-1's outcome for this result's own records;
        only the high watermark for records it merely waits behind (an ISR that shrank below
        ``min.insync.replicas`` after they were committed does not uncommit them)."""
        return error == ErrorCode.NONE or (
            not appended and error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        )

    def _wait_for_commit(
        self,
        result: CoordinatorResult[K],
        request: Request | None,
        api_version: int,
        appended: list[int],
        waits: dict[int, int],
    ) -> asyncio.Future[Response] | None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Response] | None = None
        if request is not None and isinstance(result.response, Response):
            answer = loop.create_future()
        statuses = {partition: _CommitStatus() for partition in waits}
        pending = _PendingCommit(result, request, api_version, answer, frozenset(appended), statuses)
        entries = [
            PendingAppend(self.topic, partition, offset, statuses[partition])
            for partition, offset in waits.items()
        ]
        waiting = self._replicas.produce_purgatory.delay(self._commit_timeout_ms, entries, pending)
        if isinstance(waiting, asyncio.Future):
            pending.waiting = waiting
            for partition in statuses:
                self._pending.setdefault(partition, []).append(pending)
            waiting.add_done_callback(lambda _done: self._commit_decided(pending))
        else:
            self._commit_decided(pending)
        return answer

    def _commit_decided(self, pending: _PendingCommit[K]) -> None:
        """The produce purgatory decided every partition ``pending`` waits on."""
        if pending.done:
            return  # its partition was unloaded first
        try:
            failure: ErrorCode | None = None
            failed: list[int] = []
            for partition, status in pending.statuses.items():
                error = ErrorCode(status.error_code)
                if not self._committed(partition in pending.appended, error):
                    failed.append(partition)
                    if failure is None:
                        failure = error
            if failure is not None:
                log.warning(
                    "records of %s-%s were not committed: %s",
                    self.topic,
                    ",".join(str(p) for p in failed),
                    failure.name,
                )
            self._release(pending, failure)
            effects = self._effect_partitions(pending.result)
            for partition in failed:
                # Reload where memory may be ahead of the log or dropped effects must be decided again; a
                # read that only waited behind other records changed nothing.
                if partition in pending.appended or partition in effects:
                    self._reload(partition)
        except Exception:
            log.exception("releasing a result of %s failed", self.topic)

    def _release(self, pending: _PendingCommit[K], failure: ErrorCode | None) -> None:
        pending.done = True
        for partition in pending.statuses:
            waiting = self._pending.get(partition)
            if waiting is not None and pending in waiting:
                waiting.remove(pending)
                if not waiting:
                    del self._pending[partition]
        mapped = None if failure is None else self.coordinator.append_error_to_response_error(failure)
        response = self._settle(pending.result, pending.request, pending.api_version, mapped)
        if pending.answer is not None and not pending.answer.done():
            assert response is not None
            pending.answer.set_result(response)

    def _fail_pending(self, partition: int, error: ErrorCode) -> None:
        """Everything waiting on ``partition``'s commits fails with ``error`` (mapped), effects dropped."""
        for pending in self._pending.pop(partition, []):
            if pending.done:
                continue
            self._release(pending, error)
            if pending.waiting is not None:
                pending.waiting.cancel()  # the purgatory drops it at its next check
        self._replicas.produce_purgatory.check((self.topic, partition))

    def _note_written(self, partition: int, end_offset: int) -> None:
        """Records ending before ``end_offset`` reached ``partition``'s log from elsewhere (a transaction
        marker) and are already applied: what is answered from now on waits for them too."""
        if partition in self._last_written:
            self._last_written[partition] = max(self._last_written[partition], end_offset)

    def _append(
        self, partition: int, records: list[CoordinatorRecord], producer: tuple[int, int] | None
    ) -> tuple[ErrorCode, int | None]:
        """Append ``records`` as one batch; returns the error and the offset after the batch."""
        now = self._clock()
        batch, origin = self._batch(records, now, producer)
        error, info, message = self._replicas.append(
            self.topic,
            partition,
            batch,
            now_ms=now,
            origin=origin,
            required_acks=-1 if self._replicas.cluster_mode else 1,
        )
        if error is not ErrorCode.NONE:
            log.warning(
                "appending %d records to %s-%d failed: %s %s",
                len(records),
                self.topic,
                partition,
                error.name,
                message or "",
            )
        return ErrorCode(error), None if info is None else info.last_offset + 1

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
        """What follows a result whose records are all committed (nothing by default)."""

    def _effect_partitions(self, result: CoordinatorResult[K]) -> set[int]:
        """Partitions whose committed state ``result``'s after-commit effects rest on (none by default)."""
        del result
        return set()

    def _on_begin_loading(self, partition: int) -> None:
        """``partition`` became loading (nothing by default)."""

    def _on_load_ended(self, partition: int) -> None:
        """Loading ``partition`` ended, completed or not (nothing by default)."""

    def _loaded_summary(self, partition: int) -> str:
        """What a loaded partition holds, for the log line."""
        return f"partition {partition}"
