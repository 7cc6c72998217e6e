"""One partition replica on this broker: the only door to its log, and its place in the partition's
replication (Kafka's ``cluster.Partition``).

Everything the server does to a partition's data goes through a :class:`Partition`: appends as leader
(client batches, the coordinators' batches, transaction markers) and as follower (the leader's batches),
reads up to a high-watermark policy, offset lookups, DeleteRecords, truncation, leader-epoch fencing and
the producer state DescribeProducers shows. The server never reaches the
:class:`~tidelog.storage.partition_log.PartitionLog` behind it.

Roles. A replica is the *leader* (it appends for clients and tracks each follower's fetch state), a
*follower* of another broker (it appends the leader's batches), or *offline* (no leader: it serves
nothing). It changes role only on a leader epoch at least as new as its own, with a partition epoch no
older than its own (:meth:`Partition.make_leader`, :meth:`Partition.make_follower`); a stale state is
ignored. A new replica is offline until told its role. A single node makes itself the leader of every
partition at leader epoch 0 with an ISR of itself (:meth:`Partition.make_single_node_leader`).

Invariants:

- The high watermark never passes the log end offset and never decreases while this replica leads. It is
  the smallest log end offset over the leader and every follower in the *maximal* ISR (the committed ISR
  plus a pending addition) or caught up within ``replica.lag.time.max.ms`` (Kafka 3.3's rule, KIP-497):
  an ISR shrink only takes effect once ZooKeeper accepted it, an expansion counts at once. On a single
  node every append moves it to the new log end offset before the append returns. A follower's is
  min(leader's high watermark, its own log end offset).
- ISR changes are proposals: :meth:`maybe_expand_isr` and :meth:`maybe_shrink_isr` return the
  :class:`~tidelog.replication.leader_and_isr.LeaderAndIsr` to write (conditional on the partition epoch)
  and mark it pending; only :meth:`isr_update_committed` makes it the ISR, :meth:`isr_update_failed` drops
  it. One change in flight at a time. The ISR never loses the leader.
- A follower joins the ISR only when its log end offset reached the high watermark and the start of the
  current leader epoch, and its fetch came from the broker's current life (broker epoch as registered:
  KIP-380/903). It leaves when not caught up for ``replica.lag.time.max.ms``.
- acks=all: an append is refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than
  ``min.insync.replicas`` (nothing written); it completes when the high watermark passes it, with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below ``min.insync.replicas`` meanwhile.
- Batches are validated whole (CRC, sizes, counts) before anything is written; on a compacted topic (and
  only there) a leader append's records are decoded too: one without a key fails it (INVALID_RECORD). A
  failed append writes nothing.
- Consumers read below the high watermark, read_committed consumers below the last stable offset; a
  follower reads everything the leader has.
- A request carrying a leader epoch (``current_leader_epoch`` >= 0) is served only at this replica's own
  epoch: an older one is FENCED_LEADER_EPOCH (the requester's metadata is stale), a newer one
  UNKNOWN_LEADER_EPOCH (this replica's is).
- Pure: no asyncio, no sockets, no clock; time comes in as ``now_ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import IntEnum

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.records import ControlRecordType, validate_batches
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.compaction_validation import require_record_keys
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from tidelog.storage.fetch_data import FetchDataInfo
from tidelog.storage.leader_epoch_cache import EpochEndOffset, OffsetTruncationState
from tidelog.storage.partition_log import OffsetAndTimestamp, PartitionLog
from tidelog.storage.producer_state import AppendOrigin, ProducerStateEntry

from .leader_and_isr import NO_LEADER, LeaderAndIsr
from .replica_state import FollowerState

__all__ = ["FetchIsolation", "NotEnoughReplicasError", "Partition"]

log = logging.getLogger("tidelog.partition")


class FetchIsolation(IntEnum):
    """How far a read may go (Kafka's ``FetchIsolation``)."""

    LOG_END = 0
    """A follower replica: everything the leader has."""
    HIGH_WATERMARK = 1
    """A read_uncommitted consumer: committed records only."""
    TXN_COMMITTED = 2
    """A read_committed consumer: below the last stable offset."""


class NotEnoughReplicasError(KafkaProtocolError):
    """acks=all with an ISR smaller than ``min.insync.replicas``: nothing was written."""

    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class Partition:
    """A partition replica: its log and its role in the partition's replication."""

    def __init__(
        self,
        topic: str,
        index: int,
        log: PartitionLog,
        *,
        local_broker_id: int,
    ) -> None:
        self.topic = topic
        self.index = index
        self._log = log
        self.local_broker_id = local_broker_id
        self.leader_epoch = -1
        self.leader_id = NO_LEADER
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.assignment: tuple[int, ...] = ()
        self.removing_replicas: frozenset[int] = frozenset()
        """Replicas a reassignment is removing (KIP-455): they may stay in the ISR until the move ends, but
        never join it (the controller's final state leaves them out, and a removed broker still fetching
        before it learns that must not be added back)."""
        self.isr: frozenset[int] = frozenset()
        self._pending_isr: LeaderAndIsr | None = None
        self._followers: dict[int, FollowerState] = {}
        self._leader_epoch_start_offset: int | None = None

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, leader={self.leader_id}, leader_epoch={self.leader_epoch},"
            f" isr={sorted(self.isr)})"
        )

    def replace_log(self, log: PartitionLog) -> None:
        """Serve ``log`` from now on: the same replica's log, moved to another log dir (AlterReplicaLogDirs);
        roles, ISR and follower states are the partition's and stay."""
        self._log = log

    # -- roles -----------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR with a pending addition (never a pending removal): what the high watermark and
        acks=all wait for."""
        if self._pending_isr is None:
            return self.isr
        return self.isr | frozenset(self._pending_isr.isr)

    @property
    def isr_update_in_flight(self) -> bool:
        return self._pending_isr is not None

    def follower_states(self) -> dict[int, FollowerState]:
        """The leader's view of each follower (a copy)."""
        return dict(self._followers)

    def _is_stale(self, state: LeaderAndIsr) -> bool:
        return state.leader_epoch < self.leader_epoch or (
            state.leader_epoch == self.leader_epoch and state.partition_epoch < self.partition_epoch
        )

    def make_leader(
        self,
        state: LeaderAndIsr,
        assignment: Sequence[int],
        *,
        now_ms: int,
        removing_replicas: Sequence[int] = (),
    ) -> bool:
        """Lead at ``state`` (whose leader is this broker); returns whether a new leader epoch began
        (False for a stale state, which changes nothing). A new epoch starts at the log end offset in the
        leader epoch cache, so followers with a longer divergent log truncate (KIP-101/279)."""
        assert state.leader == self.local_broker_id
        if self._is_stale(state):
            return False
        new_leader = not self.is_leader
        new_epoch = state.leader_epoch > self.leader_epoch or new_leader
        self.assignment = tuple(assignment)
        self.removing_replicas = frozenset(removing_replicas)
        self.isr = frozenset(state.isr)
        self._pending_isr = None
        self.controller_epoch = state.controller_epoch
        self.partition_epoch = state.partition_epoch
        self._followers = {
            r: self._followers.get(r) or FollowerState(r)
            for r in self.assignment
            if r != self.local_broker_id
        }
        if new_epoch:
            start = self._log.log_end_offset
            self._log.maybe_assign_epoch_start_offset(state.leader_epoch, start)
            for replica, follower in self._followers.items():
                follower.reset(
                    now_ms=now_ms,
                    leader_log_end_offset=start,
                    new_leader=new_leader,
                    in_sync=replica in self.isr,
                )
            self.leader_epoch = state.leader_epoch
            self._leader_epoch_start_offset = start
        self.leader_id = self.local_broker_id
        self.maybe_increment_high_watermark(now_ms)
        return new_epoch

    def make_single_node_leader(self, *, now_ms: int) -> None:
        """The only broker there is: leader at epoch 0, assignment and ISR this broker alone."""
        me = self.local_broker_id
        self.make_leader(LeaderAndIsr(me, 0, (me,), controller_epoch=0), (me,), now_ms=now_ms)

    def make_follower(
        self, state: LeaderAndIsr, assignment: Sequence[int], *, removing_replicas: Sequence[int] = ()
    ) -> bool:
        """Follow ``state.leader`` (-1: offline); returns whether the leader epoch changed (the fetcher
        must restart then). A stale state changes nothing and returns False."""
        if self._is_stale(state):
            return False
        changed = state.leader_epoch > self.leader_epoch or self.is_leader
        self.assignment = tuple(assignment)
        self.removing_replicas = frozenset(removing_replicas)
        self.isr = frozenset(state.isr)
        self._pending_isr = None
        self._followers = {}
        self.controller_epoch = state.controller_epoch
        self.partition_epoch = state.partition_epoch
        self.leader_epoch = state.leader_epoch
        self.leader_id = state.leader
        self._leader_epoch_start_offset = None
        return changed

    def stop_leading(self) -> None:
        """This broker can no longer act as leader (its ZooKeeper session expired): no leader until the
        cluster's state is read again. The leader epoch is kept, so the same state is not applied again."""
        if self.is_leader:
            self.leader_id = NO_LEADER
            self._followers = {}
            self._pending_isr = None

    # -- offsets ---------------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._log.last_stable_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def offset_snapshot(self) -> tuple[int, int, int]:
        """(high watermark, last stable offset, log start offset) in one call (Kafka's
        ``fetchOffsetSnapshot``): what a fetch answers for each partition."""
        return self._log.offset_snapshot()

    @property
    def latest_epoch(self) -> int | None:
        """The leader epoch of the last batch in the log (a follower's ``LastFetchedEpoch``)."""
        return self._log.latest_epoch

    @property
    def config(self) -> LogConfig:
        return self._log.config

    def fetchable_offset(self, isolation: FetchIsolation) -> int:
        """The offset a read under ``isolation`` stops before."""
        if isolation is FetchIsolation.TXN_COMMITTED:
            return self.last_stable_offset
        if isolation is FetchIsolation.HIGH_WATERMARK:
            return self.high_watermark
        return self.log_end_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """NONE when a request at ``current_leader_epoch`` (-1: none given) may be served here, else the
        fencing error (Kafka's ``Partition.checkCurrentLeaderEpoch``)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # -- leader: high watermark and ISR ----------------------------------------------------------------

    def maybe_increment_high_watermark(self, now_ms: int, max_lag_ms: int = 0) -> bool:
        """Move the high watermark up to the smallest log end offset the leader must wait for; returns
        whether it moved."""
        if self.leader_id != self.local_broker_id:  # not is_leader (asked after every leader append)
            return False
        log = self._log
        leader_end = log.log_end_offset
        candidate = leader_end
        followers = self._followers
        if not followers:  # a leader alone in its ISR (a single node): its log end, read once
            return candidate > log.high_watermark and log.maybe_increment_high_watermark(
                candidate, log_end_offset=leader_end
            )
        maximal = self.maximal_isr
        for replica, follower in followers.items():
            if follower.log_end_offset < candidate and (
                replica in maximal
                or (
                    max_lag_ms > 0
                    and follower.is_caught_up(
                        leader_log_end_offset=leader_end, now_ms=now_ms, max_lag_ms=max_lag_ms
                    )
                )
            ):
                candidate = max(follower.log_end_offset, 0)
        if candidate <= log.high_watermark:
            return False
        return log.maybe_increment_high_watermark(candidate, log_end_offset=leader_end)

    def update_follower_fetch_state(
        self,
        replica_id: int,
        *,
        fetch_offset: int,
        log_start_offset: int,
        now_ms: int,
        broker_epoch: int,
        max_lag_ms: int,
    ) -> bool:
        """A follower fetched at ``fetch_offset`` (its log end offset); returns whether the high watermark
        moved. The caller then asks :meth:`maybe_expand_isr`."""
        follower = self._followers.get(replica_id)
        if follower is None or not self.is_leader:
            return False
        before = follower.log_end_offset
        follower.update_fetch_state(
            fetch_offset=fetch_offset,
            log_start_offset=log_start_offset,
            fetch_time_ms=now_ms,
            leader_log_end_offset=self._log.log_end_offset,
            broker_epoch=broker_epoch,
        )
        if follower.log_end_offset == before:
            return False
        return self.maybe_increment_high_watermark(now_ms, max_lag_ms)

    def maybe_expand_isr(self, replica_id: int, *, alive_broker_epoch: int | None) -> LeaderAndIsr | None:
        """The state to write if ``replica_id`` should join the ISR now (and mark it pending), else None.
        ``alive_broker_epoch`` is the follower's broker epoch as registered (None: not alive): a fetch from
        an earlier life of the broker never brings it back (KIP-903)."""
        follower = self._followers.get(replica_id)
        if (
            follower is None
            or not self.is_leader
            or self._pending_isr is not None
            or replica_id in self.isr
            or replica_id in self.removing_replicas
            or alive_broker_epoch is None
            or (follower.broker_epoch >= 0 and follower.broker_epoch != alive_broker_epoch)
            or self._leader_epoch_start_offset is None
            or follower.log_end_offset < self._log.high_watermark
            or follower.log_end_offset < self._leader_epoch_start_offset
        ):
            return None
        isr = [r for r in self.assignment if r in self.isr or r == replica_id]
        return self._propose(isr)

    def out_of_sync_replicas(self, *, now_ms: int, max_lag_ms: int) -> set[int]:
        """ISR members (other than the leader) not caught up within ``max_lag_ms``."""
        if not self.is_leader or self._pending_isr is not None:
            return set()
        leader_end = self._log.log_end_offset
        out = set()
        for replica in self.isr - {self.local_broker_id}:
            follower = self._followers.get(replica)
            if follower is None or not follower.is_caught_up(
                leader_log_end_offset=leader_end, now_ms=now_ms, max_lag_ms=max_lag_ms
            ):
                out.add(replica)
        return out

    def maybe_shrink_isr(self, *, now_ms: int, max_lag_ms: int) -> LeaderAndIsr | None:
        """The state to write without the followers that fell behind (and mark it pending), else None."""
        out = self.out_of_sync_replicas(now_ms=now_ms, max_lag_ms=max_lag_ms)
        if not out:
            return None
        isr = [r for r in self.assignment if r in self.isr and r not in out]
        if self.local_broker_id not in isr:
            isr.insert(0, self.local_broker_id)
        return self._propose(isr)

    def _propose(self, isr: Sequence[int]) -> LeaderAndIsr:
        proposal = LeaderAndIsr(
            leader=self.local_broker_id,
            leader_epoch=self.leader_epoch,
            isr=tuple(isr),
            controller_epoch=self.controller_epoch,
            partition_epoch=self.partition_epoch,
        )
        self._pending_isr = proposal
        return proposal

    def isr_update_committed(self, state: LeaderAndIsr, *, now_ms: int, max_lag_ms: int = 0) -> bool:
        """ZooKeeper accepted the pending change as ``state`` (its new partition epoch); returns whether the
        high watermark moved. A state for another leader epoch is ignored (leadership moved meanwhile)."""
        self._pending_isr = None
        if not self.is_leader or state.leader_epoch != self.leader_epoch:
            return False
        self.isr = frozenset(state.isr)
        self.partition_epoch = state.partition_epoch
        return self.maybe_increment_high_watermark(now_ms, max_lag_ms)

    def isr_update_failed(self) -> None:
        """The pending change was refused (a stale partition epoch): the cluster's state decides again."""
        self._pending_isr = None

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """acks=all: (done, error) for an append ending at ``required_offset`` (Kafka's
        ``checkEnoughReplicasReachOffset``). Asked after every acks=all append: the properties are read
        as fields here (``is_leader``, ``maximal_isr`` when no ISR change is pending)."""
        if self.leader_id != self.local_broker_id:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        log = self._log
        if log.high_watermark < required_offset:
            return False, ErrorCode.NONE
        isr = self.isr if self._pending_isr is None else self.maximal_isr
        if len(isr) < log.config.min_insync_replicas:
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return True, ErrorCode.NONE

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> EpochEndOffset | None:
        """A follower's log diverged from this leader's when the leader's end of its ``last_fetched_epoch``
        is before ``fetch_offset`` or the leader has no such epoch: the (epoch, end offset) to answer with
        (Fetch's ``DivergingEpoch``), else None. ``last_fetched_epoch`` < 0: not checked."""
        if last_fetched_epoch < 0:
            return None
        end = self._log.end_offset_for_epoch(last_fetched_epoch)
        if end.end_offset < fetch_offset or end.epoch < last_fetched_epoch:
            return end
        return None

    # -- writes ----------------------------------------------------------------------------------------

    def append_records_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        required_acks: int = 1,
    ) -> LogAppendInfo:
        """Validate and append a produce payload; raises the storage's and protocol's typed errors
        (:class:`~tidelog.protocol.errors.KafkaProtocolError`) and writes nothing then. ``origin``
        COORDINATOR is the broker's own transactional batches (offset commits): producer id and epoch
        without sequences, checked for epochs only. ``required_acks`` -1 checks ``min.insync.replicas``
        first."""
        if self.leader_id != self.local_broker_id:  # not is_leader
            raise KafkaProtocolError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.index}",
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
            )
        log = self._log
        config = log.config
        if required_acks == -1 and len(self.isr) < config.min_insync_replicas:
            self._check_min_isr(required_acks)  # raises (asked only when it will: every acks=all append)
        headers = validate_batches(
            records, max_batch_bytes=config.max_message_bytes, from_client=origin is AppendOrigin.CLIENT
        )
        if config.compact_enabled:
            require_record_keys(
                records, f"{self.topic}-{self.index}", max_message_bytes=config.max_message_bytes
            )
        info = log.append(
            records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=origin, headers=headers
        )
        self.maybe_increment_high_watermark(now_ms)
        return info

    def _check_min_isr(self, required_acks: int) -> None:
        """acks=-1 needs an ISR of at least ``min.insync.replicas`` before anything is written."""
        min_isr = self._log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"the ISR of {self.topic}-{self.index} is {sorted(self.isr)}, smaller than min.insync.replicas"
                f" {min_isr}"
            )

    def append_control_marker(
        self,
        kind: ControlRecordType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
        required_acks: int = 1,
    ) -> LogAppendInfo:
        """Write a COMMIT/ABORT marker as leader (WriteTxnMarkers); raises the storage's typed errors.
        ``required_acks`` -1 checks ``min.insync.replicas`` first (Kafka writes markers with acks=-1)."""
        if not self.is_leader:
            raise KafkaProtocolError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.index}",
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
            )
        self._check_min_isr(required_acks)
        info = self._log.append_control_marker(
            kind,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
        )
        self.maybe_increment_high_watermark(now_ms)
        return info

    def delete_records_before(self, offset: int, *, now_ms: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (-1: the high watermark); returns the
        new log start offset. Raises :class:`~tidelog.storage.errors.OffsetOutOfRangeError` for an offset
        below 0 or above the high watermark, and then changes nothing."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic}-{self.index} before {offset}: the high watermark is "
                f"{self.high_watermark}"
            )
        if target > self.log_start_offset:
            self._log.delete_records_before(target, now_ms=now_ms)
        return self.log_start_offset

    # -- follower --------------------------------------------------------------------------------------

    def append_records_as_follower(
        self, records: bytes | bytearray | memoryview, *, now_ms: int
    ) -> LogAppendInfo:
        """Append the leader's batches (offsets and epochs as the leader wrote them). A follower whose log
        is empty at a log start offset inside the first batch starts over at that batch (the leader's log
        start fell inside a batch, Kafka's ``Partition.appendRecordsToFollowerOrFutureReplica``)."""
        try:
            return self._log.append_as_follower(records, now_ms=now_ms)
        except UnexpectedAppendOffsetError as exc:
            if (
                exc.first_offset is not None
                and self._log.log_end_offset == self._log.log_start_offset
                and exc.first_offset < self._log.log_start_offset
            ):
                log.info(
                    "%s-%d: the leader's batch starts at %d, below this replica's empty log's start %d: starting"
                    " over there",
                    self.topic,
                    self.index,
                    exc.first_offset,
                    self._log.log_start_offset,
                )
                self._log.truncate_fully_and_start_at(exc.first_offset)
                return self._log.append_as_follower(records, now_ms=now_ms)
            raise

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark: min(the leader's, its own log end offset), never below its log start."""
        target = max(min(leader_high_watermark, self._log.log_end_offset), self._log.log_start_offset)
        if target != self._log.high_watermark:
            self._log.update_high_watermark(target)

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int, *, now_ms: int) -> None:
        """Follow the leader's DeleteRecords and retention: raise this replica's log start offset as far as
        the leader's, never past its own high watermark."""
        target = min(leader_log_start_offset, self._log.high_watermark)
        if target > self._log.log_start_offset:
            self._log.delete_records_before(target, now_ms=now_ms)

    def offset_truncation_state(self, leader: EpochEndOffset, *, fetch_offset: int) -> OffsetTruncationState:
        """Where to truncate after the leader answered ``DivergingEpoch`` (KIP-101/279)."""
        return self._log.offset_truncation_state(leader, fetch_offset=fetch_offset)

    def truncate_to(self, offset: int, *, now_ms: int) -> bool:
        """Remove everything at and after ``offset``; returns whether anything was removed."""
        return self._log.truncate_to(offset, now_ms=now_ms)

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        """Empty the log and start it at ``offset`` (the leader's log start is past this replica's end)."""
        self._log.truncate_fully_and_start_at(offset, now_ms=now_ms)

    # -- reads -----------------------------------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation: FetchIsolation,
        min_one_batch: bool,
        max_offset: int | None = None,
    ) -> FetchDataInfo:
        """Whole batches from ``fetch_offset`` below the offset ``isolation`` allows (and below
        ``max_offset``, if given: a share fetch sends only the batches of the records it acquired), as file
        regions; raises :class:`~tidelog.storage.errors.OffsetOutOfRangeError` outside the log."""
        limit = None if isolation is FetchIsolation.LOG_END else self.fetchable_offset(isolation)
        if max_offset is not None:
            limit = max_offset if limit is None else min(limit, max_offset)
        return self._log.read(fetch_offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of the aborted transactions overlapping the range, for a
        read_committed fetch of it."""
        return [
            (txn.producer_id, txn.first_offset)
            for txn in self._log.collect_aborted_transactions(start_offset, upper_bound_offset)
        ]

    def offset_for_timestamp(self, timestamp_ms: int) -> OffsetAndTimestamp | None:
        """The first offset whose timestamp is >= ``timestamp_ms``; raises LogCorruptionError for a
        damaged batch where the records must be read."""
        return self._log.offset_for_timestamp(timestamp_ms)

    def max_timestamp_offset(self) -> OffsetAndTimestamp | None:
        return self._log.max_timestamp_offset()

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch of the batch holding ``offset`` (ListOffsets answers it), None if unknown."""
        return self._log.epoch_for_offset(offset)

    def end_offset_for_leader_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` of the largest epoch <= ``leader_epoch`` this
        replica knows, (-1, -1) when it knows none (Kafka's ``LeaderEpochFileCache.endOffsetFor``)."""
        end = self._log.end_offset_for_epoch(leader_epoch)
        return end.epoch, end.end_offset

    def producer_states(self) -> Sequence[ProducerStateEntry]:
        """The log's producer state, one entry per producer id, by producer id (DescribeProducers)."""
        producers = self._log.producer_state.producers
        return [entry for _pid, entry in sorted(producers.items())]
