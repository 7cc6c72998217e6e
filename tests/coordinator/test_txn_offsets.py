"""Transactional offset commits in the pure group coordinator: TxnOffsetCommit leaves offsets pending until
the transaction's marker; COMMIT makes them the committed offsets (unless a newer regular commit exists),
ABORT drops them; require_stable fetches answer UNSTABLE_OFFSET_COMMIT meanwhile; replaying the log with
the batches' producer ids and the markers rebuilds the same state; validation as Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.coordinator.harness import Harness

from tidelog.coordinator.group import GroupCoordinator, GroupCoordinatorConfig
from tidelog.protocol import codec
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteGroupsRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)

PID, EPOCH = 4000, 3
OTHER_PID = 4001


@dataclass
class Logged:
    """One entry of the partition's log: a record batch of a producer (-1: none), or a marker."""

    key: bytes | None = None
    value: bytes | None = None
    producer_id: int = -1
    marker: bool | None = None  # True COMMIT, False ABORT


class TxnHarness(Harness):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.log: list[Logged] = []

    def txn_commit(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], int],
        *,
        producer_id: int = PID,
        version: int = 3,
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
        metadata: str = "",
    ) -> dict[tuple[str, int], int]:
        topics: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata=metadata
                )
            )
        request = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id=group_id,
            producer_id=producer_id,
            producer_epoch=EPOCH,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        before = len(self.records)
        response = self.send(request, version)
        codec.encode(response, version)
        self.log.extend(Logged(r.key, r.value, producer_id) for r in self.records[before:])
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    def regular_commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        before = len(self.records)
        assert set(self.commit(group_id, offsets).values()) == {ErrorCode.NONE}
        self.log.extend(Logged(r.key, r.value) for r in self.records[before:])

    def marker(self, producer_id: int, committed: bool) -> None:
        self.shard.replay_end_transaction_marker(producer_id, committed)
        self.log.append(Logged(producer_id=producer_id, marker=committed))

    def stable(self, group_id: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(error, offset) per partition of an OffsetFetch v7 with require_stable."""
        request = OffsetFetchRequest(
            group_id=group_id,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=partitions)],
            require_stable=True,
        )
        response = self.send(request, 7)
        return {p.partition_index: (p.error_code, p.committed_offset) for p in response.topics[0].partitions}

    def replayed(self) -> GroupCoordinator:
        """A fresh coordinator loaded from the log as the runtime loads it."""
        fresh = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=1))
        shard = fresh.begin_loading(0)
        for entry in self.log:
            if entry.marker is not None:
                shard.replay_end_transaction_marker(entry.producer_id, entry.marker)
            else:
                assert entry.key is not None
                fresh.replay(0, entry.key, entry.value, producer_id=entry.producer_id)
        fresh.complete_loading(0, self.now)
        return fresh


@pytest.fixture
def h() -> TxnHarness:
    return TxnHarness()


@pytest.mark.parametrize("version", range(5))
def test_offsets_stay_pending_until_a_commit_marker(h: TxnHarness, version: int) -> None:
    h.regular_commit("g", {("t", 0): 5})
    assert h.txn_commit("g", {("t", 0): 10, ("t", 1): 20}, version=version) == {
        ("t", 0): ErrorCode.NONE,
        ("t", 1): ErrorCode.NONE,
    }
    assert h.records[-1].key is not None  # the records go in the producer's transactional batch
    assert h.fetched("g", {"t": [0, 1]}) == {("t", 0): 5, ("t", 1): -1}
    assert h.stable("g", "t", [0, 1, 2]) == {
        0: (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1),
        1: (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1),
        2: (ErrorCode.NONE, -1),
    }
    h.marker(OTHER_PID, committed=True)  # another producer's marker settles nothing of PID
    assert h.stable("g", "t", [0])[0][0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    h.marker(PID, committed=True)
    assert h.stable("g", "t", [0, 1]) == {0: (ErrorCode.NONE, 10), 1: (ErrorCode.NONE, 20)}


def test_an_abort_marker_drops_the_pending_offsets(h: TxnHarness) -> None:
    h.regular_commit("g", {("t", 0): 5})
    h.txn_commit("g", {("t", 0): 10})
    h.marker(PID, committed=False)
    assert h.stable("g", "t", [0]) == {0: (ErrorCode.NONE, 5)}
    h.marker(PID, committed=True)  # a late duplicate marker finds nothing pending
    assert h.stable("g", "t", [0]) == {0: (ErrorCode.NONE, 5)}


def test_a_regular_commit_after_the_transactional_one_wins(h: TxnHarness) -> None:
    h.txn_commit("g", {("t", 0): 10, ("t", 1): 11})
    h.regular_commit("g", {("t", 0): 7})
    h.marker(PID, committed=True)
    assert h.fetched("g", {"t": [0, 1]}) == {("t", 0): 7, ("t", 1): 11}
    h.txn_commit("g", {("t", 0): 30}, producer_id=OTHER_PID)
    h.marker(OTHER_PID, committed=True)
    assert h.fetched("g", {"t": [0]}) == {("t", 0): 30}


def test_replaying_the_log_rebuilds_committed_and_pending_offsets(h: TxnHarness) -> None:
    h.regular_commit("g", {("t", 0): 1})
    h.txn_commit("g", {("t", 0): 10})
    h.marker(PID, committed=True)
    h.txn_commit("g", {("t", 1): 40}, producer_id=OTHER_PID)
    h.txn_commit("g", {("t", 2): 50})
    h.marker(PID, committed=False)
    h.txn_commit("h", {("u", 0): 9})  # a group that exists only through a transaction
    fresh = h.replayed()
    shard = fresh.shard(0)
    assert shard is not None
    assert shard.state.offsets.snapshot() == h.shard.state.offsets.snapshot()
    assert (
        shard.state.pending_offsets.pending_by_producer()
        == h.shard.state.pending_offsets.pending_by_producer()
    )
    assert set(shard.state.pending_offsets.pending_by_producer()) == {PID, OTHER_PID}
    assert "h" in shard.state.groups


def test_offset_delete_and_delete_groups_tombstone_pending_offsets(h: TxnHarness) -> None:
    h.txn_commit("g", {("t", 0): 10})
    deleted = h.send(
        OffsetDeleteRequest(
            group_id="g",
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name="t", partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)]
                )
            ],
        ),
        0,
    )
    assert deleted.error_code == ErrorCode.NONE
    assert h.records[-1].value is None
    assert not h.shard.offset_manager.has_pending_transactional_offsets("g", "t", 0)
    h.marker(PID, committed=True)
    assert h.fetched("g", {"t": [0]}) == {("t", 0): -1}

    h.txn_commit("g", {("t", 1): 5}, producer_id=OTHER_PID)
    before = len(h.records)
    result = h.send(DeleteGroupsRequest(groups_names=["g"]), 2)
    assert result.results[0].error_code == ErrorCode.NONE
    tombstones = h.records[before:]
    assert [r.value for r in tombstones] == [None, None]  # the pending offset's, then the group's
    assert not h.shard.state.pending_offsets.has_pending_group("g")


def test_expiry_keeps_a_group_whose_offsets_are_pending(h: TxnHarness) -> None:
    h.txn_commit("g", {("t", 0): 10})
    h.advance(h.config.offsets_retention_ms + h.config.offsets_retention_check_interval_ms + 1)
    assert "g" in h.shard.state.groups
    h.marker(PID, committed=True)
    assert h.fetched("g", {"t": [0]}) == {("t", 0): 10}


def test_validation(h: TxnHarness) -> None:
    # a group that does not exist: generation -1 creates a simple group, any other is ILLEGAL_GENERATION
    assert h.txn_commit("new", {("t", 0): 1}, generation=3) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert "new" not in h.shard.state.groups
    assert h.txn_commit("", {("t", 0): 1}) == {("t", 0): ErrorCode.INVALID_GROUP_ID}
    assert h.txn_commit("g", {("t", 0): 1}, metadata="x" * 5000) == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    members, generation = h.form_group("stable", ["a", "b"])
    # versions before 3 carry no member fields: accepted whatever the group's state
    assert h.txn_commit("stable", {("t", 0): 1}, version=0) == {("t", 0): ErrorCode.NONE}
    assert h.txn_commit("stable", {("t", 0): 2}, generation=generation, member_id=members[1]) == {
        ("t", 0): ErrorCode.NONE
    }
    assert h.txn_commit("stable", {("t", 0): 3}, generation=generation + 1, member_id=members[0]) == {
        ("t", 0): ErrorCode.ILLEGAL_GENERATION
    }
    assert h.txn_commit("stable", {("t", 0): 3}, generation=generation, member_id="nobody") == {
        ("t", 0): ErrorCode.UNKNOWN_MEMBER_ID
    }
