"""Deleted topics in the pure group coordinator (Kafka's ``onPartitionsDeleted``).

Deleting topics writes one offset tombstone per (group, topic, partition) that had a committed or pending
offset of them, in every group whatever its state or subscription, and nothing else of theirs; a group
left Empty without offsets is deleted (a classic group's tombstone, a consumer group's tombstones), a
group with members stays. Replaying the log gives the same state; a topic created again with the same
name starts without offsets; a shard that is loading does it when loaded, before serving anything.
"""

from __future__ import annotations

from tests.coordinator.consumer_harness import ConsumerHarness, Member
from tests.coordinator.harness import Harness
from tests.coordinator.test_txn_offsets import PID, Logged, TxnHarness

from tidelog.coordinator.group import ClassicGroupState, GroupCoordinator, GroupCoordinatorConfig
from tidelog.coordinator.group.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
    RecordKey,
    RecordValue,
    decode_key,
    decode_value,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DescribeGroupsRequest, OffsetFetchRequest, OffsetFetchResponse

S = ClassicGroupState


def decoded(h: Harness, start: int = 0) -> list[tuple[RecordKey, RecordValue | None]]:
    out = []
    for record in h.records[start:]:
        key = decode_key(record.key)
        out.append((key, decode_value(key, record.value)))
    return out


def tombstone(group: str, topic: str, partition: int) -> tuple[RecordKey, None]:
    return OffsetCommitKey(group=group, topic=topic, partition=partition), None


def replayed(h: Harness) -> GroupCoordinator:
    """A fresh coordinator loaded from everything ``h`` wrote (no transactions)."""
    fresh = GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=1))
    fresh.begin_loading(0)
    for record in h.records:
        fresh.replay(0, record.key, record.value)
    fresh.complete_loading(0, h.now)
    return fresh


def delete_topics(h: Harness, *topics: str) -> list[tuple[RecordKey, RecordValue | None]]:
    start = len(h.records)
    result = h.apply(h.coordinator.on_topics_deleted(topics))
    assert result.response is None
    assert result.completions == []
    return decoded(h, start)


def test_tombstones_every_groups_offsets_of_the_topic_and_deletes_groups_left_empty() -> None:
    h = Harness()
    (a,), gen = h.form_group("stable", ["a"])
    h.commit("stable", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3}, generation=gen, member_id=a)
    h.commit("simple", {("t", 0): 4, ("t", 7): 5})  # partition 7: one the topic never had
    h.commit("mixed", {("u", 1): 6, ("t", 1): 7})
    (b,), gen_b = h.form_group("left", ["b"])
    h.commit("left", {("t", 0): 8}, generation=gen_b, member_id=b)
    h.leave("left", (b, None))
    assert h.group("left").state is S.EMPTY
    h.commit("other", {("u", 0): 9})

    assert delete_topics(h, "t") == [
        tombstone("stable", "t", 0),
        tombstone("stable", "t", 1),
        tombstone("simple", "t", 0),
        tombstone("simple", "t", 7),
        (GroupMetadataKey(group="simple"), None),
        tombstone("mixed", "t", 1),
        tombstone("left", "t", 0),
        (GroupMetadataKey(group="left"), None),
    ]
    assert h.fetched("stable") == {("u", 0): 3}
    assert h.fetched("mixed") == {("u", 1): 6}
    assert h.fetched("other") == {("u", 0): 9}
    assert h.fetched("stable", {"t": [0, 1]}) == {("t", 0): -1, ("t", 1): -1}
    assert h.group("stable").state is S.STABLE  # members keep a group alive, offsets or not
    assert set(h.shard.state.groups) == {"stable", "mixed", "other"}
    described = h.send(DescribeGroupsRequest(groups=["simple", "left"]), 5).groups
    assert [(d.group_id, d.group_state, d.error_code) for d in described] == [
        ("simple", "Dead", 0),
        ("left", "Dead", 0),
    ]

    fresh = replayed(h)
    shard = fresh.shard(0)
    assert shard is not None
    assert shard.state.offsets.snapshot() == h.shard.state.offsets.snapshot()
    assert set(shard.state.groups) == {"stable", "mixed", "other"}


def test_a_topic_nobody_committed_to_changes_nothing() -> None:
    h = Harness()
    h.commit("g", {("u", 0): 1})
    assert delete_topics(h, "t", "v") == []
    assert h.fetched("g") == {("u", 0): 1}


def test_several_topics_at_once() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 1, ("u", 0): 2, ("v", 0): 3})
    assert delete_topics(h, "t", "v", "t") == [tombstone("g", "t", 0), tombstone("g", "v", 0)]
    assert h.fetched("g") == {("u", 0): 2}


def test_a_topic_created_again_starts_without_offsets() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 10, ("t", 1): 11, ("u", 0): 1})
    delete_topics(h, "t")
    assert h.commit("g", {("t", 0): 2}) == {("t", 0): ErrorCode.NONE}
    assert h.fetched("g", {"t": [0, 1]}) == {("t", 0): 2, ("t", 1): -1}
    fresh = replayed(h)
    shard = fresh.shard(0)
    assert shard is not None
    assert shard.state.offsets.snapshot() == h.shard.state.offsets.snapshot()
    response = fresh.handle(
        OffsetFetchRequest(
            group_id="g",
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])],
        ),
        7,
        now_ms=h.now,
    ).response
    assert isinstance(response, OffsetFetchResponse)
    assert [(p.partition_index, p.committed_offset) for p in response.topics[0].partitions] == [
        (0, 2),
        (1, -1),
    ]


def test_pending_transactional_offsets_of_the_topic_are_dropped() -> None:
    h = TxnHarness()
    h.regular_commit("g", {("u", 0): 1})
    h.txn_commit("g", {("t", 0): 10, ("t", 1): 11, ("u", 0): 12})
    h.regular_commit("g", {("t", 1): 5})
    h.txn_commit("txn-only", {("t", 2): 20})  # a group that has only a pending offset of t
    start = len(h.records)
    h.apply(h.coordinator.on_topics_deleted(["t"]))
    h.log.extend(Logged(r.key, r.value) for r in h.records[start:])
    assert decoded(h, start) == [
        tombstone("g", "t", 1),  # the committed offset
        tombstone("g", "t", 0),  # partitions with only a pending offset
        tombstone("txn-only", "t", 2),
        (GroupMetadataKey(group="txn-only"), None),
    ]
    assert h.stable("g", "t", [0, 1]) == {0: (ErrorCode.NONE, -1), 1: (ErrorCode.NONE, -1)}
    assert h.stable("g", "u", [0])[0][0] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    h.marker(PID, committed=True)  # the transaction commits: only its offset of u survives
    assert h.fetched("g") == {("u", 0): 12}
    assert "txn-only" not in h.shard.state.groups

    fresh = h.replayed()
    shard = fresh.shard(0)
    assert shard is not None
    assert shard.state.offsets.snapshot() == {"g": {"u": {0: h.shard.state.offsets.get("g", "u", 0)}}}
    assert shard.state.pending_offsets.pending_by_producer() == {}
    assert "txn-only" not in shard.state.groups


def test_an_empty_consumer_group_left_without_offsets_is_deleted() -> None:
    h = ConsumerHarness()
    a = Member(h, "a", group_id="gone")
    a.heartbeat()
    h.commit("gone", {("t", 0): 10}, generation=a.epoch, member_id="a")
    b = Member(h, "b", group_id="active")
    b.heartbeat()
    h.commit("active", {("t", 1): 11}, generation=b.epoch, member_id="b")
    a.leave()
    records = delete_topics(h, "t")
    assert [key for key, _ in records] == [
        OffsetCommitKey(group="gone", topic="t", partition=0),
        ConsumerGroupTargetAssignmentMetadataKey(group_id="gone"),
        ConsumerGroupPartitionMetadataKey(group_id="gone"),
        ConsumerGroupMetadataKey(group_id="gone"),
        OffsetCommitKey(group="active", topic="t", partition=1),
    ]
    assert all(value is None for _, value in records)
    assert set(h.shard.state.consumer_groups) == {"active"}
    assert h.fetched("active") == {}


def test_a_loading_shard_deletes_the_offsets_once_loaded() -> None:
    live = Harness()
    live.commit("g", {("t", 0): 1, ("u", 0): 2})
    live.commit("simple", {("t", 3): 3})

    h = Harness(load=False)
    h.coordinator.begin_loading(0)
    for record in live.records:
        h.coordinator.replay(0, record.key, record.value)
    assert h.apply(h.coordinator.on_topics_deleted(["t"])).is_empty
    h.apply(h.coordinator.complete_loading(0, h.now))
    assert decoded(h) == [
        tombstone("g", "t", 0),
        tombstone("simple", "t", 3),
        (GroupMetadataKey(group="simple"), None),
    ]
    assert h.fetched("g") == {("u", 0): 2}
    # done once: loading the partition again later deletes nothing more
    h.apply(h.coordinator.unload(0))
    h.coordinator.begin_loading(0)
    h.apply(h.coordinator.complete_loading(0, h.now))
    assert len(h.records) == 3
