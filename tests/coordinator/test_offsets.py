"""Offsets (commit, fetch, delete, expiry) and the group-level admin requests, through GroupCoordinator."""

from __future__ import annotations

import pytest
from tests.coordinator.harness import SESSION_MS, Harness, subscription

from tidelog.coordinator.group import ClassicGroupState, GroupCoordinatorConfig, TimerKey, TimerKind
from tidelog.coordinator.group.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
    decode_key,
    decode_value,
    encode_key,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

S = ClassicGroupState
E = ErrorCode
RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes default


def decoded(h: Harness, start: int = 0) -> list[tuple[RecordKey, RecordValue | None]]:
    out = []
    for record in h.records[start:]:
        key = decode_key(record.key)
        out.append((key, decode_value(key, record.value)))
    return out


# -- OffsetCommit ------------------------------------------------------------------------------------


def test_member_commit_of_current_generation_is_written_and_fetched_exactly() -> None:
    h = Harness()
    (a, _b), gen = h.form_group("g", ["a", "b"])
    start = len(h.records)
    errors = h.commit(
        "g",
        {("t", 0): 10, ("t", 1): 11, ("u", 0): 5},
        generation=gen,
        member_id=a,
        leader_epoch=3,
        metadata="m",
    )
    assert errors == {("t", 0): 0, ("t", 1): 0, ("u", 0): 0}
    assert decoded(h, start) == [
        (
            OffsetCommitKey(group="g", topic="t", partition=0),
            OffsetCommitValue(offset=10, leader_epoch=3, metadata="m", commit_timestamp=h.now),
        ),
        (
            OffsetCommitKey(group="g", topic="t", partition=1),
            OffsetCommitValue(offset=11, leader_epoch=3, metadata="m", commit_timestamp=h.now),
        ),
        (
            OffsetCommitKey(group="g", topic="u", partition=0),
            OffsetCommitValue(offset=5, leader_epoch=3, metadata="m", commit_timestamp=h.now),
        ),
    ]
    assert h.fetched("g", {"t": [0, 1, 2], "u": [0]}) == {
        ("t", 0): 10,
        ("t", 1): 11,
        ("t", 2): -1,
        ("u", 0): 5,
    }
    fetched = h.fetch("g", {"t": [0]}, version=5).topics[0].partitions[0]
    assert (fetched.committed_leader_epoch, fetched.metadata, fetched.error_code) == (3, "m", 0)


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("stale generation", E.ILLEGAL_GENERATION),
        ("unknown member", E.UNKNOWN_MEMBER_ID),
        ("no member id, generation -1", E.UNKNOWN_MEMBER_ID),
        ("member id, generation -1", E.ILLEGAL_GENERATION),
        ("v0 (no generation at all)", E.UNKNOWN_MEMBER_ID),
        ("unknown static instance", E.UNKNOWN_MEMBER_ID),
    ],
)
def test_commit_rejected_for_stable_group(who: str, expected: ErrorCode) -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    start = len(h.records)
    kwargs = {
        "stale generation": {"generation": gen - 1, "member_id": a},
        "unknown member": {"generation": gen, "member_id": "x"},
        "no member id, generation -1": {},
        "member id, generation -1": {"member_id": a},
        "v0 (no generation at all)": {"version": 0},
        "unknown static instance": {"generation": gen, "member_id": a, "instance_id": "i"},
    }[who]
    assert h.commit("g", {("t", 0): 1, ("t", 1): 2}, **kwargs) == {("t", 0): expected, ("t", 1): expected}  # type: ignore[arg-type]
    assert h.records[start:] == []


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.join("g", a)
    h.join("g", b)
    assert h.group("g").state is S.COMPLETING_REBALANCE
    assert h.commit("g", {("t", 0): 1}, generation=gen + 1, member_id=a) == {
        ("t", 0): E.REBALANCE_IN_PROGRESS
    }


def test_commit_during_preparing_rebalance_with_the_previous_generation_is_accepted() -> None:
    h = Harness()
    (a, b), gen = h.form_group("g", ["a", "b"])
    h.join("g", a)  # rebalance starts; b has not rejoined yet and commits what it processed
    assert h.group("g").state is S.PREPARING_REBALANCE
    assert h.commit("g", {("t", 0): 7}, generation=gen, member_id=b) == {("t", 0): 0}
    assert h.fetched("g", {"t": [0]}) == {("t", 0): 7}


def test_commit_counts_as_heartbeat() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    h.advance(SESSION_MS - 1)
    h.commit("g", {("t", 0): 1}, generation=gen, member_id=a)
    assert h.timers[TimerKey(TimerKind.HEARTBEAT, 0, "g", a)] == h.now + SESSION_MS
    h.advance(SESSION_MS - 1)
    assert a in h.group("g").members


def test_simple_commit_for_group_less_consumer_creates_a_simple_group() -> None:
    h = Harness()
    assert h.commit("solo", {("t", 3): 42}) == {("t", 3): 0}
    group = h.group("solo")
    assert (group.state, group.protocol_type, group.generation_id) == (S.EMPTY, None, 0)
    assert h.fetched("solo", {"t": [3]}) == {("t", 3): 42}
    assert h.commit("solo", {("t", 3): 43}, version=0) == {("t", 3): 0}  # v0: no generation, Empty group
    assert h.fetched("solo", {"t": [3]}) == {("t", 3): 43}


@pytest.mark.parametrize(("version", "expected"), [(8, E.ILLEGAL_GENERATION), (9, E.GROUP_ID_NOT_FOUND)])
def test_member_commit_for_unknown_group(version: int, expected: ErrorCode) -> None:
    h = Harness()
    assert h.commit("nope", {("t", 0): 1}, generation=3, member_id="m", version=version) == {
        ("t", 0): expected
    }
    assert "nope" not in h.shard.state.groups


def test_commit_metadata_too_large_fails_only_that_partition() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=1, offset_metadata_max_bytes=3))
    assert h.commit("g", {("t", 0): 1}, metadata="abcd") == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
    assert h.commit("g", {("t", 0): 1}, metadata="abc") == {("t", 0): 0}
    assert h.commit("g", {("t", 1): 1}, metadata=None) == {("t", 1): 0}
    assert h.fetch("g", {"t": [1]}).topics[0].partitions[0].metadata == ""


def test_commit_with_explicit_retention_writes_value_v1_with_expire_timestamp() -> None:
    h = Harness()
    start = len(h.records)
    assert h.commit("g", {("t", 0): 5}, version=2, retention_ms=60_000) == {("t", 0): 0}
    (record,) = h.records[start:]
    assert record.value is not None
    assert record.value[:2] == b"\x00\x01"
    value = decode_value(decode_key(record.key), record.value)
    assert value == OffsetCommitValue(
        offset=5, metadata="", commit_timestamp=h.now, expire_timestamp=h.now + 60_000
    )


def test_commit_with_empty_group_id() -> None:
    h = Harness()
    assert h.commit("", {("t", 0): 1}) == {("t", 0): E.INVALID_GROUP_ID}


# -- OffsetFetch -------------------------------------------------------------------------------------


def test_fetch_all_topics_when_topics_is_null() -> None:
    h = Harness()
    h.commit("g", {("t", 1): 11, ("t", 0): 10, ("u", 0): 5})
    assert h.fetched("g", None) == {("t", 1): 11, ("t", 0): 10, ("u", 0): 5}
    assert h.fetched("unknown", None) == {}
    assert h.fetched("unknown", {"t": [0]}) == {("t", 0): -1}


def test_fetch_v1_single_group() -> None:
    h = Harness()
    h.commit("g", {("t", 0): 10})
    response = h.fetch("g", {"t": [0, 1]}, version=1)
    assert response == OffsetFetchResponse(
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name="t",
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(partition_index=0, committed_offset=10),
                    OffsetFetchResponse.OffsetFetchResponsePartition(partition_index=1, committed_offset=-1),
                ],
            )
        ]
    )


def test_fetch_v8_many_groups_with_per_group_errors() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=4), load=False)
    owned = [h.coordinator.partition_for(g) for g in ("g", "h")]
    for partition in sorted(set(owned)):
        h.coordinator.begin_loading(partition)
        h.apply(h.coordinator.complete_loading(partition, h.now))
    candidates = [f"x{i}" for i in range(100)]
    loading = next(g for g in candidates if h.coordinator.partition_for(g) not in owned)
    unowned = next(
        g
        for g in candidates
        if h.coordinator.partition_for(g) not in {*owned, h.coordinator.partition_for(loading)}
    )
    h.coordinator.begin_loading(h.coordinator.partition_for(loading))
    h.commit("g", {("t", 0): 1})
    h.commit("h", {("t", 0): 2})
    groups = [
        OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=g, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0])]
        )
        for g in ("g", "h", unowned, loading, "")
    ]
    groups.append(OffsetFetchRequest.OffsetFetchRequestGroup(group_id="h", topics=None))
    response = h.send(OffsetFetchRequest(groups=groups, require_stable=True), 9)
    summary = [
        (
            g.group_id,
            g.error_code,
            [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in g.topics],
        )
        for g in response.groups
    ]
    assert summary == [
        ("g", 0, [("t", [(0, 1)])]),
        ("h", 0, [("t", [(0, 2)])]),
        (unowned, E.NOT_COORDINATOR, []),
        (loading, E.COORDINATOR_LOAD_IN_PROGRESS, []),
        ("", E.INVALID_GROUP_ID, []),
        ("h", 0, [("t", [(0, 2)])]),
    ]


# -- OffsetDelete ------------------------------------------------------------------------------------


def offset_delete(h: Harness, group_id: str, partitions: dict[str, list[int]]) -> OffsetDeleteResponse:
    request = OffsetDeleteRequest(
        group_id=group_id,
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=t,
                partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p) for p in ps],
            )
            for t, ps in partitions.items()
        ],
    )
    response = h.send(request, 0)
    assert isinstance(response, OffsetDeleteResponse)
    return response


def test_offset_delete_refuses_subscribed_topics_of_an_active_consumer_group() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"], protocols=(("range", subscription("t")),))
    h.commit("g", {("t", 0): 1, ("old", 0): 2}, generation=gen, member_id=a)
    start = len(h.records)
    response = offset_delete(h, "g", {"t": [0], "old": [0, 1]})
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.topics] == [
        ("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)]),
        ("old", [(0, 0), (1, 0)]),
    ]
    assert decoded(h, start) == [(OffsetCommitKey(group="g", topic="old", partition=0), None)]
    assert h.fetched("g", None) == {("t", 0): 1}


def test_offset_delete_group_errors() -> None:
    h = Harness()
    assert offset_delete(h, "nope", {"t": [0]}).error_code == E.GROUP_ID_NOT_FOUND
    assert offset_delete(h, "", {"t": [0]}).error_code == E.INVALID_GROUP_ID
    h.form_group("connect", ["a"], protocol_type="connect", protocols=(("p", b""),))
    assert offset_delete(h, "connect", {"t": [0]}).error_code == E.NON_EMPTY_GROUP


# -- DeleteGroups, DescribeGroups, ListGroups ---------------------------------------------------------


def test_delete_group_writes_offset_tombstones_then_the_group_tombstone() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    h.commit("g", {("t", 0): 1, ("t", 1): 2}, generation=gen, member_id=a)
    h.commit("simple", {("t", 0): 3})
    request = DeleteGroupsRequest(groups_names=["g", "simple", "nope", ""])
    response = h.send(request, 2)
    assert response == DeleteGroupsResponse(
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id="g", error_code=E.NON_EMPTY_GROUP),
            DeleteGroupsResponse.DeletableGroupResult(group_id="simple", error_code=0),
            DeleteGroupsResponse.DeletableGroupResult(group_id="nope", error_code=E.GROUP_ID_NOT_FOUND),
            DeleteGroupsResponse.DeletableGroupResult(group_id="", error_code=E.INVALID_GROUP_ID),
        ]
    )
    h.leave("g", (a, None))
    start = len(h.records)
    assert h.send(DeleteGroupsRequest(groups_names=["g"]), 2).results[0].error_code == 0
    assert decoded(h, start) == [
        (OffsetCommitKey(group="g", topic="t", partition=0), None),
        (OffsetCommitKey(group="g", topic="t", partition=1), None),
        (GroupMetadataKey(group="g"), None),
    ]
    assert "g" not in h.shard.state.groups
    assert h.fetched("g", None) == {}
    assert h.send(DeleteGroupsRequest(groups_names=["g"]), 2).results[0].error_code == E.GROUP_ID_NOT_FOUND


def test_describe_groups() -> None:
    h = Harness()
    (a, b), _gen = h.form_group("g", ["a", "b"], assignments=None)
    response = h.send(DescribeGroupsRequest(groups=["g", "nope"]), 5)
    assert isinstance(response, DescribeGroupsResponse)
    stable, unknown = response.groups
    assert (stable.group_state, stable.protocol_type, stable.protocol_data, stable.error_code) == (
        "Stable",
        "consumer",
        "range",
        0,
    )
    assert [
        (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
        for m in stable.members
    ] == [
        (a, "a", "/10.0.0.1", subscription("t"), a.encode()),
        (b, "b", "/10.0.0.1", subscription("t"), b.encode()),
    ]
    assert unknown == DescribeGroupsResponse.DescribedGroup(group_id="nope", group_state="Dead")
    h.join("g", a)
    rebalancing = h.send(DescribeGroupsRequest(groups=["g"]), 5).groups[0]
    assert (rebalancing.group_state, rebalancing.protocol_data) == ("PreparingRebalance", "")
    assert [(m.member_metadata, m.member_assignment) for m in rebalancing.members] == [(b"", b""), (b"", b"")]


def test_list_groups_with_state_and_type_filters() -> None:
    h = Harness()
    h.form_group("stable", ["a"])
    h.commit("simple", {("t", 0): 1})
    h.join_new("joining")

    def listed(
        states: list[str], types: list[str] | None = None, version: int = 5
    ) -> list[tuple[str, str, str]]:
        response = h.send(ListGroupsRequest(states_filter=states, types_filter=types or []), version)
        assert isinstance(response, ListGroupsResponse)
        assert response.error_code == 0
        return sorted((g.group_id, g.protocol_type, g.group_state) for g in response.groups)

    assert listed([]) == [
        ("joining", "consumer", "PreparingRebalance"),
        ("simple", "", "Empty"),
        ("stable", "consumer", "Stable"),
    ]
    assert listed(["stable", "EMPTY"]) == [("simple", "", "Empty"), ("stable", "consumer", "Stable")]
    assert listed([], ["Classic"]) == listed([])
    assert listed([], ["consumer"]) == []


# -- expiry ------------------------------------------------------------------------------------------


def test_simple_group_offsets_expire_after_retention_then_the_group_goes() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 1})
    committed_at = h.now
    h.advance(RETENTION_MS - 1)
    assert h.fetched("solo", None) == {("t", 0): 1}
    start = len(h.records)
    assert h.apply(h.coordinator.expire_offsets(committed_at + RETENTION_MS - 1)).records == {}
    h.advance(1)
    # the periodic job (offsets.retention.check.interval.ms) finds it on its next run
    h.advance(600_000)
    assert decoded(h, start) == [
        (OffsetCommitKey(group="solo", topic="t", partition=0), None),
        (GroupMetadataKey(group="solo"), None),
    ]
    assert "solo" not in h.shard.state.groups


def test_empty_group_offsets_expire_counting_from_when_it_became_empty() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"])
    h.commit("g", {("t", 0): 1}, generation=gen, member_id=a)
    h.advance(SESSION_MS // 2)
    h.heartbeat("g", a, gen)
    h.advance(SESSION_MS // 2)
    h.leave("g", (a, None))
    emptied_at = h.now
    assert h.group("g").current_state_timestamp == emptied_at
    h.advance(RETENTION_MS - 1)
    assert h.apply(h.coordinator.expire_offsets(h.now)).records == {}
    result = h.apply(h.coordinator.expire_offsets(emptied_at + RETENTION_MS))
    assert [decode_key(r.key) for r in result.records[0]] == [
        OffsetCommitKey(group="g", topic="t", partition=0),
        GroupMetadataKey(group="g"),
    ]


def test_stable_consumer_group_keeps_subscribed_offsets_and_expires_the_others() -> None:
    h = Harness()
    (a,), gen = h.form_group("g", ["a"], protocols=(("range", subscription("t")),))
    h.commit("g", {("t", 0): 1, ("gone", 0): 2}, generation=gen, member_id=a)
    now = h.now + RETENTION_MS
    result = h.apply(h.coordinator.expire_offsets(now))
    assert [(decode_key(r.key), r.value) for r in result.records[0]] == [
        (OffsetCommitKey(group="g", topic="gone", partition=0), None)
    ]
    assert h.fetched("g", None) == {("t", 0): 1}


def test_rebalancing_group_offsets_do_not_expire() -> None:
    h = Harness()
    (a, _b), gen = h.form_group("g", ["a", "b"])
    h.commit("g", {("gone", 0): 2}, generation=gen, member_id=a)
    h.join("g", a)
    assert h.apply(h.coordinator.expire_offsets(h.now + 2 * RETENTION_MS)).records == {}


def test_explicit_expire_timestamp_wins() -> None:
    h = Harness()
    h.commit("solo", {("t", 0): 1}, version=2, retention_ms=1000)
    result = h.apply(h.coordinator.expire_offsets(h.now + 1000))
    assert [decode_key(r.key) for r in result.records[0]] == [
        OffsetCommitKey(group="solo", topic="t", partition=0),
        GroupMetadataKey(group="solo"),
    ]


# -- loading and routing -----------------------------------------------------------------------------


def test_requests_while_loading_and_for_unowned_partitions() -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=2), load=False)
    g0 = next(g for g in (f"g{i}" for i in range(50)) if h.coordinator.partition_for(g) == 0)
    g1 = next(g for g in (f"g{i}" for i in range(50)) if h.coordinator.partition_for(g) == 1)
    h.coordinator.begin_loading(0)
    assert h.response(h.join(g0)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.response(h.join(g1)).error_code == E.NOT_COORDINATOR
    assert h.commit(g0, {("t", 0): 1}) == {("t", 0): E.COORDINATOR_LOAD_IN_PROGRESS}
    assert h.fetch(g0, {"t": [0]}).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert (
        h.fetch(g0, {"t": [0]}, version=1).topics[0].partitions[0].error_code
        == E.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert h.send(ListGroupsRequest(), 4).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    described = h.send(DescribeGroupsRequest(groups=[g0, g1]), 5).groups
    assert [d.error_code for d in described] == [E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR]


def test_loading_replays_the_log_and_arms_heartbeats() -> None:
    live = Harness()
    (a, b), gen = live.form_group("g", ["a", "b"])
    live.commit("g", {("t", 0): 9}, generation=gen, member_id=a)
    live.commit("simple", {("t", 0): 1})
    live.commit("doomed", {("t", 0): 1})
    live.send(DeleteGroupsRequest(groups_names=["doomed"]), 2)

    restarted = Harness(load=False)
    restarted.now = live.now + 5
    restarted.coordinator.begin_loading(0)
    for record in live.records:
        restarted.coordinator.replay(0, encode_key(decode_key(record.key)), record.value)
    restarted.apply(restarted.coordinator.complete_loading(0, restarted.now))

    group = restarted.group("g")
    assert (group.state, group.generation_id, group.leader_id, list(group.members)) == (
        S.STABLE,
        gen,
        a,
        [a, b],
    )
    assert group.members[b].assignment == b.encode()
    assert restarted.timers[TimerKey(TimerKind.HEARTBEAT, 0, "g", a)] == restarted.now + SESSION_MS
    assert restarted.timers[TimerKey(TimerKind.GROUP_EXPIRATION, 0)] == restarted.now + 600_000
    assert restarted.fetched("g", None) == {("t", 0): 9}
    assert restarted.group("simple").state is S.EMPTY
    assert "doomed" not in restarted.shard.state.groups
    # members carry on where they were: same generation, heartbeats accepted
    assert restarted.heartbeat("g", b, gen) == E.NONE
    assert restarted.response(restarted.sync("g", b, gen)).assignment == b.encode()
    with pytest.raises(RuntimeError, match="loaded"):
        restarted.coordinator.replay(0, live.records[0].key, live.records[0].value)


def test_loading_an_oversized_group_rebalances_it() -> None:
    live = Harness()
    live.form_group("g", ["a", "b", "c"])
    small = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_max_size=2), load=False)
    small.coordinator.begin_loading(0)
    for record in live.records:
        small.coordinator.replay(0, record.key, record.value)
    small.apply(small.coordinator.complete_loading(0, small.now))
    assert small.group("g").state is S.PREPARING_REBALANCE
