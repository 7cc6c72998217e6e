"""Three replicas of one partition, replicated in-process through the Partition API as the server's
fetcher and Fetch handler drive it: high watermark, ISR changes, acks=all, divergence and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, open_log

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import iter_batch_headers
from tidelog.replication.leader_and_isr import NO_LEADER, LeaderAndIsr
from tidelog.replication.partition import FetchIsolation, NotEnoughReplicasError, Partition
from tidelog.storage.config import LogConfig

LAG_MS = 10_000
BROKER_EPOCH = {1: 101, 2: 102, 3: 103}


class Cluster:
    """Replicas 1, 2, 3 of ``t-0``, each with its own log."""

    def __init__(self, tmp_path: Path, config: LogConfig = SMALL) -> None:
        self.tmp_path = tmp_path
        self.config = config
        self.replicas = {b: self._open(b) for b in (1, 2, 3)}
        self.now = 1_700_000_000_000  # wall-clock milliseconds, as the broker passes them

    def _open(self, broker: int) -> Partition:
        return Partition(
            "t", 0, open_log(self.tmp_path / f"b{broker}" / "t-0", self.config), local_broker_id=broker
        )

    def elect(self, state: LeaderAndIsr) -> None:
        for broker, replica in self.replicas.items():
            if broker == state.leader:
                replica.make_leader(state, (1, 2, 3), now_ms=self.now)
            else:
                replica.make_follower(state, (1, 2, 3))

    def fetch(self, follower: int) -> bool:
        """One follower fetch round against the leader; returns whether the leader's HW moved."""
        replica = self.replicas[follower]
        leader = self.replicas[replica.leader_id]
        fetch_offset = replica.log_end_offset
        diverging = leader.diverging_epoch(
            replica.latest_epoch if replica.latest_epoch is not None else -1, fetch_offset
        )
        moved = leader.update_follower_fetch_state(
            follower,
            fetch_offset=fetch_offset,
            log_start_offset=replica.log_start_offset,
            now_ms=self.now,
            broker_epoch=BROKER_EPOCH[follower],
            max_lag_ms=LAG_MS,
        )
        proposal = leader.maybe_expand_isr(follower, alive_broker_epoch=BROKER_EPOCH[follower])
        if proposal is not None:
            moved |= leader.isr_update_committed(self._written(proposal), now_ms=self.now)
        if diverging is not None:
            state = replica.offset_truncation_state(diverging, fetch_offset=fetch_offset)
            replica.truncate_to(state.offset, now_ms=self.now)
            return moved
        data = leader.read(fetch_offset, 1 << 20, isolation=FetchIsolation.LOG_END, min_one_batch=True)
        payload = data.read_bytes()
        if payload:
            replica.append_records_as_follower(payload, now_ms=self.now)
        replica.update_follower_high_watermark(leader.high_watermark)
        return moved

    @staticmethod
    def _written(proposal: LeaderAndIsr) -> LeaderAndIsr:
        """What ZooKeeper stores for an accepted conditional write: the next partition epoch."""
        return LeaderAndIsr(
            proposal.leader,
            proposal.leader_epoch,
            proposal.isr,
            proposal.controller_epoch,
            partition_epoch=proposal.partition_epoch + 1,
        )

    def values(self, broker: int, isolation: FetchIsolation = FetchIsolation.LOG_END) -> list[int]:
        data = self.replicas[broker].read(0, 1 << 20, isolation=isolation, min_one_batch=True).read_bytes()
        return [h.base_offset for _, h in iter_batch_headers(data)]


def state(leader: int, epoch: int, isr: tuple[int, ...], partition_epoch: int = 0) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, controller_epoch=1, partition_epoch=partition_epoch)


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    c = Cluster(tmp_path, LogConfig(segment_bytes=1024, index_interval_bytes=256, min_insync_replicas=2))
    c.elect(state(1, 0, (1, 2, 3)))
    return c


def test_the_high_watermark_waits_for_every_isr_member(cluster: Cluster) -> None:
    leader = cluster.replicas[1]
    info = leader.append_records_as_leader(batch(0), now_ms=cluster.now, required_acks=-1)
    required = info.last_offset + 1
    assert leader.high_watermark == 0
    assert leader.check_enough_replicas_reach_offset(required) == (False, ErrorCode.NONE)
    cluster.fetch(2)  # copies the batch; its fetch offset (0) tells the leader nothing new yet
    assert leader.high_watermark == 0
    cluster.fetch(2)  # now at 3
    assert leader.high_watermark == 0  # 3 still has nothing
    cluster.fetch(3)
    cluster.fetch(3)
    assert leader.high_watermark == 3
    assert leader.check_enough_replicas_reach_offset(required) == (True, ErrorCode.NONE)
    cluster.fetch(2)
    assert cluster.replicas[2].high_watermark == 3  # min(leader HW, own LEO)
    assert cluster.values(2) == cluster.values(1) == [0]


def test_acks_all_needs_min_insync_replicas(cluster: Cluster) -> None:
    leader = cluster.replicas[1]
    proposal = leader.maybe_shrink_isr(now_ms=cluster.now + LAG_MS + 1, max_lag_ms=LAG_MS)
    assert proposal is not None
    assert proposal.isr == (1,)  # neither follower ever fetched
    assert leader.isr_update_in_flight
    assert (
        leader.maybe_shrink_isr(now_ms=cluster.now + 2 * LAG_MS, max_lag_ms=LAG_MS) is None
    )  # one at a time
    leader.isr_update_committed(cluster._written(proposal), now_ms=cluster.now)
    assert leader.isr == {1}
    with pytest.raises(NotEnoughReplicasError):
        leader.append_records_as_leader(batch(0), now_ms=cluster.now, required_acks=-1)
    assert leader.log_end_offset == 0  # nothing written
    info = leader.append_records_as_leader(batch(0), now_ms=cluster.now, required_acks=1)
    assert leader.high_watermark == 3  # the ISR is the leader alone
    assert leader.check_enough_replicas_reach_offset(info.last_offset + 1) == (
        True,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    )


def test_a_caught_up_follower_rejoins_the_isr_only_from_its_current_life(cluster: Cluster) -> None:
    leader = cluster.replicas[1]
    proposal = leader.maybe_shrink_isr(now_ms=cluster.now + LAG_MS + 1, max_lag_ms=LAG_MS)
    assert proposal is not None
    leader.isr_update_committed(cluster._written(proposal), now_ms=cluster.now)
    leader.append_records_as_leader(batch(0), now_ms=cluster.now)
    assert leader.high_watermark == 3
    follower = cluster.replicas[2]
    follower.append_records_as_follower(
        leader.read(0, 1 << 20, isolation=FetchIsolation.LOG_END, min_one_batch=True).read_bytes(), now_ms=0
    )
    leader.update_follower_fetch_state(
        2, fetch_offset=3, log_start_offset=0, now_ms=cluster.now, broker_epoch=99, max_lag_ms=LAG_MS
    )
    assert leader.maybe_expand_isr(2, alive_broker_epoch=BROKER_EPOCH[2]) is None  # an earlier life's fetch
    assert leader.maybe_expand_isr(2, alive_broker_epoch=None) is None  # not alive
    leader.update_follower_fetch_state(
        2, fetch_offset=3, log_start_offset=0, now_ms=cluster.now, broker_epoch=102, max_lag_ms=LAG_MS
    )
    proposal = leader.maybe_expand_isr(2, alive_broker_epoch=BROKER_EPOCH[2])
    assert proposal is not None
    assert proposal.isr == (1, 2)
    assert leader.maximal_isr == {1, 2}  # counts before ZooKeeper accepts it
    assert leader.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NONE)  # acks=all counts it too
    leader.isr_update_failed()
    assert leader.maximal_isr == {1}
    assert leader.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_a_stale_state_is_ignored(cluster: Cluster) -> None:
    follower = cluster.replicas[2]
    assert follower.make_follower(state(3, 5, (3,), partition_epoch=2), (1, 2, 3))
    assert not follower.make_follower(state(1, 4, (1, 2, 3), partition_epoch=9), (1, 2, 3))
    assert not follower.make_follower(state(3, 5, (3,), partition_epoch=1), (1, 2, 3))
    assert (follower.leader_id, follower.leader_epoch) == (3, 5)
    assert follower.make_follower(state(NO_LEADER, 6, (3,), partition_epoch=3), (1, 2, 3))
    assert follower.leader_id == NO_LEADER
    with pytest.raises(Exception) as raised:
        follower.append_records_as_leader(batch(0), now_ms=0)
    assert getattr(raised.value, "error_code", None) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_follower_truncates_what_it_has_beyond_the_new_leader_kip_101(cluster: Cluster) -> None:
    """Broker 2 got a batch the others never saw; 3 becomes leader and writes its own: 2 must drop its
    batch (not keep it at an offset 3 has assigned to something else) and take 3's."""
    old_leader = cluster.replicas[1]
    old_leader.append_records_as_leader(batch(0), now_ms=cluster.now)
    for follower in (2, 3):
        cluster.fetch(follower)
        cluster.fetch(follower)
    assert old_leader.high_watermark == 3
    old_leader.append_records_as_leader(batch(1), now_ms=cluster.now)
    cluster.fetch(2)  # only 2 copies offsets 3-5
    assert cluster.values(2) == [0, 3]
    assert cluster.values(3) == [0]
    cluster.elect(state(3, 1, (2, 3), partition_epoch=1))  # broker 1 dies; 3 is elected
    new_leader = cluster.replicas[3]
    new_leader.append_records_as_leader(batch(7, records=5), now_ms=cluster.now)  # offsets 3-7, epoch 1
    cluster.fetch(2)  # diverging epoch: truncate to 3
    assert cluster.replicas[2].log_end_offset == 3
    cluster.fetch(2)
    cluster.fetch(2)
    assert cluster.values(2) == cluster.values(3) == [0, 3]
    assert cluster.replicas[2].log_end_offset == new_leader.log_end_offset == 8
    assert new_leader.high_watermark == 8  # 2's second fetch after the truncation reported its end
    assert cluster.replicas[2].end_offset_for_leader_epoch(0) == (0, 3)


def test_offline_replicas_serve_nothing(cluster: Cluster) -> None:
    leader = cluster.replicas[1]
    leader.stop_leading()
    assert not leader.is_leader
    assert leader.check_enough_replicas_reach_offset(0) == (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert leader.maybe_shrink_isr(now_ms=10**9, max_lag_ms=LAG_MS) is None


def test_a_replica_being_removed_never_rejoins_the_isr(cluster: Cluster) -> None:
    """KIP-455: the controller's final state of a move leaves the removed replica out of the ISR, and the
    leader may learn it before the topic znode's final assignment. A fetch from the removed broker (which
    has not yet learned it either) must not bring it back; any other caught-up replica still joins."""
    leader = cluster.replicas[1]
    leader.append_records_as_leader(batch(0), now_ms=cluster.now)
    for follower in (2, 3):
        cluster.fetch(follower)
        cluster.fetch(follower)
    assert leader.high_watermark == 3
    final = state(1, 1, (1, 2), partition_epoch=5)  # the move of 3 done: 3 left out, a new leader epoch
    assert leader.make_leader(final, (1, 2, 3), now_ms=cluster.now, removing_replicas=(3,))
    for follower in (2, 3):
        leader.update_follower_fetch_state(
            follower,
            fetch_offset=3,
            log_start_offset=0,
            now_ms=cluster.now,
            broker_epoch=BROKER_EPOCH[follower],
            max_lag_ms=LAG_MS,
        )
    assert leader.maybe_expand_isr(3, alive_broker_epoch=BROKER_EPOCH[3]) is None
    assert leader.isr == {1, 2}
    # without the removal (a replica that merely fell behind), the same fetch brings it back
    assert not leader.make_leader(final, (1, 2, 3), now_ms=cluster.now)
    proposal = leader.maybe_expand_isr(3, alive_broker_epoch=BROKER_EPOCH[3])
    assert proposal is not None
    assert proposal.isr == (1, 2, 3)
