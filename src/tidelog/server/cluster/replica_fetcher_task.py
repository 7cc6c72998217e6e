"""One replica fetcher: an asyncio task that copies every partition this broker follows from one leader
broker into the local replicas (Kafka's ``ReplicaFetcherThread`` over ``AbstractFetcherThread``, with
KIP-595's truncation on fetch: no separate OffsetForLeaderEpoch round).

The loop: wait until some partition is ready, send one Fetch for all ready partitions (each at its log end
offset, with its log's latest epoch as ``LastFetchedEpoch``, its leader epoch as ``CurrentLeaderEpoch`` and
its log start offset), the leader parks it until data arrives or ``replica.fetch.wait.max.ms`` passes, then
apply the answer partition by partition.

Invariants:

- One Fetch in flight per fetcher. Its version is the highest both brokers speak in 12..16 (12 when a
  topic id is not known yet); v13+ names topics by id, v15+ carries ``ReplicaState`` (this broker's id and
  epoch) instead of ``replica_id``.
- A partition's answer is applied only if, at that moment, the fetcher still holds the same state for it
  (not removed, moved to another leader or re-added at another leader epoch meanwhile), not failed, the
  replica's log end offset is still the offset fetched, and the replica manager still hosts that replica
  as a follower of this leader (a deleted replica's log is never written; it leaves the fetcher). Between partitions the task yields to the
  event loop, so a large answer does not hold it.
- NONE: the records (the response frame's bytes, not copied) are appended as follower, then the high
  watermark becomes min(leader's, own log end offset) and the log start offset rises to the leader's (at
  most the high watermark); also when there were no records. With ``DivergingEpoch`` nothing is appended:
  the log is truncated where :meth:`~tidelog.replication.partition.Partition.offset_truncation_state`
  says (KIP-101/279); when that is not final the next fetch asks again with the now lower latest epoch.
- OFFSET_OUT_OF_RANGE (Kafka's ``fetchOffsetAndTruncate``): the leader's log end (ListOffsets LATEST, as a
  replica) below this log's end: truncate to it; else the leader's log start (EARLIEST) above this log's
  end: empty the log and start it there; else back off and fetch again.
- FENCED_LEADER_EPOCH (the leader is at a newer epoch than this replica knows): the partition fails until
  a newer state of it adds it again. Every other error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
  UNKNOWN_TOPIC_ID and UNKNOWN_LEADER_EPOCH while the leader has not applied its own state yet,
  KAFKA_STORAGE_ERROR, ...) delays the partition by ``replica.fetch.backoff.ms``; so does a batch that
  fails validation here (CorruptRecordError: a torn read on the leader is fixed by the next fetch) and any
  unexpected exception while applying it, which is logged. One partition's failure never touches another's.
- Replication throttle (issue 15, Kafka's ``shouldFollowerThrottle``): while the follower quota
  (``follower.replication.throttled.rate``) is exceeded, a partition named by its topic's
  ``follower.replication.throttled.replicas`` that is not caught up (its last answer left a lag) is left out
  of the request and waits until the measured rate is back at the bound; the records appended for
  throttled partitions are what the quota measures.
- A leader that cannot be reached (refused, disconnected, timed out, no common version) delays every
  partition of the request by ``replica.fetch.backoff.ms``; the partitions stay until the metadata moves
  them to another leader. The task ends only when cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse
from tidelog.protocol.records import RecordError
from tidelog.replication.partition import Partition
from tidelog.server.clock import Clock
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.replication_quota import ReplicationQuotaManager
from tidelog.storage import EpochEndOffset
from tidelog.storage.errors import UnexpectedAppendOffsetError

from .broker_client import BrokerClient, BrokerClientError
from .fetch_state import FetcherView, PartitionFetchState, PartitionFetchView
from .fetcher_config import ReplicaFetcherConfig
from .leader_endpoint import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LeaderEndpoint,
    LeaderOffsetError,
    LeaderVersionError,
    error_code,
)

__all__ = ["FETCH_VERSIONS", "ReplicaFetcher"]

log = logging.getLogger("tidelog.replica_fetcher")

FETCH_VERSIONS = (12, min(16, FetchRequest.VALID_VERSIONS[1]))
"""DivergingEpoch needs v12; v13 names topics by id; v15 sends ``ReplicaState``."""
_TOPIC_IDS_FROM = 13
_REPLICA_STATE_FROM = 15
_ZERO_UUID = uuid.UUID(int=0)
_READ_UNCOMMITTED = 0
_FULL_FETCH_EPOCH = -1  # no fetch session (KIP-227): every request names every partition


@dataclass(frozen=True, slots=True)
class _Sent:
    """What one partition of a request asked for."""

    state: PartitionFetchState
    fetch_offset: int


class ReplicaFetcher:
    """Fetches the partitions this broker follows from broker ``leader_id``; see the module docstring."""

    def __init__(
        self,
        leader_id: int,
        fetcher_id: int,
        *,
        replicas: ReplicaManager,
        client: BrokerClient,
        metadata: MetadataCache,
        node_id: int,
        broker_epoch: Callable[[], int],
        clock: Clock,
        config: ReplicaFetcherConfig,
        on_stale: Callable[[TopicPartition], None],
        quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self._replicas = replicas
        self._metadata = metadata
        self._node_id = node_id
        self._broker_epoch = broker_epoch
        self._clock = clock
        self._config = config
        self._on_stale = on_stale
        self._quota = quota
        """The follower replication throttle (``follower.replication.throttled.*``); None: none."""
        self._leader = LeaderEndpoint(client, leader_id, node_id=node_id)
        self._partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests = 0
        self._in_flight = False
        self._version: int | None = None
        self._failures = 0  # requests in a row the leader did not answer
        self._name = f"[ReplicaFetcher replicaId={node_id}, leaderId={leader_id}, fetcherId={fetcher_id}]"

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader={self.leader_id}, fetcher={self.fetcher_id}, partitions={len(self)})"

    # -- membership (called on the event loop, synchronously) ------------------------------------------

    def __len__(self) -> int:
        return len(self._partitions)

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def add(self, partition: Partition) -> None:
        """Fetch ``partition`` from now on, at its leader epoch; the same replica at the same epoch keeps its
        state."""
        tp = TopicPartition(partition.topic, partition.index)
        current = self._partitions.get(tp)
        if (
            current is not None
            and current.partition is partition
            and current.current_leader_epoch == partition.leader_epoch
        ):
            return
        self._partitions[tp] = PartitionFetchState(partition, partition.leader_epoch)
        log.info(
            "%s added %s at leader epoch %d, log end offset %d",
            self._name,
            tp,
            partition.leader_epoch,
            partition.log_end_offset,
        )
        self._wake.set()

    def remove(self, tp: TopicPartition) -> bool:
        removed = self._partitions.pop(tp, None) is not None
        if removed:
            log.info("%s removed %s", self._name, tp)
            self._wake.set()
        return removed

    def partitions(self) -> list[TopicPartition]:
        return list(self._partitions)

    def views(self) -> dict[TopicPartition, PartitionFetchView]:
        now = time.monotonic()
        return {tp: state.view(now, self._topic_id(tp.topic)) for tp, state in self._partitions.items()}

    def view(self) -> FetcherView:
        return FetcherView(
            leader_id=self.leader_id,
            partitions=self.views(),
            requests=self._requests,
            fetch_in_flight=self._in_flight,
            fetch_version=self._version,
        )

    @property
    def requests(self) -> int:
        return self._requests

    @property
    def fetch_in_flight(self) -> bool:
        return self._in_flight

    @property
    def fetch_version(self) -> int | None:
        return self._version

    # -- the task --------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self.run(), name=self._name)

    def stop(self) -> asyncio.Task[None] | None:
        """Cancel the task; returns it (to await) unless it had ended already."""
        task, self._task = self._task, None
        if task is None or task.done():
            return None
        task.cancel()
        return task

    async def run(self) -> None:
        log.info("%s starting", self._name)
        try:
            while True:
                await self._wait_until_ready()
                try:
                    await self._fetch_once()
                except Exception:
                    log.exception("%s fetch round failed; backing off", self._name)
                    self._delay_all("unexpected error (see the broker log)")
        finally:
            self._in_flight = False
            log.info("%s stopped", self._name)

    async def _wait_until_ready(self) -> None:
        while True:
            now = time.monotonic()
            delays = [state.delay_until for state in self._partitions.values() if not state.failed]
            if any(until <= now for until in delays):
                return
            self._wake.clear()
            if not delays:
                await self._wake.wait()
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delays) - now):
                    await self._wake.wait()

    def _delay_all(self, reason: str, sent: dict[TopicPartition, _Sent] | None = None) -> None:
        until = time.monotonic() + self._config.backoff_ms / 1000
        for tp, state in self._partitions.items():
            if state.failed or (sent is not None and (tp not in sent or sent[tp].state is not state)):
                continue
            state.delay(until, reason)

    def _delay(self, state: PartitionFetchState, reason: str) -> None:
        state.delay(time.monotonic() + self._config.backoff_ms / 1000, reason)

    # -- one round -------------------------------------------------------------------------------------

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        info = self._metadata.topic(topic)
        return None if info is None or info.topic_id == _ZERO_UUID else info.topic_id

    def _still_follows(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """The replica is still hosted here (not deleted) and still follows this fetcher's leader."""
        partition = state.partition
        return (
            self._replicas.get(tp.topic, tp.partition) is partition
            and not partition.is_leader
            and partition.leader_id == self.leader_id
        )

    def _ready(self) -> dict[TopicPartition, _Sent]:
        now = time.monotonic()
        sent: dict[TopicPartition, _Sent] = {}
        for tp, state in list(self._partitions.items()):
            if not state.is_ready(now):
                continue
            if not self._still_follows(tp, state):
                log.info("%s %s is no longer a follower of broker %d here", self._name, tp, self.leader_id)
                self._on_stale(tp)
                continue
            if self._throttled(tp, state):
                continue
            sent[tp] = _Sent(state, state.partition.log_end_offset)
        return sent

    def _throttled(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Kafka's ``shouldFollowerThrottle``: a throttled partition not caught up (its last answer left a lag)
        is left out of the request while the follower quota is exceeded, and waits until the measured rate
        is back at the bound (at most ``replica.fetch.backoff.ms``)."""
        quota = self._quota
        if quota is None:
            return False
        now_ms = self._clock.now_ms()
        in_sync = state.lag is not None and state.lag <= 0
        if not quota.should_throttle(tp.topic, tp.partition, in_sync=in_sync, now_ms=now_ms):
            return False
        wait_ms = min(max(quota.throttle_time_ms(now_ms), 1), self._config.backoff_ms)
        state.delay(time.monotonic() + wait_ms / 1000, "follower replication throttled")
        return True

    def _build(
        self, sent: dict[TopicPartition, _Sent], topic_ids: dict[str, uuid.UUID], version: int
    ) -> FetchRequest:
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for tp, asked in sent.items():
            partition = asked.state.partition
            latest_epoch = partition.latest_epoch
            by_topic.setdefault(tp.topic, []).append(
                FetchRequest.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=asked.state.current_leader_epoch,
                    fetch_offset=asked.fetch_offset,
                    last_fetched_epoch=-1 if latest_epoch is None else latest_epoch,
                    log_start_offset=partition.log_start_offset,
                    partition_max_bytes=self._config.fetch_max_bytes,
                )
            )
        topics = []
        for name, partitions in by_topic.items():
            topic = FetchRequest.FetchTopic(partitions=partitions)
            if version >= _TOPIC_IDS_FROM:
                topic.topic_id = topic_ids[name]
            else:
                topic.topic = name
            topics.append(topic)
        request = FetchRequest(
            max_wait_ms=self._config.wait_max_ms,
            min_bytes=self._config.min_bytes,
            max_bytes=self._config.response_max_bytes,
            isolation_level=_READ_UNCOMMITTED,
            session_id=0,
            session_epoch=_FULL_FETCH_EPOCH,
            topics=topics,
        )
        if version >= _REPLICA_STATE_FROM:
            request.replica_state = FetchRequest.ReplicaState(
                replica_id=self._node_id, replica_epoch=self._broker_epoch()
            )
        else:
            request.replica_id = self._node_id
        return request

    async def _fetch_once(self) -> None:
        sent = self._ready()
        if not sent:
            return
        topic_ids: dict[str, uuid.UUID] = {}
        highest = FETCH_VERSIONS[1]
        for tp in sent:
            topic_id = self._topic_id(tp.topic)
            if topic_id is None:
                highest = (
                    _TOPIC_IDS_FROM - 1
                )  # Kafka's fallback: a topic without a known id is fetched by name
            else:
                topic_ids[tp.topic] = topic_id
        self._requests += 1
        self._in_flight = True
        try:
            response, version = await self._leader.send(
                ApiKey.FETCH,
                lambda v: self._build(sent, topic_ids, v),
                (FETCH_VERSIONS[0], highest),
                expect=FetchResponse,
                timeout_ms=self._config.fetch_timeout_ms,
            )
        except (BrokerClientError, LeaderVersionError) as exc:
            self._leader_unreachable(sent, exc)
            return
        finally:
            self._in_flight = False
        self._version = version
        if self._failures:
            log.info("%s broker %d answers again", self._name, self.leader_id)
            self._failures = 0
        top_error = error_code(response.error_code)
        if top_error is not ErrorCode.NONE:
            log.warning("%s Fetch failed with %s; backing off", self._name, top_error.name)
            self._delay_all(f"Fetch failed with {top_error.name}", sent)
            return
        names = {topic_id: name for name, topic_id in topic_ids.items()}
        await self._process(response, version, sent, names)

    def _leader_unreachable(self, sent: dict[TopicPartition, _Sent], exc: Exception) -> None:
        self._failures += 1
        log.log(
            logging.WARNING if self._failures == 1 else logging.DEBUG,
            "%s fetch from broker %d failed (%s); retrying its %d partition(s) every %d ms until it answers or"
            " the partitions move",
            self._name,
            self.leader_id,
            exc,
            len(sent),
            self._config.backoff_ms,
        )
        self._delay_all(f"leader unreachable: {exc}", sent)

    async def _process(
        self,
        response: FetchResponse,
        version: int,
        sent: dict[TopicPartition, _Sent],
        names: dict[uuid.UUID, str],
    ) -> None:
        first = True
        for topic in response.responses:
            name = names.get(topic.topic_id) if version >= _TOPIC_IDS_FROM else topic.topic
            if name is None:
                continue
            for data in topic.partitions:
                tp = TopicPartition(name, data.partition_index)
                request = sent.get(tp)
                if request is None:
                    continue
                if not first:
                    await asyncio.sleep(0)  # a large answer must not hold the event loop
                first = False
                state = request.state
                if self._partitions.get(tp) is not state or state.failed:
                    continue  # removed, moved or re-added while the request was out
                if not self._still_follows(tp, state):  # deleted, or led here, without a word to the manager
                    self._on_stale(tp)
                    continue
                if state.partition.log_end_offset != request.fetch_offset:
                    continue  # truncated meanwhile
                try:
                    await self._apply(tp, state, request, data, version)
                except Exception:
                    log.exception(
                        "%s applying the answer for %s at offset %d failed; backing off",
                        self._name,
                        tp,
                        request.fetch_offset,
                    )
                    self._delay(state, "unexpected error (see the broker log)")

    async def _apply(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        request: _Sent,
        data: FetchResponse.PartitionData,
        version: int,
    ) -> None:
        error = error_code(data.error_code)
        if error is ErrorCode.NONE:
            diverging = data.diverging_epoch
            if version >= 12 and diverging.epoch >= 0:
                self._truncate_on_divergence(tp, state, EpochEndOffset(diverging.epoch, diverging.end_offset))
            else:
                self._append(tp, state, data)
        elif error is ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(tp, state, request)
        elif error is ErrorCode.FENCED_LEADER_EPOCH:
            log.info(
                "%s %s: broker %d is at a newer leader epoch than %d; waiting for the new state before"
                " fetching again",
                self._name,
                tp,
                self.leader_id,
                state.current_leader_epoch,
            )
            state.fail(error.name)
        else:
            if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH):
                level = logging.DEBUG  # the leader has not applied its own state yet
            elif error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID):
                level = logging.WARNING  # transient while the topic is being created or deleted
            else:
                level = logging.ERROR
            log.log(
                level,
                "%s %s: broker %d answered %s at offset %d; retrying in %d ms",
                self._name,
                tp,
                self.leader_id,
                error.name,
                request.fetch_offset,
                self._config.backoff_ms,
            )
            self._delay(state, error.name)

    def _append(
        self, tp: TopicPartition, state: PartitionFetchState, data: FetchResponse.PartitionData
    ) -> None:
        partition = state.partition
        now_ms = self._clock.now_ms()
        records = data.records
        appended = False
        if records is not None:
            if not isinstance(records, bytes | bytearray | memoryview):
                raise TypeError(f"records of {tp} arrived as {type(records).__name__}")
            if memoryview(records).nbytes:
                try:
                    partition.append_records_as_follower(records, now_ms=now_ms)
                except (RecordError, UnexpectedAppendOffsetError) as exc:
                    log.error(
                        "%s %s: the leader's batches at offset %d cannot be appended (%s); fetching them again"
                        " in %d ms",
                        self._name,
                        tp,
                        partition.log_end_offset,
                        exc,
                        self._config.backoff_ms,
                    )
                    self._delay(state, f"{type(exc).__name__}: {exc}")
                    return
                appended = True
                if self._quota is not None and self._quota.is_throttled(tp.topic, tp.partition):
                    self._quota.record(memoryview(records).nbytes, now_ms)
        partition.update_follower_high_watermark(data.high_watermark)
        if data.log_start_offset >= 0:
            partition.maybe_increment_log_start_offset(data.log_start_offset, now_ms=now_ms)
        state.fetched(max(0, data.high_watermark - partition.log_end_offset))
        if appended:  # Kafka's updateAndMoveToEnd: partitions that got nothing go first next time
            self._partitions[tp] = self._partitions.pop(tp)

    def _truncate_on_divergence(
        self, tp: TopicPartition, state: PartitionFetchState, leader: EpochEndOffset
    ) -> None:
        partition = state.partition
        truncation = partition.offset_truncation_state(leader, fetch_offset=partition.high_watermark)
        high_watermark = partition.high_watermark
        log.info(
            "%s %s: the log diverged from broker %d's (its epoch %d ends at %d); truncating from %d to %d%s",
            self._name,
            tp,
            self.leader_id,
            leader.epoch,
            leader.end_offset,
            partition.log_end_offset,
            truncation.offset,
            "" if truncation.truncation_completed else " and asking again with the epoch before",
        )
        if truncation.offset < high_watermark:
            log.warning(
                "%s %s: truncating to %d, below the high watermark %d",
                self._name,
                tp,
                truncation.offset,
                high_watermark,
            )
        partition.truncate_to(truncation.offset, now_ms=self._clock.now_ms())
        state.error = None

    async def _handle_out_of_range(
        self, tp: TopicPartition, state: PartitionFetchState, request: _Sent
    ) -> None:
        """Kafka's ``fetchOffsetAndTruncate``, asking the leader with ListOffsets."""

        def unchanged() -> bool:
            return (
                self._partitions.get(tp) is state
                and not state.failed
                and state.partition.log_end_offset == request.fetch_offset
            )

        partition = state.partition
        try:
            leader_end = await self._leader.list_offset(
                tp, current_leader_epoch=state.current_leader_epoch, timestamp=LATEST_TIMESTAMP
            )
            if not unchanged():
                return
            replica_end = partition.log_end_offset
            if leader_end < replica_end:
                log.warning(
                    "%s %s: offset %d is out of range and broker %d's log ends at %d: truncating to it",
                    self._name,
                    tp,
                    replica_end,
                    self.leader_id,
                    leader_end,
                )
                partition.truncate_to(leader_end, now_ms=self._clock.now_ms())
                state.fetched(0)
                return
            leader_start = await self._leader.list_offset(
                tp, current_leader_epoch=state.current_leader_epoch, timestamp=EARLIEST_TIMESTAMP
            )
            if not unchanged():
                return
            if leader_start > replica_end:
                log.warning(
                    "%s %s: offset %d is out of range and broker %d's log starts at %d: starting over there",
                    self._name,
                    tp,
                    replica_end,
                    self.leader_id,
                    leader_start,
                )
                partition.truncate_fully_and_start_at(leader_start, now_ms=self._clock.now_ms())
                state.fetched(max(0, leader_end - leader_start))
                return
            log.info(
                "%s %s: offset %d was out of range but broker %d's log now covers it (%d-%d); fetching again",
                self._name,
                tp,
                replica_end,
                self.leader_id,
                leader_start,
                leader_end,
            )
            self._delay(state, "OFFSET_OUT_OF_RANGE")
        except LeaderOffsetError as exc:
            if exc.error_code is ErrorCode.FENCED_LEADER_EPOCH:
                state.fail(exc.error_code.name)
            else:
                log.info("%s %s: %s; retrying in %d ms", self._name, tp, exc, self._config.backoff_ms)
                self._delay(state, exc.error_code.name)
        except (BrokerClientError, LeaderVersionError) as exc:
            log.info(
                "%s %s: ListOffsets failed (%s); retrying in %d ms",
                self._name,
                tp,
                exc,
                self._config.backoff_ms,
            )
            self._delay(state, f"leader unreachable: {exc}")
