"""The classic group protocol, driven through GroupCoordinator without an event loop.

Each test runs a scenario with the harness (a manual clock and timer table standing in for the
server runtime) and asserts exact responses, states and timers.
"""

from __future__ import annotations

import pytest
from tests.coordinator.harness import REBALANCE_MS, SESSION_MS, Harness, subscription

from tidelog.coordinator.group import ClassicGroupState, GroupCoordinatorConfig, TimerKey, TimerKind
from tidelog.coordinator.group.records import GroupMetadataKey, GroupMetadataValue, decode_key, decode_value
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse

S = ClassicGroupState
E = ErrorCode
RANGE = ("range", subscription("t"))


def group_records(h: Harness, group_id: str) -> list[GroupMetadataValue | None]:
    out = []
    for record in h.records:
        key = decode_key(record.key)
        if isinstance(key, GroupMetadataKey) and key.group == group_id:
            value = decode_value(key, record.value)
            assert value is None or isinstance(value, GroupMetadataValue)
            out.append(value)
    return out


# -- joining and syncing -----------------------------------------------------------------------------


def test_two_members_join_leader_gets_member_list_and_sync_hands_out_assignment() -> None:
    h = Harness()
    a_id, a_join = h.join_new("g", client_id="a")
    assert a_id == "a-00000000-0000-0000-0000-000000000001"
    assert h.is_parked(a_join)
    assert h.group("g").state is S.PREPARING_REBALANCE
    join_key = TimerKey(TimerKind.JOIN, 0, "g")
    assert h.timers[join_key] == h.now + 3000  # group.initial.rebalance.delay.ms

    b_id, b_join = h.join_new("g", client_id="b")
    h.advance(3000)  # b joined during the initial delay: it is extended once
    assert h.is_parked(a_join)
    assert h.is_parked(b_join)
    h.advance(3000)

    a_resp, b_resp = h.response(a_join), h.response(b_join)
    assert isinstance(a_resp, JoinGroupResponse)
    assert isinstance(b_resp, JoinGroupResponse)
    assert (a_resp.error_code, a_resp.generation_id, a_resp.protocol_type, a_resp.protocol_name) == (
        0,
        1,
        "consumer",
        "range",
    )
    assert (a_resp.leader, a_resp.member_id) == (a_id, a_id)
    assert [(m.member_id, m.metadata) for m in a_resp.members] == [(a_id, RANGE[1]), (b_id, RANGE[1])]
    assert (b_resp.leader, b_resp.member_id, b_resp.members, b_resp.generation_id) == (a_id, b_id, [], 1)
    group = h.group("g")
    assert group.state is S.COMPLETING_REBALANCE
    assert h.timers[TimerKey(TimerKind.SYNC, 0, "g")] == h.now + REBALANCE_MS
    assert h.timers[TimerKey(TimerKind.HEARTBEAT, 0, "g", b_id)] == h.now + SESSION_MS

    b_sync = h.sync("g", b_id, 1)
    assert h.is_parked(b_sync)
    a_sync = h.sync("g", a_id, 1, {a_id: b"A", b_id: b"B"})
    assert h.response(a_sync) == SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=b"A"
    )
    assert h.response(b_sync) == SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=b"B"
    )
    assert h.group("g").state is S.STABLE
    assert TimerKey(TimerKind.SYNC, 0, "g") not in h.timers

    snapshot = group_records(h, "g")[-1]
    assert snapshot is not None
    assert (snapshot.generation, snapshot.protocol, snapshot.leader) == (1, "range", a_id)
    assert [(m.member_id, m.client_id, m.client_host, m.assignment) for m in snapshot.members] == [
        (a_id, "a", "/10.0.0.1", b"A"),
        (b_id, "b", "/10.0.0.1", b"B"),
    ]
    # A stable follower syncing again gets its assignment straight away.
    assert h.response(h.sync("g", b_id, 1)).assignment == b"B"


def test_first_join_of_a_new_group_writes_it_empty() -> None:
    h = Harness()
    h.join("g")  # MEMBER_ID_REQUIRED; the group now exists
    assert group_records(h, "g") == [
        GroupMetadataValue(
            protocol_type="", generation=0, protocol=None, leader=None, current_state_timestamp=h.now
        )
    ]


def test_join_v3_adds_the_member_without_member_id_round_trip() -> None:
    h = Harness()
    answer = h.join("g", version=3, client_id="old")
    assert h.is_parked(answer)
    h.advance(3000)
    response = h.response(answer)
    assert response.error_code == 0
    assert response.member_id == "old-00000000-0000-0000-0000-000000000001"
    assert response.protocol_name == "range"


def test_third_member_joining_triggers_a_rebalance_that_completes_when_everyone_rejoined() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    c, c_join = h.join_new("g", client_id="c")
    group = h.group("g")
    assert group.state is S.PREPARING_REBALANCE
    assert h.timers[TimerKey(TimerKind.JOIN, 0, "g")] == h.now + REBALANCE_MS
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    assert h.response(h.sync("g", b, gen)).error_code == E.REBALANCE_IN_PROGRESS
    a_join = h.join("g", a, client_id="a")
    assert h.is_parked(a_join)
    b_join = h.join("g", b, client_id="b")  # the last one: the join phase completes at once
    assert not h.is_parked(b_join)
    assert h.response(b_join).generation_id == gen + 1
    assert [m.member_id for m in h.response(a_join).members] == [a, b, c]
    assert h.response(c_join).leader == a
    assert h.group("g").state is S.COMPLETING_REBALANCE
    assert TimerKey(TimerKind.JOIN, 0, "g") not in h.timers


def test_follower_rejoining_stable_group_with_same_metadata_gets_current_generation() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    response = h.response(h.join("g", b))
    assert (response.error_code, response.generation_id, response.leader, response.members) == (0, gen, a, [])
    assert h.group("g").state is S.STABLE


def test_leader_rejoining_stable_group_forces_a_rebalance() -> None:
    h = Harness()
    (a, _b), _gen = h.form_group("g", ["a", "b"])
    assert h.is_parked(h.join("g", a))
    assert h.group("g").state is S.PREPARING_REBALANCE


def test_leave_triggers_a_rebalance_without_the_leaver() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    response = h.leave("g", (b, None))
    assert response == LeaveGroupResponse(
        members=[LeaveGroupResponse.MemberResponse(member_id=b, group_instance_id=None)]
    )
    assert TimerKey(TimerKind.HEARTBEAT, 0, "g", b) not in h.timers
    group = h.group("g")
    assert group.state is S.PREPARING_REBALANCE
    rejoin = h.response(h.join("g", a))
    assert (rejoin.generation_id, [m.member_id for m in rejoin.members]) == (gen + 1, [a])
    assert h.group("g").state is S.COMPLETING_REBALANCE


def test_last_member_leaving_empties_the_group_and_writes_it() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    h.leave("g", (a, None))
    group = h.group("g")
    assert (group.state, group.generation_id, group.protocol_name, group.leader_id) == (
        S.EMPTY,
        gen + 1,
        None,
        None,
    )
    last = group_records(h, "g")[-1]
    assert last == GroupMetadataValue(
        protocol_type="consumer",
        generation=gen + 1,
        protocol=None,
        leader=None,
        current_state_timestamp=h.now,
    )


def test_session_expiry_removes_the_silent_member_and_rebalances() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.advance(SESSION_MS // 2)
    assert h.heartbeat("g", a, gen) == E.NONE
    group = h.group("g")
    assert b in group.members
    h.advance(SESSION_MS // 2)  # b's session (last refreshed when its SyncGroup was answered) runs out
    assert list(group.members) == [a]
    assert group.state is S.PREPARING_REBALANCE
    assert h.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    response = h.response(h.join("g", a))
    assert (response.generation_id, response.leader, [m.member_id for m in response.members]) == (
        gen + 1,
        a,
        [a],
    )


def test_member_that_never_rejoins_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    a_join = h.join("g", a)  # the leader rejoins: rebalance
    for _ in range(3):  # b stays alive (heartbeats) but never rejoins
        h.advance(SESSION_MS // 2)
        assert h.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    h.advance(REBALANCE_MS - 3 * (SESSION_MS // 2) - 1)
    assert h.is_parked(a_join)
    h.advance(1)
    response = h.response(a_join)
    assert (response.generation_id, [m.member_id for m in response.members]) == (gen + 1, [a])
    assert b not in h.group("g").members
    assert h.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID


def test_member_that_never_syncs_is_dropped_at_the_sync_timeout() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.join("g", a)
    assert h.response(h.join("g", b)).generation_id == gen + 1
    b_sync = h.sync("g", b, gen + 1)  # b syncs and waits; the leader heartbeats but never syncs
    for _ in range(3):
        h.advance(SESSION_MS // 2)
        assert h.heartbeat("g", a, gen + 1) == E.NONE
    assert h.is_parked(b_sync)
    h.advance(REBALANCE_MS - 3 * (SESSION_MS // 2))
    group = h.group("g")
    assert list(group.members) == [b]
    assert group.state is S.PREPARING_REBALANCE
    assert h.response(b_sync) == SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS)


def test_parked_sync_is_answered_when_a_rebalance_starts() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.join("g", a)
    h.join("g", b)
    b_sync = h.sync("g", b, gen + 1)
    _c, _ = h.join_new("g", client_id="c")
    assert h.response(b_sync) == SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS)


# -- static membership -------------------------------------------------------------------------------


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    a_join = h.join("g", instance_id="ia", client_id="a")
    b_join = h.join("g", instance_id="ib", client_id="b")
    h.advance(6000)
    a, b = h.response(a_join).member_id, h.response(b_join).member_id
    assert (a, b) == ("ia-00000000-0000-0000-0000-000000000001", "ib-00000000-0000-0000-0000-000000000002")
    h.sync("g", b, 1, instance_id="ib")
    h.sync("g", a, 1, {a: b"A", b: b"B"}, instance_id="ia")
    records_before = len(h.records)

    # b restarts: it has lost its member id but keeps its group.instance.id
    restart = h.response(h.join("g", instance_id="ib", client_id="b"))
    new_b = "ib-00000000-0000-0000-0000-000000000003"
    assert restart == JoinGroupResponse(
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=a,
        skip_assignment=False,
        member_id=new_b,
        members=[],
    )
    group = h.group("g")
    assert group.state is S.STABLE
    assert group.static_members == {"ia": a, "ib": new_b}
    assert h.response(h.sync("g", new_b, 1, instance_id="ib")).assignment == b"B"
    # The replacement is persisted (the only record written), with b's assignment under the new id.
    (record,) = h.records[records_before:]
    value = decode_value(decode_key(record.key), record.value)
    assert isinstance(value, GroupMetadataValue)
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in value.members] == [
        (a, "ia", b"A"),
        (new_b, "ib", b"B"),
    ]
    # The old incarnation is fenced.
    assert h.heartbeat("g", b, 1, instance_id="ib") == E.FENCED_INSTANCE_ID
    assert TimerKey(TimerKind.HEARTBEAT, 0, "g", b) not in h.timers
    assert h.response(h.join("g", b, instance_id="ib")).error_code == E.FENCED_INSTANCE_ID


def test_static_leader_restart_v9_is_told_to_skip_assignment() -> None:
    h = Harness()
    a_join = h.join("g", instance_id="ia", client_id="a")
    h.advance(3000)
    a = h.response(a_join).member_id
    h.sync("g", a, 1, {a: b"A"}, instance_id="ia")
    restart = h.response(h.join("g", instance_id="ia", client_id="a"))
    new_a = restart.member_id
    assert (restart.leader, restart.skip_assignment, [m.member_id for m in restart.members]) == (
        new_a,
        True,
        [new_a],
    )
    # before v9 the old leader id is returned, so the restarted member does not reassign
    old_style = h.response(h.join("g", instance_id="ia", client_id="a", version=8))
    assert (old_style.leader, old_style.skip_assignment, old_style.members) == (new_a, False, [])
    assert h.group("g").state is S.STABLE


def test_static_member_rejoining_with_new_protocols_triggers_rebalance() -> None:
    h = Harness()
    a_join = h.join("g", instance_id="ia")
    h.advance(3000)
    a = h.response(a_join).member_id
    h.sync("g", a, 1, {a: b"A"})
    # Only protocols the group supports are accepted...
    refused = h.response(h.join("g", instance_id="ia", protocols=(("roundrobin", b"x"),)))
    assert refused.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # ...but a new preferred protocol changes the group's selection: rebalance (done at once: sole member).
    response = h.response(h.join("g", instance_id="ia", protocols=(("roundrobin", b"x"), ("range", b"r"))))
    assert (response.error_code, response.generation_id, response.protocol_name) == (0, 2, "roundrobin")
    assert h.group("g").state is S.COMPLETING_REBALANCE


def test_leave_by_group_instance_id_only() -> None:
    h = Harness()
    a_join = h.join("g", instance_id="ia")
    h.advance(3000)
    a = h.response(a_join).member_id
    response = h.leave("g", ("", "ia"), ("", "nope"))
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
        ("", "ia", 0),
        ("", "nope", E.UNKNOWN_MEMBER_ID),
    ]
    assert a not in h.group("g").members


# -- rejections --------------------------------------------------------------------------------------


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
def test_session_timeout_out_of_bounds(session_ms: int) -> None:
    h = Harness()
    assert h.response(h.join("g", session_ms=session_ms)).error_code == E.INVALID_SESSION_TIMEOUT


def test_join_with_empty_group_id() -> None:
    h = Harness()
    assert h.response(h.join("")).error_code == E.INVALID_GROUP_ID


def test_known_member_id_for_unknown_group() -> None:
    h = Harness()
    response = h.response(h.join("g", "m-1"))
    assert (response.error_code, response.member_id) == (E.UNKNOWN_MEMBER_ID, "m-1")
    assert "g" not in h.shard.state.groups


def test_inconsistent_protocol_type_and_protocols() -> None:
    h = Harness()
    h.form_group("g", ["a"])
    assert h.response(h.join("g", protocol_type="connect")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.response(h.join("g", protocols=(("sticky", b""),))).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.response(h.join("g2", protocol_type="")).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.response(h.join("g3", protocols=())).error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selected_by_vote_among_common_protocols() -> None:
    h = Harness()
    prefs = {
        "a": (("range", b"ra"), ("roundrobin", b"rr-a")),
        "b": (("roundrobin", b"rr-b"), ("range", b"rb")),
        "c": (("roundrobin", b"rr-c"), ("range", b"rc"), ("sticky", b"")),
    }
    joins = {c: h.join_new("g", client_id=c, protocols=p)[1] for c, p in prefs.items()}
    h.advance(9000)
    leader = h.response(joins["a"])
    assert leader.protocol_name == "roundrobin"
    assert [m.metadata for m in leader.members] == [b"rr-a", b"rr-b", b"rr-c"]


def test_group_max_size_reached() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_max_size=2))
    h.form_group("g", ["a", "b"])
    response = h.response(h.join("g", client_id="c"))
    assert (response.error_code, response.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert len(h.group("g").members) == 2


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unknown member", E.UNKNOWN_MEMBER_ID),
        ("old generation", E.ILLEGAL_GENERATION),
        ("wrong protocol name", E.INCONSISTENT_GROUP_PROTOCOL),
        ("wrong protocol type", E.INCONSISTENT_GROUP_PROTOCOL),
        ("unknown group", E.UNKNOWN_MEMBER_ID),
        ("empty group id", E.INVALID_GROUP_ID),
        ("unknown instance", E.UNKNOWN_MEMBER_ID),
    ],
)
def test_sync_group_errors(case: str, expected: ErrorCode) -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    args = {
        "unknown member": {"group_id": "g", "member_id": "x", "generation": gen},
        "old generation": {"group_id": "g", "member_id": a, "generation": gen - 1},
        "wrong protocol name": {
            "group_id": "g",
            "member_id": a,
            "generation": gen,
            "protocol_name": "sticky",
        },
        "wrong protocol type": {
            "group_id": "g",
            "member_id": a,
            "generation": gen,
            "protocol_type": "connect",
        },
        "unknown group": {"group_id": "nope", "member_id": a, "generation": gen},
        "empty group id": {"group_id": "", "member_id": a, "generation": gen},
        "unknown instance": {"group_id": "g", "member_id": a, "generation": gen, "instance_id": "someone"},
    }[case]
    assert h.response(h.sync(**args)).error_code == expected  # type: ignore[arg-type]


def test_heartbeat_errors_and_successes_by_state() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    assert h.heartbeat("g", a, gen) == E.NONE
    assert h.heartbeat("g", a, gen + 1) == E.ILLEGAL_GENERATION
    assert h.heartbeat("g", "x", gen) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("nope", a, gen) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat("", a, gen) == E.INVALID_GROUP_ID
    h.join("g", a)  # leader rejoin -> completes at once (only member): CompletingRebalance
    assert h.group("g").state is S.COMPLETING_REBALANCE
    assert h.heartbeat("g", a, gen + 1) == E.NONE


def test_leave_group_v0_single_member_errors_at_top_level() -> None:
    h = Harness()
    (a,), _ = h.form_group("g", ["a"])
    assert h.leave("g", ("x", None), version=0) == LeaveGroupResponse(error_code=E.UNKNOWN_MEMBER_ID)
    assert h.leave("nope", (a, None), version=2) == LeaveGroupResponse(error_code=E.UNKNOWN_MEMBER_ID)
    assert h.leave("g", (a, None), version=1) == LeaveGroupResponse(error_code=0)
    assert h.group("g").state is S.EMPTY


def test_leave_group_v3_batch_with_per_member_errors() -> None:
    h = Harness()
    (a, b), _ = h.form_group("g", ["a", "b"])
    response = h.leave("g", (a, None), ("x", None), (b, "wrong-instance"))
    assert [(m.member_id, m.error_code) for m in response.members] == [
        (a, 0),
        ("x", E.UNKNOWN_MEMBER_ID),
        (b, E.UNKNOWN_MEMBER_ID),
    ]
    assert response.error_code == 0
    unknown_group = h.leave("nope", (a, None))
    assert [(m.member_id, m.error_code) for m in unknown_group.members] == [(a, E.UNKNOWN_MEMBER_ID)]


def test_pending_member_leaving_and_expiring() -> None:
    h = Harness()
    first = h.response(h.join("g"))
    pending = first.member_id
    assert h.group("g").pending_join_members == {pending}
    assert h.timers[TimerKey(TimerKind.HEARTBEAT, 0, "g", pending)] == h.now + SESSION_MS
    h.advance(SESSION_MS)
    assert h.group("g").pending_join_members == set()
    again = h.response(h.join("g")).member_id
    assert h.leave("g", (again, None)).members[0].error_code == 0
    assert h.group("g").pending_join_members == set()


# -- timers are advisory -----------------------------------------------------------------------------


def test_stale_or_early_timer_firings_are_ignored() -> None:
    h = Harness()
    (_a, b), _gen = h.form_group("g", ["a", "b"])
    key = TimerKey(TimerKind.HEARTBEAT, 0, "g", b)
    early = h.coordinator.on_timeout(key, h.now)  # not due yet
    assert early.is_empty
    assert b in h.group("g").members
    h.leave("g", (b, None))
    late = h.coordinator.on_timeout(key, h.now + 10 * SESSION_MS)  # cancelled by the leave
    assert late.is_empty
    unknown = h.coordinator.on_timeout(TimerKey(TimerKind.JOIN, 7, "g"), h.now)
    assert unknown.is_empty


def test_unload_answers_parked_requests_with_not_coordinator() -> None:
    h = Harness()
    _, parked = h.join_new("g")
    result = h.apply(h.coordinator.unload(0))
    assert h.response(parked).error_code == E.NOT_COORDINATOR
    assert all(k not in h.timers for k in list(h.timers) if k.partition == 0)
    assert h.timers == {}
    assert result.records == {}
    assert h.response(h.join("g")).error_code == E.NOT_COORDINATOR


# -- parked requests and their edge cases --------------------------------------------------------------


def test_duplicate_join_supersedes_the_parked_one() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    first = h.join("g", a)
    second = h.join("g", a)  # the client gave up on the first (request timeout) and retried
    assert h.response(first).error_code == E.REBALANCE_IN_PROGRESS
    assert h.is_parked(second)
    h.join("g", b)
    assert h.response(second).generation_id == gen + 1
    assert h.group("g").num_members_awaiting_join == 0


def test_duplicate_sync_supersedes_the_parked_one() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.join("g", a)
    h.join("g", b)
    first, second = h.sync("g", b, gen + 1), h.sync("g", b, gen + 1)
    assert h.response(first).error_code == E.REBALANCE_IN_PROGRESS
    h.sync("g", a, gen + 1, {a: b"A", b: b"B"})
    assert h.response(second).assignment == b"B"


def test_static_member_replaced_while_completing_rebalance_fences_the_old_sync_and_rebalances() -> None:
    h = Harness()
    joins = [h.join("g", instance_id=i, client_id=i) for i in ("ia", "ib")]
    h.advance(6000)
    a, b = (h.response(j).member_id for j in joins)
    old_sync = h.sync("g", b, 1, instance_id="ib")  # b waits for the leader's assignment...
    restarted = h.join("g", instance_id="ib", client_id="ib")  # ...and restarts meanwhile
    assert h.response(old_sync).error_code == E.FENCED_INSTANCE_ID
    assert h.group("g").state is S.PREPARING_REBALANCE
    assert h.is_parked(restarted)
    h.join("g", a, instance_id="ia")
    response = h.response(restarted)
    assert (response.error_code, response.generation_id) == (0, 2)
    assert response.member_id not in (a, b)


def test_join_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    h = Harness()
    answer = h.join("g", version=0, session_ms=7000, rebalance_ms=99_999)
    h.advance(3000)
    member = h.group("g").members[h.response(answer).member_id]
    assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (7000, 7000)


def test_initial_rebalance_delay_extends_only_up_to_the_rebalance_timeout() -> None:
    h = Harness()
    start = h.now
    joins = [h.join_new("g", client_id="c0", rebalance_ms=7000)[1]]
    join_key = TimerKey(TimerKind.JOIN, 0, "g")
    # delay 3000 (4000 of the rebalance timeout left); a member arrives during each delay
    for i, expected_deadline in ((1, 6000), (2, 7000)):
        h.advance(start + (i * 3000 - 1) - h.now)
        joins.append(h.join_new("g", client_id=f"c{i}", rebalance_ms=7000)[1])
        h.advance(1)
        assert h.timers[join_key] == start + expected_deadline  # 3000 more, then only the 1000 left
    h.advance(start + 7000 - h.now)
    assert [h.response(j).generation_id for j in joins] == [1, 1, 1]


def test_new_member_whose_join_stays_parked_is_dropped_after_the_new_member_timeout() -> None:
    h = Harness(
        GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_new_member_join_timeout_ms=30_000)
    )
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.join("g", a, rebalance_ms=60_000)  # rebalance; b never rejoins: the join phase lasts 60 s
    c, c_join = h.join_new("g", client_id="c", rebalance_ms=60_000)
    assert h.timers[TimerKey(TimerKind.HEARTBEAT, 0, "g", c)] == h.now + 30_000
    for _ in range(6):  # b stays alive without rejoining: the join phase lasts the 60 s rebalance timeout
        h.advance(SESSION_MS // 2)
        assert h.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    assert h.response(c_join).error_code == E.UNKNOWN_MEMBER_ID
    assert c not in h.group("g").members
