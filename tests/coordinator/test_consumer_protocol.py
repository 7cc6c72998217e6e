"""The KIP-848 consumer group protocol, driven through GroupCoordinator without an event loop.

Scenarios use the harness (manual clock, timer table) and a model client; they assert exact epochs,
assignments, errors, records and timers.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.coordinator.consumer_harness import (
    HEARTBEAT_MS,
    REBALANCE_MS,
    SESSION_MS,
    ConsumerHarness,
    Member,
    by_name,
    image,
    settle,
    topic_id,
)
from tests.coordinator.harness import subscription

from tidelog.coordinator.group import ConsumerGroupState, GroupCoordinator, TimerKey, TimerKind
from tidelog.coordinator.group.consumer_group_member import MemberState
from tidelog.coordinator.group.records import decode_key
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupResponse,
    ListGroupsRequest,
    OffsetFetchRequest,
)

E = ErrorCode
CG = ConsumerGroupState
T = topic_id("t")


def record_types(h: ConsumerHarness, since: int = 0) -> list[tuple[int, bool]]:
    """(record type, is tombstone) of the records emitted since ``since``."""
    return [(int.from_bytes(r.key[:2], "big"), r.value is None) for r in h.records[since:]]


def session_key(member_id: str, group_id: str = "g") -> TimerKey:
    return TimerKey(TimerKind.CONSUMER_SESSION, 0, group_id, member_id)


def rebalance_key(member_id: str, group_id: str = "g") -> TimerKey:
    return TimerKey(TimerKind.CONSUMER_REBALANCE, 0, group_id, member_id)


# -- joining, splitting, leaving ---------------------------------------------------------------------


def test_first_member_gets_every_partition_and_the_records_kafka_writes() -> None:
    h = ConsumerHarness()
    a = Member(h, "a")
    response = a.heartbeat()
    assert (response.error_code, response.member_id, response.member_epoch) == (0, "a", 1)
    assert response.heartbeat_interval_ms == HEARTBEAT_MS
    assert a.owned == {"t": {0, 1, 2, 3, 4, 5}}
    # member metadata, subscription metadata, group epoch, target (member, epoch), current assignment
    assert record_types(h) == [(5, False), (4, False), (3, False), (7, False), (6, False), (8, False)]
    group = h.consumer_group("g")
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, CG.STABLE)
    assert h.timers[session_key("a")] == h.now + SESSION_MS


def test_second_member_waits_until_the_first_revokes() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a"), Member(h, "b")
    a.heartbeat()
    r = b.heartbeat()
    # The target gives b half, but a still owns it: b is at epoch 2 with nothing yet.
    assert r.assignment is not None
    assert (r.member_epoch, by_name(r.assignment.topic_partitions, h.topics)) == (2, {})
    assert h.consumer_group("g").members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert h.consumer_group("g").state is CG.RECONCILING
    # a is told to revoke: it keeps its epoch and only what it keeps.
    r = a.heartbeat()
    assert (r.member_epoch, a.owned) == (1, {"t": {0, 1, 2}})
    assert h.consumer_group("g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert h.timers[rebalance_key("a")] == h.now + REBALANCE_MS
    # b still cannot have 3, 4, 5: a has not acknowledged the revocation.
    assert (b.heartbeat().member_epoch, b.owned) == (2, {})
    # a acknowledges (owned partitions without 3, 4, 5): it moves to epoch 2 ...
    r = a.heartbeat()
    assert (r.member_epoch, a.owned, r.assignment) == (2, {"t": {0, 1, 2}}, None)
    assert rebalance_key("a") not in h.timers
    # ... and b gets them.
    assert (b.heartbeat().member_epoch, b.owned) == (2, {"t": {3, 4, 5}})
    assert h.consumer_group("g").state is CG.STABLE


def test_third_member_joins_and_everyone_gets_a_share_then_one_leaves() -> None:
    h = ConsumerHarness()
    members = [Member(h, "a"), Member(h, "b")]
    settle(h, members)
    c = Member(h, "c")
    members.append(c)
    settle(h, members)
    assert [m.owned for m in members] == [{"t": {0, 1}}, {"t": {3, 4}}, {"t": {2, 5}}]
    assert {m.epoch for m in members} == {3}
    assert h.timers.keys() >= {session_key("a"), session_key("b"), session_key("c")}

    since = len(h.records)
    r = members[1].leave()
    assert (r.error_code, r.member_id, r.member_epoch) == (0, "b", -1)
    # current assignment, target, metadata tombstones; then the bumped group epoch
    assert record_types(h, since) == [(8, True), (7, True), (5, True), (3, False)]
    assert session_key("b") not in h.timers
    assert h.consumer_group("g").state is CG.ASSIGNING
    settle(h, [members[0], c])
    assert (members[0].owned, c.owned) == ({"t": {0, 1, 3}}, {"t": {2, 4, 5}})
    assert h.consumer_group("g").group_epoch == 4


def test_a_silent_member_is_fenced_after_the_session_timeout() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a"), Member(h, "b")
    settle(h, [a, b])
    for _ in range(8):  # a keeps heartbeating, b has died
        h.advance(HEARTBEAT_MS)
        a.heartbeat()
    h.advance(SESSION_MS - 8 * HEARTBEAT_MS)
    assert "b" not in h.consumer_group("g").members
    assert a.heartbeat().member_epoch == 3
    assert a.owned == {"t": {0, 1, 2, 3, 4, 5}}
    # b comes back from the dead: its member id is gone.
    r = b.heartbeat()
    assert r.error_code == E.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a"), Member(h, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()  # told to revoke 3, 4, 5 ...
    a.owned = {"t": {0, 1, 2, 3, 4, 5}}  # ... but keeps consuming them
    for _ in range(5):
        h.advance(HEARTBEAT_MS)
        a.heartbeat()
        a.owned = {"t": {0, 1, 2, 3, 4, 5}}
        b.heartbeat()
    assert b.owned == {}  # never handed out while a holds them
    h.advance(REBALANCE_MS)  # the rebalance timeout runs out
    assert "a" not in h.consumer_group("g").members
    assert a.heartbeat().error_code == E.UNKNOWN_MEMBER_ID
    assert (b.heartbeat().member_epoch, b.owned) == (3, {"t": {0, 1, 2, 3, 4, 5}})


def test_fenced_member_rejoins_with_epoch_zero_under_its_member_id() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a"), Member(h, "b")
    settle(h, [a, b])
    a.epoch = 7  # an epoch the coordinator never gave
    assert a.heartbeat().error_code == E.FENCED_MEMBER_EPOCH
    assert h.consumer_group("g").members["a"].member_epoch == 2  # nothing changed
    r = a.heartbeat()  # epoch 0, owns nothing
    assert (r.error_code, r.member_epoch) == (0, 2)
    assert a.owned == {"t": {0, 1, 2}}


def test_member_epoch_validation() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a"), Member(h, "b")
    settle(h, [a, b])
    assert h.consumer_group("g").members["a"].member_epoch == 2

    def beat(epoch: int, owned: list[int] | None) -> int:
        tps = (
            None
            if owned is None
            else [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=T, partitions=owned)]
        )
        return h.heartbeat_cg(
            group_id="g", member_id="a", member_epoch=epoch, topic_partitions=tps
        ).error_code

    assert beat(3, [0, 1, 2]) == E.FENCED_MEMBER_EPOCH  # ahead of the coordinator
    assert beat(1, [0, 1, 2]) == E.NONE  # the previous epoch, owning a subset: a lost response
    assert beat(1, [0, 1, 2, 3]) == E.FENCED_MEMBER_EPOCH  # previous epoch, but owns more
    assert beat(1, None) == E.FENCED_MEMBER_EPOCH  # previous epoch without owned partitions
    assert beat(2, None) == E.NONE


@pytest.mark.parametrize(
    ("fields", "version", "error"),
    [
        ({"member_id": "", "member_epoch": 0}, 1, E.INVALID_REQUEST),  # v1: the client makes the id
        ({"member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": -1}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": 0, "topic_partitions": None}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": 0, "subscribed_topic_names": None}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": -2, "instance_id": None}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": -3}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": 0, "instance_id": " "}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": 0, "rack_id": ""}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": 0, "subscribed_topic_regex": "(["}, 1, E.INVALID_REQUEST),
        ({"member_id": "m", "member_epoch": 0, "server_assignor": "sticky"}, 1, E.UNSUPPORTED_ASSIGNOR),
        ({"member_id": "", "member_epoch": 0, "group_id": ""}, 1, E.INVALID_GROUP_ID),
        ({"member_id": "m", "member_epoch": 3}, 1, E.UNKNOWN_MEMBER_ID),  # no such group: rejoin
        ({"member_id": "m", "member_epoch": -1}, 1, E.UNKNOWN_MEMBER_ID),
        ({"member_id": "", "member_epoch": 5}, 0, E.INVALID_REQUEST),
    ],
)
def test_invalid_heartbeats(fields: dict[str, Any], version: int, error: ErrorCode) -> None:
    h = ConsumerHarness()
    request: dict[str, Any] = {
        "group_id": "g",
        "rebalance_timeout_ms": REBALANCE_MS,
        "subscribed_topic_names": ["t"],
        "topic_partitions": [],
        **fields,
    }
    response = h.heartbeat_cg(version, **request)
    assert response.error_code == error
    assert h.records == []


def test_v0_member_without_id_gets_one_from_the_coordinator() -> None:
    h = ConsumerHarness()
    r = h.heartbeat_cg(
        0,
        group_id="g",
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    assert r.error_code == 0
    assert r.member_id == "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's base64 form of the coordinator's first uuid
    assert list(h.consumer_group("g").members) == [r.member_id]


def test_unknown_member_and_group_max_size() -> None:
    h = ConsumerHarness(group_consumer_max_size=2)
    a, b, c = Member(h, "a"), Member(h, "b"), Member(h, "c")
    settle(h, [a, b])
    assert c.heartbeat().error_code == E.GROUP_MAX_SIZE_REACHED
    # Kafka checks the size first: an unknown member of a full group hears GROUP_MAX_SIZE_REACHED too.
    assert h.heartbeat_cg(group_id="g", member_id="x", member_epoch=1).error_code == E.GROUP_MAX_SIZE_REACHED
    assert a.heartbeat().error_code == 0  # members already in are fine
    b.leave()
    assert h.heartbeat_cg(group_id="g", member_id="x", member_epoch=1).error_code == E.UNKNOWN_MEMBER_ID


# -- static members ----------------------------------------------------------------------------------


def test_static_member_restart_keeps_its_partitions_without_a_rebalance() -> None:
    h = ConsumerHarness()
    a = Member(h, "a", instance_id="ia")
    b = Member(h, "b", instance_id="ib")
    settle(h, [a, b])
    epoch_before = h.consumer_group("g").group_epoch
    r = b.leave(static_pause=True)
    assert (r.error_code, r.member_epoch) == (0, -2)
    assert h.consumer_group("g").members["b"].assigned_partitions == {T: frozenset({3, 4, 5})}
    settle(h, [a])
    assert a.owned == {"t": {0, 1, 2}}  # b's partitions are not handed out meanwhile
    # A new incarnation (new member id, same instance id) takes b's place and partitions.
    b2 = Member(h, "b2", instance_id="ib")
    r = b2.heartbeat()
    assert (r.error_code, r.member_epoch, b2.owned) == (0, epoch_before, {"t": {3, 4, 5}})
    assert set(h.consumer_group("g").members) == {"a", "b2"}
    assert h.consumer_group("g").group_epoch == epoch_before
    assert h.consumer_group("g").static_members == {"ia": "a", "ib": "b2"}
    assert session_key("b") not in h.timers
    # The old incarnation is fenced.
    r = h.heartbeat_cg(group_id="g", member_id="b", member_epoch=epoch_before, instance_id="ib")
    assert r.error_code == E.FENCED_INSTANCE_ID


def test_static_instance_in_use_cannot_join_and_a_paused_static_member_expires() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a", instance_id="ia"), Member(h, "b")
    settle(h, [a, b])
    assert Member(h, "a2", instance_id="ia").heartbeat().error_code == E.UNRELEASED_INSTANCE_ID
    a.leave(static_pause=True)
    for _ in range(10):
        h.advance(HEARTBEAT_MS)
        b.heartbeat()
    assert "a" not in h.consumer_group("g").members  # it never came back: fenced at session expiry
    assert b.owned == {"t": {0, 1, 2, 3, 4, 5}}


# -- subscriptions and topics --------------------------------------------------------------------


def test_new_partitions_and_deleted_topics_reach_members_at_their_next_heartbeat() -> None:
    h = ConsumerHarness(image(t=2, u=2))
    a = Member(h, "a", topics=("t", "u"))
    a.heartbeat()
    assert a.owned == {"t": {0, 1}, "u": {0, 1}}
    h.set_topics(image(t=4, u=2))
    assert a.heartbeat().member_epoch == 2
    assert a.owned == {"t": {0, 1, 2, 3}, "u": {0, 1}}
    h.set_topics(image(t=4))  # u deleted
    a.heartbeat()
    a.heartbeat()
    assert a.owned == {"t": {0, 1, 2, 3}}
    assert list(h.consumer_group("g").subscription_metadata) == ["t"]


def test_subscribing_before_the_topic_exists() -> None:
    h = ConsumerHarness(image())
    a = Member(h, "a")
    assert (a.heartbeat().member_epoch, a.owned) == (1, {})
    h.set_topics(image(t=3))
    a.heartbeat()
    assert a.owned == {"t": {0, 1, 2}}


def test_regex_subscription() -> None:
    h = ConsumerHarness(image(orders=2, order_lines=1, users=1, __internal=1))
    a = Member(h, "a", topics=(), regex="order.*")
    a.heartbeat()
    assert a.owned == {"orders": {0, 1}, "order_lines": {0}}


def test_range_assignor_on_request() -> None:
    h = ConsumerHarness(image(t=4, u=4))
    a = Member(h, "a", topics=("t", "u"), assignor="range")
    b = Member(h, "b", topics=("t", "u"), assignor="range")
    settle(h, [a, b])
    assert (a.owned, b.owned) == ({"t": {0, 1}, "u": {0, 1}}, {"t": {2, 3}, "u": {2, 3}})
    (described,) = h.describe_cg("g")
    assert described.assignor_name == "range"


# -- describe, list, delete, offsets ---------------------------------------------------------------


def test_describe_list_and_the_classic_apis() -> None:
    h = ConsumerHarness()
    a, b = Member(h, "a"), Member(h, "b", instance_id="ib")
    settle(h, [a, b])
    h.commit("simple", {("t", 0): 1})
    described, missing, simple = h.describe_cg("g", "nope", "simple")
    assert (
        described.error_code,
        described.group_state,
        described.group_epoch,
        described.assignment_epoch,
    ) == (
        0,
        "Stable",
        2,
        2,
    )
    assert described.assignor_name == "uniform"
    members = {m.member_id: m for m in described.members}
    assert members["b"].instance_id == "ib"
    assert members["a"].client_id == "a"
    assert members["a"].subscribed_topic_names == ["t"]
    assert [(tp.topic_name, tp.partitions) for tp in members["a"].assignment.topic_partitions] == [
        ("t", [0, 1, 2])
    ]
    assert [(tp.topic_name, tp.partitions) for tp in members["a"].target_assignment.topic_partitions] == [
        ("t", [0, 1, 2])
    ]
    assert (missing.error_code, missing.error_message) == (E.GROUP_ID_NOT_FOUND, "Group nope not found.")
    assert (simple.error_code, simple.error_message) == (
        E.GROUP_ID_NOT_FOUND,
        "Group simple is not a consumer group.",
    )
    listed = {g.group_id: g for g in h.send(ListGroupsRequest(), 5).groups}
    assert (listed["g"].group_state, listed["g"].group_type, listed["g"].protocol_type) == (
        "Stable",
        "consumer",
        "consumer",
    )
    assert [g.group_id for g in h.send(ListGroupsRequest(types_filter=["consumer"]), 5).groups] == ["g"]
    assert [g.group_id for g in h.send(ListGroupsRequest(states_filter=["stable"]), 5).groups] == ["g"]
    # The classic DescribeGroups does not see consumer groups (Kafka answers Dead).
    assert h.send(DescribeGroupsRequest(groups=["g"]), 5).groups[0].group_state == "Dead"


def test_offset_commits_use_the_member_epoch() -> None:
    h = ConsumerHarness()
    a = Member(h, "a")
    a.heartbeat()
    assert h.commit("g", {("t", 0): 10}, generation=1, member_id="a") == {("t", 0): 0}
    assert h.commit("g", {("t", 0): 11}, generation=0, member_id="a") == {("t", 0): E.STALE_MEMBER_EPOCH}
    assert h.commit("g", {("t", 0): 11}, generation=1, member_id="x") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit("g", {("t", 0): 11}, generation=1, member_id="a", version=8) == {
        ("t", 0): E.UNSUPPORTED_VERSION
    }
    assert h.commit("g", {("t", 0): 11}) == {("t", 0): E.UNKNOWN_MEMBER_ID}  # group-less commit, active group
    assert h.fetched("g") == {("t", 0): 10}

    def fetch(member_id: str | None, epoch: int) -> Any:
        group = OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id="g", member_id=member_id, member_epoch=epoch, topics=None
        )
        return h.send(OffsetFetchRequest(groups=[group]), 9).groups[0]

    assert fetch("a", 1).topics[0].partitions[0].committed_offset == 10
    assert fetch(None, -1).topics[0].partitions[0].committed_offset == 10
    assert fetch("a", 0).error_code == E.STALE_MEMBER_EPOCH
    assert fetch("x", 1).error_code == E.UNKNOWN_MEMBER_ID
    a.leave()
    assert h.commit("g", {("t", 0): 12}) == {("t", 0): 0}  # empty group: admin commits are fine


def test_delete_group_and_offset_expiry() -> None:
    h = ConsumerHarness(offsets_retention_minutes=1)
    a = Member(h, "a")
    a.heartbeat()
    h.commit("g", {("t", 0): 10}, generation=1, member_id="a")
    assert h.send(DeleteGroupsRequest(groups_names=["g"]), 2).results[0].error_code == E.NON_EMPTY_GROUP
    h.apply(h.coordinator.expire_offsets(h.now + 120_000))  # subscribed topics' offsets never expire
    assert h.fetched("g") == {("t", 0): 10}
    a.leave()
    h.apply(h.coordinator.expire_offsets(h.now + 30_000))
    assert "g" in h.shard.state.consumer_groups  # an empty group with unexpired offsets lingers
    since = len(h.records)
    assert h.send(DeleteGroupsRequest(groups_names=["g"]), 2).results[0].error_code == 0
    # offsets, then the target assignment epoch, subscription metadata and group epoch tombstones
    assert record_types(h, since) == [(1, True), (6, True), (4, True), (3, True)]
    assert "g" not in h.shard.state.consumer_groups
    assert h.fetched("g", {"t": [0]}) == {("t", 0): -1}

    b = Member(h, "b", group_id="g2")
    b.heartbeat()
    h.commit("g2", {("t", 0): 5}, generation=1, member_id="b")
    b.leave()
    h.apply(h.coordinator.expire_offsets(h.now + 61_000))
    # an empty group subscribes to nothing: its offsets expire, then the group goes
    assert "g2" not in h.shard.state.consumer_groups


# -- classic and consumer groups never share an id -------------------------------------------------


def test_classic_and_consumer_groups_do_not_mix() -> None:
    h = ConsumerHarness()
    h.form_group("classic", ["x"])
    r = Member(h, "a", group_id="classic").heartbeat()
    assert (r.error_code, r.error_message) == (E.GROUP_ID_NOT_FOUND, "Group classic is not a consumer group.")
    Member(h, "a").heartbeat()
    joined = h.response(h.join("g"))
    assert isinstance(joined, JoinGroupResponse)
    assert joined.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_empty_groups_convert_both_ways_keeping_offsets() -> None:
    h = ConsumerHarness()
    h.commit("g", {("t", 0): 3})  # a simple (offsets-only) classic group
    since = len(h.records)
    a = Member(h, "a")
    assert a.heartbeat().error_code == 0
    assert record_types(h, since)[0] == (2, True)  # the classic group's tombstone comes first
    assert h.fetched("g") == {("t", 0): 3}
    assert "g" not in h.shard.state.groups
    a.leave()
    member_id, joined = h.join_new("g")  # a classic consumer takes the empty group back
    assert "g" not in h.shard.state.consumer_groups
    assert h.group("g").has_member(member_id)
    assert h.fetched("g") == {("t", 0): 3}
    assert joined is not None


# -- loading ---------------------------------------------------------------------------------------


def test_loading_rebuilds_groups_and_arms_their_timers() -> None:
    h = ConsumerHarness()
    a, b, c = Member(h, "a"), Member(h, "b", instance_id="ib"), Member(h, "c")
    settle(h, [a, b])
    c.heartbeat()
    a.heartbeat()  # a is now revoking
    live = h.consumer_group("g")
    loaded = GroupCoordinator(h.config)
    loaded.set_topics_image(h.topics)
    loaded.begin_loading(0)
    for record in h.records:
        decode_key(record.key)
        loaded.replay(0, record.key, record.value)
    result = loaded.complete_loading(0, h.now)
    shard = loaded.shard(0)
    assert shard is not None
    group = shard.state.consumer_groups["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (
        live.group_epoch,
        live.assignment_epoch,
        live.state,
    )
    assert group.members == live.members
    assert group.target_assignment == live.target_assignment
    assert group.partition_owners == live.partition_owners
    assert group.static_members == {"ib": "b"}
    scheduled = {op.key for op in result.timers}
    assert {session_key("a"), session_key("b"), session_key("c"), rebalance_key("a")} <= scheduled
    assert live.members["a"].state is MemberState.UNREVOKED_PARTITIONS


def test_a_classic_member_joining_does_not_disturb_consumer_group_records() -> None:
    h = ConsumerHarness()
    Member(h, "a").heartbeat()
    h.join("other", protocols=(("range", subscription("t")),))
    assert "other" in h.shard.state.groups
    assert "g" in h.shard.state.consumer_groups
