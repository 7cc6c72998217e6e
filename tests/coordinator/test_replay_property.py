"""Property: whatever happens, replaying the records a shard emitted rebuilds its durable state.

Random sequences of client requests (well-behaved and not), timer firings and expiry runs drive a
live coordinator. After each sequence a fresh shard replays every emitted record, as a broker does
when it loads the partition, and must hold the same offsets and the same groups; every group that
is Stable or Empty must match member for member. Along the way the runtime-facing invariants are
checked too: no parked request is forgotten, the runtime's timer table mirrors the shard's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st
from tests.coordinator.harness import REBALANCE_MS, SESSION_MS, Harness, subscription

from tidelog.coordinator.common import DeferredResponse
from tidelog.coordinator.group import ClassicGroupState, GroupCoordinator, GroupCoordinatorConfig
from tidelog.coordinator.group.classic_group import ClassicGroup
from tidelog.coordinator.group.shard import GroupCoordinatorShard
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DeleteGroupsRequest, JoinGroupResponse, OffsetDeleteRequest

S = ClassicGroupState
GROUPS = ("g0", "g1")
PROTOCOL_CHOICES = (
    (("range", subscription("t")),),
    (("range", subscription("t", "u")),),
    (("roundrobin", subscription("t")), ("range", subscription("t"))),
    (("sticky", subscription("u")),),
)


@dataclass
class Client:
    """A consumer that mostly behaves: joins, syncs, heartbeats, and rejoins when told to."""

    name: str
    group: str
    instance_id: str | None
    version: int = 9
    member_id: str = ""
    generation: int = -1
    synced_generation: int = -1
    needs_rejoin: bool = True
    join: Any = None
    sync: Any = None
    join_members: tuple[str, ...] = ()
    leader: str = ""

    def reset(self) -> None:
        self.member_id, self.generation, self.needs_rejoin = "", -1, True

    def on_error(self, error: int) -> None:
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.reset()
        elif error != ErrorCode.NONE:
            self.needs_rejoin = True

    def observe(self, h: Harness) -> None:
        """Learn from completed JoinGroup / SyncGroup responses."""
        if self.join is not None and not h.is_parked(self.join):
            response = h.response(self.join)
            self.join = None
            assert isinstance(response, JoinGroupResponse)
            if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
            elif response.error_code == ErrorCode.NONE:
                self.member_id, self.generation = response.member_id, response.generation_id
                self.leader = response.leader
                self.join_members = tuple(m.member_id for m in response.members)
                self.needs_rejoin = False
            else:
                self.on_error(response.error_code)
        if self.sync is not None and not h.is_parked(self.sync):
            response = h.response(self.sync)
            self.sync = None
            if response.error_code == ErrorCode.NONE:
                self.synced_generation = self.generation
            else:
                self.on_error(response.error_code)

    def step(self, h: Harness, protocols: int) -> None:
        """The client's natural next request."""
        if (self.join is not None and h.is_parked(self.join)) or (
            self.sync is not None and h.is_parked(self.sync)
        ):
            return
        if self.needs_rejoin or not self.member_id:
            self.join = h.join(
                self.group,
                self.member_id,
                version=self.version,
                protocols=PROTOCOL_CHOICES[protocols],
                instance_id=self.instance_id if self.version >= 5 else None,
                client_id=self.name,
            )
        elif self.synced_generation != self.generation:
            assignments = None
            if self.member_id == self.leader:
                assignments = {m: f"{m}@{self.generation}".encode() for m in self.join_members}
            self.sync = h.sync(
                self.group, self.member_id, self.generation, assignments, instance_id=self.instance_id
            )
        else:
            self.on_error(
                h.heartbeat(self.group, self.member_id, self.generation, instance_id=self.instance_id)
            )


CLIENTS = [
    ("a", "g0", None, 9),
    ("b", "g0", None, 3),
    ("s", "g0", "static-s", 9),
    ("c", "g1", None, 8),
    ("t", "g1", "static-t", 5),
]

clients = st.integers(min_value=0, max_value=len(CLIENTS) - 1)
protocol_choices = st.sampled_from([0, 0, 0, 1, 2, 3])
step = st.tuples(st.just("step"), clients, protocol_choices)
tick = st.tuples(st.just("tick"), protocol_choices)
ops = st.one_of(
    *[step] * 8,
    *[tick] * 4,
    st.tuples(st.just("advance"), st.sampled_from([500, 1000, 3000])),
    st.tuples(
        st.just("advance"), st.sampled_from([0, 1000, 3000, SESSION_MS, REBALANCE_MS, 8 * 24 * 3600 * 1000])
    ),
    st.tuples(st.just("rejoin"), clients, st.sampled_from([0, 3, 4, 8, 9]), protocol_choices),
    st.tuples(st.just("leave"), clients, st.sampled_from([0, 3, 5])),
    st.tuples(st.just("restart"), clients),
    st.tuples(
        st.just("commit"), clients, st.sampled_from(["t", "u"]), st.integers(0, 2), st.sampled_from([2, 8, 9])
    ),
    st.tuples(st.just("commit-simple"), st.sampled_from([*GROUPS, "simple"]), st.integers(0, 2)),
    st.tuples(st.just("offset-delete"), st.sampled_from([*GROUPS, "simple"]), st.sampled_from(["t", "u"])),
    st.tuples(st.just("delete-group"), st.sampled_from([*GROUPS, "simple"])),
    st.tuples(st.just("expire")),
)


def run(h: Harness, population: list[Client], op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind in ("step", "rejoin", "leave", "commit", "restart"):
        c = population[op[1]]
    if kind == "step":
        h.advance(300)  # clients take a little while between requests
        c.step(h, op[2])
    elif kind == "tick":
        h.advance(300)
        for client in population:  # every client takes its next step
            client.observe(h)
            client.step(h, op[1])
    elif kind == "rejoin":
        # a JoinGroup whenever, with any version and protocols (a restart, a metadata change, a bug)
        _, _, version, choice = op
        if c.join is None or not h.is_parked(c.join):
            c.join = h.join(
                c.group,
                c.member_id,
                version=version,
                protocols=PROTOCOL_CHOICES[choice],
                instance_id=c.instance_id if version >= 5 else None,
                client_id=c.name,
            )
    elif kind == "restart":
        # the process restarts: parked requests are abandoned, the member id is forgotten (static
        # members keep their group.instance.id), and it joins again
        c.reset()
        c.join = c.sync = None
        c.synced_generation = -1
        c.step(h, 0)
    elif kind == "leave":
        h.leave(c.group, (c.member_id, c.instance_id if op[2] >= 3 else None), version=op[2])
        c.reset()
    elif kind == "commit":
        _, _, topic, partition, version = op
        h.commit(
            c.group,
            {(topic, partition): h.now},
            generation=c.generation,
            member_id=c.member_id,
            version=version,
        )
    elif kind == "commit-simple":
        h.commit(op[1], {("t", op[2]): h.now})
    elif kind == "offset-delete":
        h.send(
            OffsetDeleteRequest(
                group_id=op[1],
                topics=[
                    OffsetDeleteRequest.OffsetDeleteRequestTopic(
                        name=op[2],
                        partitions=[
                            OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=i)
                            for i in range(3)
                        ],
                    )
                ],
            ),
            0,
        )
    elif kind == "delete-group":
        h.send(DeleteGroupsRequest(groups_names=[op[1]]), 2)
    elif kind == "advance":
        h.advance(op[1])
    else:
        h.apply(h.coordinator.expire_offsets(h.now))
    for client in population:
        client.observe(h)


def projection(group: ClassicGroup) -> tuple[Any, ...]:
    """What a GroupMetadata record carries about a group (the state timestamp only matters when Empty:
    Kafka stamps a Stable group's record with the time its CompletingRebalance began)."""
    members = tuple(
        (
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata(group.protocol_name),
            m.assignment,
        )
        for m in group.members.values()
    )
    timestamp = group.current_state_timestamp if group.state is S.EMPTY else None
    return (
        group.state,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        timestamp,
        members,
    )


def check_replay(h: Harness, fresh: GroupCoordinatorShard, replayed_count: int) -> int:
    """Feed ``fresh`` (a shard still loading) the records emitted since last time, then compare."""
    for record in h.records[replayed_count:]:
        fresh.replay(record.key, record.value)
    live = h.shard.state
    assert fresh.state.offsets.snapshot() == live.offsets.snapshot()
    assert set(fresh.state.groups) == set(live.groups)
    for group_id, group in live.groups.items():
        rebuilt = fresh.state.groups[group_id]
        if group.state in (S.STABLE, S.EMPTY):
            assert projection(rebuilt) == projection(group)
        else:
            assert rebuilt.state in (S.STABLE, S.EMPTY)
            assert rebuilt.generation_id <= group.generation_id
    return len(h.records)


def check_invariants(h: Harness, issued: list[DeferredResponse]) -> None:
    state = h.shard.state
    # the runtime's timer table is exactly what the shard believes it asked for
    assert h.timers == {key: timer.deadline_ms for key, timer in state.timers.items()}
    # every parked request is held by a member, and every held handle is parked
    parked = {d.handle_id for d in issued if d.handle_id not in h.completed}
    held = set()
    for group in state.groups.values():
        for member in group.members.values():
            held |= {d.handle_id for d in (member.awaiting_join, member.awaiting_sync) if d is not None}
        assert group.num_members_awaiting_join == sum(m.is_awaiting_join for m in group.members.values())
        assert group.static_members == {
            m.group_instance_id: m.member_id
            for m in group.members.values()
            if m.group_instance_id is not None
        }
        assert (group.leader_id in group.members) if group.members else group.leader_id is None
        n = len(group.members)
        expected = sorted(name for m in group.members.values() for name in m.protocol_names())
        assert sorted(group.supported_protocols.elements()) == expected
        assert all(0 < count <= n for count in group.supported_protocols.values())
    assert parked == held


@given(st.lists(ops, min_size=30, max_size=150))
def test_replaying_emitted_records_rebuilds_the_durable_state(sequence: list[tuple[Any, ...]]) -> None:
    h = Harness(GroupCoordinatorConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=1000))
    population = [Client(name, group, instance, version) for name, group, instance, version in CLIENTS]
    issued: list[DeferredResponse] = []
    fresh = GroupCoordinator(h.config).begin_loading(0)
    replayed_count = 0
    for op in sequence:
        before = len(h.results)
        run(h, population, op)
        issued.extend(r.response for r in h.results[before:] if isinstance(r.response, DeferredResponse))
        check_invariants(h, issued)
        replayed_count = check_replay(h, fresh, replayed_count)
        for group in h.shard.state.groups.values():
            if group.state is S.STABLE:
                event(f"reached Stable with {len(group.members)} members")

    for g in h.shard.state.groups.values():
        event(f"ends {g.state.value}")
    event(f"records: {min(len(h.records) // 10 * 10, 50)}+")
