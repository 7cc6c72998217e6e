"""Fetch (key 1): record data served from the segment files, with long polling.

Invariants:
- Consumers read only below the high watermark (or the last stable offset under read_committed). Every
  answer carries the partition's last stable offset; a read_committed one also the aborted transactions
  overlapping the returned batches (Kafka's rule: marker at or after the fetch offset, first offset before
  the end of the data), so the client drops their records; read_uncommitted gets null there.
- Record bytes are pulled into Python only for small reads: a partition's data of one file region up to
  16 KiB (64 KiB for a read shared by the waiting fetches one change completes) is read into memory and
  goes out in the frame's one write (:mod:`tidelog.server.shared_reads`); larger data is a list of file
  regions that the connection writes with ``os.sendfile``.
- ``partition_max_bytes`` bounds each partition and ``max_bytes`` (v3+) the whole response, except that the
  first batch of the first partition with data is always sent whole so a consumer can make progress
  (KIP-74).
- If fewer than ``min_bytes`` are available and ``max_wait_ms`` > 0, the fetch waits in the purgatory,
  watching its partitions (a :class:`~tidelog.server.fetch_wait.FetchWait`: a change to one partition costs
  O(1), counted from the appended batch sizes, never a re-read), and completes as soon as enough data is
  visible, a watched partition's leadership changes, or the wait expires; either way the response is built
  once at completion, from a fresh read of the partitions that changed while it waited (a consumer fetch
  that found nothing answers its other partitions as they were when it parked: each stays as it was until a
  change of it reaches the wait; an incremental session fetch reads what it read when it began plus what
  changed), so a wake-up costs the partitions that changed, not all those watched. A fetch of one partition
  (or a follower's) that is led here, readable and at its fetchable end is parked without building a first
  answer it would throw away; if it is a sessionless consumer fetch and no change of its partitions reached
  the wait, its answer at expiry is those partitions' high watermark, last stable offset and log start then,
  no records, without a read (a partition no longer led here, fenced or with data past the fetch offset is
  read as usual). The common long poll, a sessionless consumer fetch of one partition so parked, takes one
  step (:meth:`FetchHandler._park_caught_up`: one :class:`~tidelog.server.fetch_purgatory.ParkedFetch`
  that is its own wait, no first answer, no session or follower bookkeeping) with the same answers as the
  general path; its quiet answer at expiry is shared by the expired fetches of that partition while its
  offsets and topic id stay as they were, and frozen in the codec (encoded once per version). The same
  fetch with records waiting and ``min_bytes`` 1 (a consumer behind) is read and answered there in one
  step as well (an error is the general path's to answer). Sessionless consumer fetches completed by the
  same change that asked the same thing get one shared answer (frozen when a second one asks:
  :func:`~tidelog.server.shared_reads.answer_key`).
- A consumer's full fetch of many partitions (issue 17: librdkafka and aiokafka send one each poll, without
  sessions) costs little per idle partition: its first read watches each partition from the same lookup
  (one lookup and one :meth:`~tidelog.replication.partition.Partition.offset_snapshot` per partition, no
  second pass to watch); a partition at its fetchable end is answered with the answer kept for it (per
  isolation) while its high watermark, last stable offset and log start stay as they were (never changed
  once made: answers share it); and a wait that no change reached is answered, at expiry, with that first
  read as it is (what reading it again with every partition answered as it was gives).
- A follower's fetch (``replica_id`` >= 0, or ``ReplicaState`` from v15) reads everything the leader has
  (not only below the high watermark). Its fetch offset is recorded as the follower's log end offset once
  per request, before any wait (moving the high watermark and, when it caught up, proposing it for the
  ISR), unless its log diverged: then the answer carries ``DivergingEpoch`` (the leader's end of the
  follower's last fetched epoch, KIP-320/595) and no records, at once; when this log has no end for that
  epoch (it knows no epoch that old), OFFSET_OUT_OF_RANGE instead (an epoch of -1 is no DivergingEpoch to a
  follower), and the follower asks for this log's bounds.
- Replication throttle (issue 15, Kafka's ``shouldLeaderThrottle``): while the leader quota
  (``leader.replication.throttled.rate``) is exceeded, a follower out of the ISR gets no records for the
  partitions its topic's ``leader.replication.throttled.replicas`` names on this broker (the rest of the
  answer is as usual); the record bytes answered to followers for those partitions are what it measures.
- Authorization (Kafka's): a consumer needs READ on each topic, a follower CLUSTER_ACTION on the cluster;
  otherwise the topic's partitions answer TOPIC_AUTHORIZATION_FAILED (before existence is looked at, except
  an unknown topic id, which names nothing).
- Fetch sessions (KIP-227, v7+): through the broker's session cache (:mod:`tidelog.server.fetch_sessions`,
  :mod:`.fetch_session_view`), an incremental request reads the partitions of its session that may have
  news (named, changed since it was last served, or left unread) and its answer carries only those with
  news; an unknown session or a wrong epoch is answered at once with
  FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH and no partitions. Without a cache every
  answer's ``session_id`` is 0 (sessions declined). The long-poll wait and its ``min_bytes`` count cover
  the whole session.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable

from tidelog.protocol.codec import constructor, freeze_response, thaw_response
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import FetchRequest, FetchResponse
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.dispatch import RequestContext
from tidelog.server.fetch_purgatory import FetchPurgatory, ParkedFetch
from tidelog.server.fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    ContextKind,
    FetchContext,
    FetchSessionCache,
)
from tidelog.server.fetch_wait import COMPLETE, FetchWait, progress
from tidelog.server.handlers.authz import Authz, cluster_allowed, topic_allowed
from tidelog.server.handlers.fetch_session_view import Wanted, open_context, session_answer
from tidelog.server.handlers.leader_hint import LeaderHints
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.regions import RegionList
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.replication_quota import ReplicationQuotaManager
from tidelog.server.security.acl import AclOperation
from tidelog.server.shared_reads import SINGLE_INLINE_BYTES, answer_key, inline
from tidelog.storage import EpochEndOffset

__all__ = ["FetchHandler"]

_READ_COMMITTED = 1
_EMPTY = b""
_ZERO_UUID = uuid.UUID(int=0)
_PartitionData = FetchResponse.PartitionData
# The answer's structs without their keyword __init__ (issue 17: one per answered partition and topic).
_new_partition = constructor(
    _PartitionData,
    "partition_index",
    "high_watermark",
    "last_stable_offset",
    "log_start_offset",
    "aborted_transactions",
    "records",
)
_new_error = constructor(
    _PartitionData,
    "partition_index",
    "error_code",
    "high_watermark",
    "last_stable_offset",
    "log_start_offset",
    "aborted_transactions",
    "records",
)


def _error_partition(index: int, error: ErrorCode) -> _PartitionData:
    """A partition answered ``error`` (no offsets, no records)."""
    return _new_error(index, error, -1, -1, -1, None, _EMPTY)


_new_topic = constructor(FetchResponse.FetchableTopicResponse, "topic", "topic_id", "partitions")
_new_response = constructor(FetchResponse, "error_code", "session_id")
_new_answer = constructor(FetchResponse, "error_code", "session_id", "responses")
_NONE = ErrorCode.NONE


def _size(records: object) -> int:
    if records is None:
        return 0
    if isinstance(records, bytes | bytearray):
        return len(records)
    if isinstance(records, memoryview):
        return records.nbytes
    nbytes = getattr(records, "nbytes", 0)
    return nbytes if isinstance(nbytes, int) else 0


def _unchanged(
    first: FetchResponse | None, wanted: list[Wanted], wait: FetchWait
) -> dict[Hashable, _PartitionData] | None:
    """A woken fetch's partitions answered as in ``first`` (its first read, when it found nothing: see
    :meth:`FetchHandler.handle`), those no change reached while it waited; None: read them all."""
    changed = wait.changed_keys
    if first is None or len(changed) >= wait.watching:
        return None
    return {
        key: result
        for w, topic in zip(wanted, first.responses, strict=True)
        for result in topic.partitions
        if (key := (w.name, result.partition_index)) not in changed
    }


IdleAnswers = dict[tuple[str, int], tuple[tuple[int, int, int], _PartitionData]]

_QUIET_ANSWERS = 1 << 16
"""At most this many partitions' quiet answers are kept, per isolation (then they are all dropped)."""


_IDLE_ANSWERS = 1 << 16
"""At most this many partitions' idle answers (:attr:`FetchHandler._idle`) are kept, per isolation (then
they are all dropped)."""


class _Quiet:
    """The quiet answer at expiry of a fetch :meth:`FetchHandler._park_caught_up` parked (what
    :meth:`FetchHandler._quiet_answer` builds for its one partition), shared by the expired fetches of that
    partition while its offsets and topic id stay as they were, and frozen (issue 17: encoded once per
    version, :func:`~tidelog.protocol.codec.freeze_response`). Nothing downstream changes a consumer's
    answer (a throttled one is replaced, as with :mod:`tidelog.server.shared_reads`' shared answers)."""

    __slots__ = ("high_watermark", "last_stable", "log_start", "response", "topic_id")

    def __init__(
        self,
        topic: str,
        topic_id: uuid.UUID,
        index: int,
        high_watermark: int,
        last_stable: int,
        log_start: int,
        *,
        committed: bool,
    ) -> None:
        self.high_watermark = high_watermark
        self.last_stable = last_stable
        self.log_start = log_start
        self.topic_id = topic_id
        result = _new_partition(
            index, high_watermark, last_stable, log_start, [] if committed else None, _EMPTY
        )
        self.response = _new_answer(_NONE, 0, [_new_topic(topic, topic_id, [result])])

    def remember(self, answers: dict[Hashable, _Quiet], key: Hashable) -> None:
        """Keep this as ``key``'s quiet answer, in place of (and thawing) the one before."""
        before = answers.pop(key, None)
        if before is not None:
            thaw_response(before.response)
        if len(answers) >= _QUIET_ANSWERS:
            for dropped in answers.values():
                thaw_response(dropped.response)
            answers.clear()
        freeze_response(self.response)
        answers[key] = self


class _Parked(ParkedFetch[FetchResponse]):
    """A fetch :meth:`FetchHandler._park_caught_up` parked (a sessionless consumer fetch of one partition, at
    its fetchable end): its own one-partition wait (what a :class:`FetchWait` keeps per partition, decided by
    :func:`~tidelog.server.fetch_wait.progress`) and what its answer needs."""

    __slots__ = (
        "accumulated",
        "counted_end",
        "ctx",
        "current_leader_epoch",
        "fetch_offset",
        "handler",
        "index",
        "isolation",
        "leader_epoch",
        "request",
        "topic",
        "topic_id",
        "version",
        "woken",
    )

    def __init__(
        self,
        handler: FetchHandler,
        ctx: RequestContext,
        request: FetchRequest,
        version: int,
        topic: str,
        topic_id: uuid.UUID,
        index: int,
        fetch_offset: int,
        current_leader_epoch: int,
        partition: Partition,
    ) -> None:
        self.handler = handler
        self.ctx = ctx
        self.request = request
        self.version = version
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.fetch_offset = fetch_offset
        self.counted_end = fetch_offset
        self.current_leader_epoch = current_leader_epoch
        self.leader_epoch = partition.leader_epoch
        self.accumulated = 0
        self.woken = False
        """A change of its partition reached it (then its answer is read, not the quiet one)."""
        self.isolation: FetchIsolation

    def changed(self, key: Hashable) -> bool:
        self.woken = True
        handler = self.handler
        added = progress(
            self,
            handler._replicas.leader_partition(self.topic, self.index),
            self.isolation,
            handler._purgatory.appended_bytes,
            key,
        )
        if added < 0:
            return added == COMPLETE
        self.accumulated += added
        return self.accumulated >= self.request.min_bytes

    def answer(self) -> FetchResponse:
        handler = self.handler
        if handler._purgatory.shared_reads is None and not self.woken:  # expired, nothing changed since
            # _quiet_answer for its one partition
            partition = handler._replicas.leader_partition(self.topic, self.index)
            epoch = self.current_leader_epoch
            if not isinstance(partition, ErrorCode) and (epoch < 0 or epoch == partition.leader_epoch):
                high_watermark = partition.high_watermark
                last_stable = partition.last_stable_offset
                committed = self.isolation is FetchIsolation.TXN_COMMITTED
                if self.fetch_offset == (last_stable if committed else high_watermark):
                    log_start = partition.log_start_offset
                    answers = handler._quiet_answers[committed]
                    quiet = answers.get(self.key)
                    if (
                        quiet is None
                        or quiet.high_watermark != high_watermark
                        or quiet.last_stable != last_stable
                        or quiet.log_start != log_start
                        or (quiet.topic_id is not self.topic_id and quiet.topic_id != self.topic_id)
                    ):
                        quiet = _Quiet(
                            self.topic,
                            self.topic_id,
                            self.index,
                            high_watermark,
                            last_stable,
                            log_start,
                            committed=committed,
                        )
                        quiet.remember(answers, self.key)
                    return quiet.response
        request = self.request
        version = self.version
        shared = handler._purgatory.shared_reads
        key: Hashable = None
        if shared is not None:
            # answer_key's tuple for this one partition, made directly (a woken fetch of a fan-out mostly
            # finds the answer another fetch of the pass built)
            max_bytes = min(request.max_bytes if version >= 3 else 0x7FFFFFFF, handler._fetch_max_bytes)
            [p] = request.topics[0].partitions
            key = (
                version,
                self.isolation,
                max_bytes,
                self.ctx.listener_name,
                (
                    (
                        self.topic,
                        self.topic_id,
                        False,
                        ((self.index, self.fetch_offset, p.partition_max_bytes, self.current_leader_epoch),),
                    ),
                ),
            )
            found = shared.built(key)
            if found is not None:
                return handler._bytes_out(found) if handler._replicas.topic_metrics is not None else found
        wanted = [Wanted(self.topic, self.topic_id, request.topics[0].partitions)]
        return handler._woken(self.ctx, request, version, wanted, self.isolation, key)


class FetchHandler:
    """Fetch: reads through the replica manager's partitions, long polls in the fetch purgatory."""

    def __init__(
        self,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        purgatory: FetchPurgatory,
        authz: Authz = None,
        sessions: FetchSessionCache | None = None,
        now_ms: Callable[[], int] = lambda: 0,
        *,
        fetch_max_bytes: int = 0x7FFFFFFF,
        leader_quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._purgatory = purgatory
        self._authz = authz
        self._sessions = sessions
        """KIP-227 sessions (None: declined, every answer's session id is 0)."""
        self._now_ms = now_ms
        self._fetch_max_bytes = fetch_max_bytes
        """The broker's ``fetch.max.bytes``: a consumer's ``max_bytes`` is capped by it (Kafka's rule)."""
        self._leader_quota = leader_quota
        """Issue 15: the leader replication throttle (``leader.replication.throttled.*``); None: none."""
        self._quiet_answers: tuple[dict[Hashable, _Quiet], dict[Hashable, _Quiet]] = ({}, {})
        """The one-step park's quiet answers by partition, read_uncommitted then read_committed (``_Quiet``)."""
        self._idle: tuple[IdleAnswers, IdleAnswers] = ({}, {})
        """Per partition, read_uncommitted then read_committed, the answer :meth:`_read` gave it last at its
        fetchable end (no records, no error) and the offset snapshot it carries: given again, the same
        object, while that snapshot is the partition's (issue 17: a consumer's full fetch of many idle
        partitions answers each so, each poll). Never changed once made (answers share it)."""

    def handle(self, ctx: RequestContext, request: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
        version = ctx.api_version
        topics = request.topics
        if (
            request.max_wait_ms > 0
            and request.min_bytes > 0
            and len(topics) == 1
            and len(topics[0].partitions) == 1
            and request.session_id == INVALID_SESSION_ID
            and request.session_epoch == FINAL_EPOCH
            and (request.replica_state.replica_id if version >= 15 else request.replica_id) < 0
        ):
            one_step = self._park_caught_up(ctx, request, version)
            if one_step is not None:
                return one_step
        wanted: list[Wanted] = []
        for topic in request.topics:
            if version >= 13:
                wanted.append(
                    Wanted(self._metadata.topic_name(topic.topic_id), topic.topic_id, topic.partitions)
                )
            else:
                meta = self._metadata.topic(topic.topic)
                wanted.append(Wanted(topic.topic, meta.topic_id if meta else _ZERO_UUID, topic.partitions))
        replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
        context: FetchContext | None = None
        # a session's: what a wait watches, and what is read when it ends (None: the request's own ``wanted``)
        watched: Callable[[], list[Wanted]] | None = None
        reread: Callable[[Iterable[Hashable]], list[Wanted]] | None = None
        if (
            version >= 7
            and self._sessions is not None
            and (request.session_epoch != FINAL_EPOCH or request.session_id != INVALID_SESSION_ID)
        ):  # (sessionless and closing none: the cache has nothing to do, the answer's session id is 0)
            context, wanted, watched, reread = open_context(
                self._sessions,
                request,
                wanted,
                version=version,
                topic_name=self._metadata.topic_name,
                topic_id=self._topic_id,
                privileged=replica_id >= 0,
                now_ms=self._now_ms(),
                change_count=self._purgatory.change_count,
                last_change=self._purgatory.last_change,
            )
            if context.kind is ContextKind.ERROR:
                return FetchResponse(error_code=context.error, session_id=0)
        committed = version >= 4 and request.isolation_level == _READ_COMMITTED
        if self._authz is not None:
            if replica_id >= 0:
                follower_denied = not cluster_allowed(self._authz, ctx, AclOperation.CLUSTER_ACTION)
                for w in wanted:
                    w.denied = follower_denied
            else:
                for w in wanted:
                    w.denied = w.name is not None and not topic_allowed(
                        self._authz, ctx, AclOperation.READ, w.name
                    )
        if replica_id >= 0:
            isolation = FetchIsolation.LOG_END
            broker_epoch = request.replica_state.replica_epoch if version >= 15 else -1
            diverged = self._follower_fetch(wanted, version, replica_id, broker_epoch)
        else:
            isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
            diverged = {}
        max_bytes = request.max_bytes if version >= 3 else 0x7FFFFFFF
        if replica_id < 0:
            max_bytes = min(max_bytes, self._fetch_max_bytes)

        def build(
            wanted: list[Wanted],
            earlier: dict[Hashable, _PartitionData] | None = None,
            wait: FetchWait | None = None,
        ) -> tuple[FetchResponse, int, bool]:
            response, nbytes, has_error = self._read(
                wanted, version, isolation, max(max_bytes, 0), diverged, replica_id, earlier, wait
            )
            if has_error and version >= 12:
                self._leader_hints(response, version, ctx.listener_name)
            return response, nbytes, has_error

        count_out = replica_id < 0 and self._replicas.topic_metrics is not None
        quota = self._leader_quota if replica_id >= 0 else None

        def answer(wanted: list[Wanted], response: FetchResponse) -> FetchResponse:
            if quota is not None:
                self._record_throttled(quota, response)
            if context is not None:
                response = session_answer(context, wanted, response, committed=committed)
            return self._bytes_out(response) if count_out else response

        response: FetchResponse | None = None
        parked: FetchWait | None = (
            None  # a wait filled by _caught_up (a sessionless fetch's: it waits on wanted)
        )
        if (
            request.max_wait_ms > 0
            and request.min_bytes > 0
            and (replica_id >= 0 or (len(wanted) == 1 and len(wanted[0].partitions) == 1))
        ):
            if context is None:
                parked = self._new_wait(request.min_bytes, 0, isolation)
            caught_up = self._caught_up(wanted, version, isolation, diverged, replica_id, parked)
            if not caught_up:
                parked = None
        else:
            caught_up = False
        if caught_up:
            nbytes = 0  # it waits: its answer is built at completion, not now (issue 17)
        else:
            if context is None and request.max_wait_ms > 0 and request.min_bytes > 0:
                # a sessionless fetch waits on wanted: its first read watches each partition from the same
                # look (one lookup per partition, not one to read and one to watch)
                parked = self._new_wait(request.min_bytes, 0, isolation)
            response, nbytes, has_error = build(wanted, None, parked)
            if request.max_wait_ms <= 0 or nbytes >= request.min_bytes or has_error:
                return answer(wanted, response)
            if parked is not None:
                if parked.watching:
                    parked.accumulated = nbytes
                else:
                    parked = None  # it watches nothing: as below

        if parked is not None:
            waiting, wait = wanted, parked
        else:
            # an incremental fetch reads what may have news, but waits on its whole session
            waiting = watched() if watched is not None else wanted
            if not waiting:
                return answer(wanted, response if response is not None else build(wanted)[0])
            wait = self._new_wait(request.min_bytes, nbytes, isolation)
            for w in waiting:
                if w.name is None:
                    continue
                for p in w.partitions:
                    epoch = p.current_leader_epoch if version >= 9 else -1
                    if not wait.watch(w.name, p.partition, p.fetch_offset, epoch):
                        return answer(wanted, response if response is not None else build(wanted)[0])
        # A consumer's partitions that do not change while it waits are answered as when it parked, so a
        # wake-up reads only what changed. Only when its first read found nothing: every partition was then
        # caught up without an error (none was left unread for max_bytes) and stays so until a change of it
        # (an append, a high watermark, last stable offset or leadership move, DeleteRecords) reaches the
        # wait; a log start moved by retention meanwhile shows in the next answer. Not for a follower (its
        # throttle changes without one), nor for one partition (nothing to keep: the first read is not held).
        first = (
            response if response is not None and replica_id < 0 and not nbytes and wait.watching > 1 else None
        )

        if replica_id >= 0 or (context is not None and context.session is not None):
            # what it read now and what changed while it waited (an incremental fetch: not its whole session)
            def complete_session() -> FetchResponse:
                again = reread(wait.changed_keys) if reread is not None else wanted
                return answer(again, build(again, _unchanged(first, wanted, wait))[0])

            return self._purgatory.delay(wait, request.max_wait_ms, complete_session)

        # a sessionless consumer: fetches woken together that asked the same share one answer
        unread = response is None  # parked caught up, without a first read

        def complete() -> FetchResponse:
            shared = self._purgatory.shared_reads
            if shared is None:  # expired, or shutdown: answered alone
                if not wait.changed_keys:  # nothing changed since it parked
                    kept = self._kept_answer(first)
                    if kept is not None:
                        return answer(waiting, kept)
                    if unread:  # parked caught up
                        quiet = self._quiet_answer(waiting, version, isolation)
                        if quiet is not None:
                            quiet.session_id = context.response_session_id if context is not None else 0
                            return quiet
                return answer(waiting, build(waiting, _unchanged(first, wanted, wait))[0])

            def answer_once() -> tuple[FetchResponse, bool]:
                response, _, has_error = build(waiting, _unchanged(first, wanted, wait))
                if context is not None:  # no session: this only sets the answer's session id (0)
                    response = session_answer(context, waiting, response, committed=committed)
                return response, has_error

            key = answer_key(
                waiting, version=version, isolation=isolation, max_bytes=max_bytes, listener=ctx.listener_name
            )
            response = shared.answer(key, answer_once)
            return self._bytes_out(response) if count_out else response

        return self._purgatory.delay(wait, request.max_wait_ms, complete)

    def _park_caught_up(
        self, ctx: RequestContext, request: FetchRequest, version: int
    ) -> FetchResponse | Awaitable[FetchResponse] | None:
        """The common long poll in one step (issue 17): a sessionless consumer fetch of one partition, led
        here, readable by this client and at its fetchable end, is parked as :meth:`handle` parks it (what
        :meth:`_caught_up` checks, without a first read, its answer at expiry :meth:`_quiet_answer`'s) as one
        :class:`_Parked` in the purgatory's queues instead of the general path's wait and closures. Such a
        fetch with records waiting below that end and ``min_bytes`` 1 (a consumer behind) is read and
        answered at once, as the general path answers it. None when it is neither (or the purgatory declines
        it, or the read has an error): :meth:`handle` then takes the general path, which looks again and
        answers any error at once."""
        topic = request.topics[0]
        if version >= 13:
            topic_id = topic.topic_id
            name = self._metadata.topic_name(topic_id)
            if name is None:
                return None
        else:
            name = topic.topic
            meta = self._metadata.topic(name)
            topic_id = meta.topic_id if meta else _ZERO_UUID
        authz = self._authz
        if authz is not None and not topic_allowed(authz, ctx, AclOperation.READ, name):
            return None
        p = topic.partitions[0]
        partition = self._replicas.leader_partition(name, p.partition)
        if isinstance(partition, ErrorCode):
            return None
        epoch = p.current_leader_epoch if version >= 9 else -1
        if epoch >= 0 and epoch != partition.leader_epoch:
            return None  # fenced (Partition.check_leader_epoch)
        committed = version >= 4 and request.isolation_level == _READ_COMMITTED
        fetch_offset = p.fetch_offset
        end = partition.last_stable_offset if committed else partition.high_watermark
        if fetch_offset != end:
            if fetch_offset > end or request.min_bytes != 1:
                return None
            # records waiting (a consumer behind): handle's answer for it, read at once (min_bytes 1: its first
            # batch is enough), without the general path's session, wait and closures; any error (out of
            # range, a log gone) is the general path's to answer
            isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
            max_bytes = min(request.max_bytes if version >= 3 else 0x7FFFFFFF, self._fetch_max_bytes)
            response, nbytes, has_error = self._read(
                [Wanted(name, topic_id, topic.partitions)], version, isolation, max(max_bytes, 0), {}, -1
            )
            if has_error or nbytes < 1:
                return None
            return self._bytes_out(response) if self._replicas.topic_metrics is not None else response
        parked = _Parked(
            self, ctx, request, version, name, topic_id, p.partition, fetch_offset, epoch, partition
        )
        parked.isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
        return self._purgatory.park(parked, (name, p.partition), request.max_wait_ms)

    def _woken(
        self,
        ctx: RequestContext,
        request: FetchRequest,
        version: int,
        wanted: list[Wanted],
        isolation: FetchIsolation,
        key: Hashable = None,
    ) -> FetchResponse:
        """The answer of a fetch :meth:`_park_caught_up` parked that a change reached (or whose partition is
        no longer as it was), read as :meth:`handle`'s sessionless ``complete`` reads it (with the fetches
        woken by the same change that asked the same, one answer). ``key``: its
        :func:`~tidelog.server.shared_reads.answer_key`, when the caller made it."""
        max_bytes = min(request.max_bytes if version >= 3 else 0x7FFFFFFF, self._fetch_max_bytes)
        listener = ctx.listener_name

        def build() -> tuple[FetchResponse, bool]:
            response, _, has_error = self._read(wanted, version, isolation, max(max_bytes, 0), {}, -1)
            if has_error and version >= 12:
                self._leader_hints(response, version, listener)
            return response, has_error

        shared = self._purgatory.shared_reads
        if shared is None:
            response = build()[0]
        else:
            if key is None:
                key = answer_key(
                    wanted, version=version, isolation=isolation, max_bytes=max_bytes, listener=listener
                )
            response = shared.answer(key, build)
        return self._bytes_out(response) if self._replicas.topic_metrics is not None else response

    def _caught_up(
        self,
        wanted: list[Wanted],
        version: int,
        isolation: FetchIsolation,
        diverged: dict[tuple[str, int], EpochEndOffset],
        replica_id: int,
        wait: FetchWait | None = None,
    ) -> bool:
        """Whether :meth:`_read` would find no byte and no error in any partition of ``wanted`` (each led here,
        readable by this client, at its fetchable end): then a fetch that waits is parked without building the
        answer it would throw away. False whenever in doubt (the caller then reads). ``wait``: watches each
        partition found so, from the same look (then complete only when True is returned)."""
        lookup = self._replicas.leader_partition
        for topic in wanted:
            name = topic.name
            if name is None or topic.denied:
                return False
            for p in topic.partitions:
                partition = lookup(name, p.partition)
                if isinstance(partition, ErrorCode):
                    return False
                if replica_id >= 0 and (
                    replica_id not in partition.assignment or (name, p.partition) in diverged
                ):
                    return False
                epoch = p.current_leader_epoch if version >= 9 else -1
                if partition.check_leader_epoch(epoch) is not ErrorCode.NONE:
                    return False
                if p.fetch_offset != partition.fetchable_offset(isolation):
                    return False
                if wait is not None:
                    wait.watch_led(name, p.partition, p.fetch_offset, epoch, partition, p.fetch_offset)
        return True

    def _new_wait(self, min_bytes: int, accumulated: int, isolation: FetchIsolation) -> FetchWait:
        return FetchWait(
            min_bytes=min_bytes,
            accumulated=accumulated,
            isolation=isolation,
            lookup=self._replicas.leader_partition,
            appended=self._purgatory.appended_bytes,
        )

    @staticmethod
    def _kept_answer(first: FetchResponse | None) -> FetchResponse | None:
        """The answer of a sessionless consumer fetch that waited after its first read found nothing, when no
        change reached it: that first read, given as it is (what reading it again with every partition
        answered as it was, :func:`_unchanged`, builds: the same partitions, no error, no leader hint)."""
        return first

    def _quiet_answer(
        self, wanted: list[Wanted], version: int, isolation: FetchIsolation
    ) -> FetchResponse | None:
        """The answer at expiry of a consumer fetch parked caught up (:meth:`_caught_up`) that no change
        reached while it waited: per partition its high watermark, last stable offset and log start now, no
        records, no error, without a log read (issue 17). None (the caller reads as usual) if a partition is
        not so any more: no longer led here, fenced, or with data past the fetch offset."""
        lookup = self._replicas.leader_partition
        if isolation is FetchIsolation.LOG_END:
            return None  # a follower's: its answers go through _read (throttle, divergence)
        committed = isolation is FetchIsolation.TXN_COMMITTED
        response = _new_response(ErrorCode.NONE, 0)
        topics = response.responses
        for topic in wanted:
            name = topic.name
            if name is None or topic.denied:
                return None
            results = []
            for p in topic.partitions:
                partition = lookup(name, p.partition)
                if isinstance(partition, ErrorCode):
                    return None
                epoch = p.current_leader_epoch if version >= 9 else -1
                if epoch >= 0 and epoch != partition.leader_epoch:
                    return None  # fenced (Partition.check_leader_epoch)
                high_watermark = partition.high_watermark
                last_stable = partition.last_stable_offset
                if p.fetch_offset != (last_stable if committed else high_watermark):
                    return None
                results.append(
                    _new_partition(
                        p.partition,
                        high_watermark,
                        last_stable,
                        partition.log_start_offset,
                        [] if committed else None,
                        _EMPTY,
                    )
                )
            topics.append(_new_topic(name, topic.topic_id, results))
        return response

    def _topic_id(self, name: str) -> uuid.UUID:
        meta = self._metadata.topic(name)
        return meta.topic_id if meta else _ZERO_UUID

    def _bytes_out(self, response: FetchResponse) -> FetchResponse:
        """Count the record bytes a consumer fetch sends, per topic (issue 14 hook: BytesOutPerSec)."""
        metrics = self._replicas.topic_metrics
        if metrics is not None:
            for topic in response.responses:
                nbytes = sum(_size(p.records) for p in topic.partitions)
                if nbytes:
                    metrics.sent(topic.topic, nbytes)
        return response

    def _record_throttled(self, quota: ReplicationQuotaManager, response: FetchResponse) -> None:
        """Kafka's ``recordLeaderThrottled``: the bytes sent to a follower for throttled partitions count
        against the leader quota (in-sync ones too, as in Kafka)."""
        now_ms = self._now_ms()
        for topic in response.responses:
            for p in topic.partitions:
                nbytes = _size(p.records)
                if nbytes and quota.is_throttled(topic.topic, p.partition_index):
                    quota.record(nbytes, now_ms)

    def _follower_fetch(
        self, wanted: list[Wanted], version: int, replica_id: int, broker_epoch: int
    ) -> dict[tuple[str, int], EpochEndOffset]:
        """A follower's fetch tells this leader how far its log goes (once per request, before any wait):
        record it per partition, unless its log diverged from this leader's (the answer then carries the
        ``DivergingEpoch`` to truncate to and no records). Returns the diverged partitions."""
        diverged: dict[tuple[str, int], EpochEndOffset] = {}
        for topic in wanted:
            if topic.name is None or topic.denied:
                continue
            for p in topic.partitions:
                partition = self._replicas.leader_partition(topic.name, p.partition)
                if isinstance(partition, ErrorCode) or replica_id not in partition.assignment:
                    continue
                if (
                    partition.check_leader_epoch(p.current_leader_epoch if version >= 9 else -1)
                    is not ErrorCode.NONE
                ):
                    continue
                if version >= 12:
                    divergence = partition.diverging_epoch(p.last_fetched_epoch, p.fetch_offset)
                    if divergence is not None:
                        diverged[(topic.name, p.partition)] = divergence
                        continue
                self._replicas.follower_fetch(
                    partition,
                    replica_id,
                    fetch_offset=p.fetch_offset,
                    log_start_offset=p.log_start_offset if version >= 5 else -1,
                    broker_epoch=broker_epoch,
                )
        return diverged

    def _leader_hints(self, response: FetchResponse, version: int, listener: str | None) -> None:
        """KIP-951: name the current leader where a partition answers NOT_LEADER_OR_FOLLOWER or
        FENCED_LEADER_EPOCH (and, from v16, its endpoint)."""
        hints = LeaderHints(self._metadata, listener)
        for topic in response.responses:
            for result in topic.partitions:
                hint = (
                    hints.hint(topic.topic, result.partition_index, result.error_code)
                    if topic.topic
                    else None
                )
                if hint is not None:
                    result.current_leader = FetchResponse.LeaderIdAndEpoch(
                        leader_id=hint.leader_id, leader_epoch=hint.leader_epoch
                    )
        if version >= 16:
            response.node_endpoints = [
                FetchResponse.NodeEndpoint(node_id=node, host=host, port=port, rack=rack)
                for node, (host, port, rack) in sorted(hints.endpoints.items())
            ]

    def _read(
        self,
        wanted: list[Wanted],
        version: int,
        isolation: FetchIsolation,
        max_bytes: int,
        diverged: dict[tuple[str, int], EpochEndOffset],
        replica_id: int,
        earlier: dict[Hashable, _PartitionData] | None = None,
        wait: FetchWait | None = None,
    ) -> tuple[FetchResponse, int, bool]:
        """The answer to ``wanted``, its record bytes and whether a partition has an error; ``earlier``:
        partitions answered as they were (a woken fetch's unchanged ones, with no records). ``wait``: watches
        each partition found led here and not fenced, from the same look (what :meth:`FetchWait.watch` would
        watch now; only meaningful when no partition has an error). A partition at its fetchable end with no
        divergence (an idle one) costs one lookup and one :meth:`Partition.offset_snapshot`, and its answer
        (no records, no error) is the one kept for it while its offsets stay as they were (:attr:`_idle`)."""
        committed = isolation is FetchIsolation.TXN_COMMITTED
        response = _new_response(ErrorCode.NONE, 0)
        total = 0
        has_error = False
        hosted = self._replicas.hosted_for_lookup()
        lookup = self._replicas.leader_partition
        idle = self._idle[committed]
        follower = isolation is FetchIsolation.LOG_END
        # FetchWait.watch_led, inline (what it stores per partition, made in the loop below)
        watched = wait._watched if wait is not None else None
        for topic in wanted:
            name = topic.name
            results = []
            for p in topic.partitions:
                index = p.partition
                if earlier is not None:
                    kept = earlier.get((name, index))
                    if kept is not None:
                        results.append(kept)
                        continue
                if name is None:
                    results.append(_error_partition(index, ErrorCode.UNKNOWN_TOPIC_ID))
                    has_error = True
                    continue
                if topic.denied:
                    results.append(_error_partition(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    has_error = True
                    continue
                key = (name, index)
                found = hosted.get(key) if hosted is not None else None
                if found is not None and found.leader_id == found.local_broker_id:
                    partition = found
                else:  # not led here, or the lookup cannot be skipped: leader_partition's answer
                    looked = lookup(name, index)
                    if isinstance(looked, ErrorCode):
                        results.append(_error_partition(index, looked))
                        has_error = True
                        continue
                    partition = looked
                if replica_id >= 0 and replica_id not in partition.assignment:
                    # not a replica of this partition
                    results.append(_error_partition(index, ErrorCode.NOT_LEADER_OR_FOLLOWER))
                    has_error = True
                    continue
                epoch = p.current_leader_epoch if version >= 9 else -1
                if epoch >= 0 and epoch != partition.leader_epoch:
                    results.append(_error_partition(index, partition.check_leader_epoch(epoch)))
                    has_error = True
                    continue
                snapshot = partition.offset_snapshot()
                high_watermark, last_stable, log_start = snapshot
                end = partition.log_end_offset if follower else last_stable if committed else high_watermark
                if watched is not None:
                    watched[key] = (name, index, p.fetch_offset, epoch, partition.leader_epoch, end)
                if p.fetch_offset == end and not diverged:
                    # caught up: nothing to read (an idle partition costs no log lookup), answered as
                    # the general code below answers it
                    answer = idle.get(key)
                    if answer is None or answer[0] != snapshot:
                        result = _new_partition(
                            index, high_watermark, last_stable, log_start, [] if committed else None, _EMPTY
                        )
                        if len(idle) >= _IDLE_ANSWERS:
                            idle.clear()
                        idle[key] = (snapshot, result)
                    else:
                        result = answer[1]
                    results.append(result)
                    continue
                result = _new_partition(
                    index, high_watermark, last_stable, log_start, [] if committed else None, _EMPTY
                )
                results.append(result)
                divergence = diverged.get(key)
                if divergence is not None:
                    if divergence.epoch < 0 or divergence.end_offset < 0:
                        # no end known for the follower's epoch (Kafka's readRecords): the follower asks
                        # for this log's bounds with ListOffsets instead
                        result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    else:
                        result.diverging_epoch = FetchResponse.EpochEndOffset(
                            epoch=divergence.epoch, end_offset=divergence.end_offset
                        )
                    has_error = True  # answered now: the follower truncates before it fetches again
                    continue
                limit = min(p.partition_max_bytes, max_bytes - total)
                if limit <= 0 and total > 0:
                    continue
                if p.fetch_offset == end:
                    continue  # caught up: nothing to read
                if (
                    replica_id >= 0
                    and self._leader_quota is not None
                    and self._leader_quota.should_throttle(
                        name, p.partition, in_sync=replica_id in partition.isr, now_ms=self._now_ms()
                    )
                ):
                    continue  # Kafka's shouldLeaderThrottle: no data for a throttled replica out of the ISR
                shared = self._purgatory.shared_reads
                try:
                    if (
                        shared is not None
                    ):  # many fetches woken by one change: one read per partition and offset
                        read_key = (name, p.partition, p.fetch_offset, limit, isolation, total == 0)
                        got = shared.read(
                            read_key,
                            partition,
                            p.fetch_offset,
                            limit,
                            isolation=isolation,
                            min_one_batch=total == 0,
                        )
                        if got.nbytes:
                            result.records = got.records
                            total += got.nbytes
                            if committed:
                                result.aborted_transactions = shared.aborted(got, partition, p.fetch_offset)
                        continue
                    data = partition.read(
                        p.fetch_offset, max(limit, 0), isolation=isolation, min_one_batch=total == 0
                    )
                except KafkaProtocolError as exc:
                    result.error_code = exc.error_code
                    has_error = True
                    continue
                except OSError as exc:  # issue 17: an I/O error takes the partition's log dir offline
                    result.error_code = self._replicas.io_failed(name, p.partition, exc)
                    has_error = True
                    continue
                regions = data.regions
                if regions:
                    result.records = (
                        inline(regions[0], SINGLE_INLINE_BYTES)
                        if len(regions) == 1
                        else RegionList(list(regions))
                    )
                    total += data.nbytes
                    if committed:
                        result.aborted_transactions = [
                            FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                            for pid, first in partition.aborted_transactions(p.fetch_offset, data.next_offset)
                        ]
            response.responses.append(_new_topic(name or "", topic.topic_id, results))
        return response, total, has_error
