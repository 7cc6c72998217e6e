"""Property: whatever consumer-protocol members do, replaying the emitted records rebuilds the groups,
partitions are only ever handed over once revoked, and a group left alone settles on a full assignment.

Random sequences of heartbeats, leaves (dynamic and static), restarts under a new member id, members
that go silent, wrong epochs, subscription and topic changes, offset commits, deletions, expiry and
time passing (session and rebalance timeouts) drive a live coordinator. After every step a fresh
shard replays every emitted record, as a broker loading the partition does, and must hold exactly
the same consumer groups (a consumer group has no state outside its records). Along the way: no
partition is owned by two live clients at once, the runtime's timer table mirrors the shard's, every
member has a session timer and every revoking member a rebalance timer. At the end the survivors
heartbeat until the group is Stable, and then every partition of their topics is owned by exactly one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st
from tests.coordinator.consumer_harness import (
    HEARTBEAT_MS,
    REBALANCE_MS,
    SESSION_MS,
    ConsumerHarness,
    Member,
    image,
)

from tidelog.coordinator.group import ConsumerGroupState, GroupCoordinator, TimerKind, TopicsImage
from tidelog.coordinator.group.consumer_group import ConsumerGroup
from tidelog.coordinator.group.consumer_group_member import MemberState
from tidelog.coordinator.group.shard import GroupCoordinatorShard
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DeleteGroupsRequest

IMAGES = [image(t=6, u=2), image(t=6), image(t=8, u=2), image(t=3, u=4)]
SUBSCRIPTIONS = [("t",), ("t", "u"), ("u",)]
CLIENTS = [  # name, group, instance id, assignor
    ("a", "g0", None, None),
    ("b", "g0", None, None),
    ("s", "g0", "static-s", None),
    ("c", "g1", None, "range"),
    ("d", "g1", None, "range"),
]


@dataclass
class Client:
    """One process: its current incarnation (a model member), alive or silent."""

    name: str
    group: str
    instance_id: str | None
    assignor: str | None
    member: Member | None = None
    incarnation: int = 0
    alive: bool = True
    topics: tuple[str, ...] = ("t",)

    def start(self, h: ConsumerHarness) -> Member:
        self.incarnation += 1
        self.member = Member(
            h,
            f"{self.name}-{self.incarnation}",
            group_id=self.group,
            topics=self.topics,
            instance_id=self.instance_id,
            assignor=self.assignor,
        )
        self.alive = True
        return self.member

    def current(self, h: ConsumerHarness) -> Member:
        return self.member if self.member is not None else self.start(h)


clients = st.integers(0, len(CLIENTS) - 1)
ops = st.one_of(
    *[st.tuples(st.just("beat"), clients)] * 6,
    *[st.tuples(st.just("tick"))] * 3,
    st.tuples(st.just("advance"), st.sampled_from([1000, HEARTBEAT_MS, SESSION_MS, REBALANCE_MS])),
    st.tuples(st.just("leave"), clients),
    st.tuples(st.just("pause"), clients),
    st.tuples(st.just("restart"), clients),
    st.tuples(st.just("silence"), clients),
    st.tuples(st.just("bad-epoch"), clients),
    st.tuples(st.just("hold-revoked"), clients),
    st.tuples(st.just("subscribe"), clients, st.integers(0, len(SUBSCRIPTIONS) - 1)),
    st.tuples(st.just("topics"), st.integers(0, len(IMAGES) - 1)),
    st.tuples(st.just("commit"), clients),
    st.tuples(st.just("delete"), st.sampled_from(["g0", "g1"])),
    st.tuples(st.just("expire")),
)


def run(h: ConsumerHarness, population: list[Client], op: tuple[Any, ...]) -> None:
    kind = op[0]
    c = population[op[1]] if kind not in ("tick", "advance", "topics", "delete", "expire") else None
    if kind == "beat":
        assert c is not None
        h.advance(300)
        if c.alive:
            c.current(h).heartbeat()
    elif kind == "tick":
        h.advance(1000)
        for client in population:
            if client.alive:
                client.current(h).heartbeat()
    elif kind == "advance":
        h.advance(op[1])
    elif kind == "leave":
        assert c is not None
        if c.member is not None and c.alive:
            c.member.leave()
            c.member = None
    elif kind == "pause":
        assert c is not None
        if c.member is not None and c.alive and c.instance_id is not None:
            c.member.leave(static_pause=True)
            c.member = None
    elif kind == "restart":
        assert c is not None  # the process dies (no leave) and starts again with a new member id
        c.start(h).heartbeat()
    elif kind == "silence":
        assert c is not None  # the process hangs: it stops heartbeating (and consuming)
        c.alive = False
    elif kind == "bad-epoch":
        assert c is not None
        if c.member is not None and c.alive and c.member.epoch > 0:
            c.member.epoch += 5
            c.member.heartbeat()
    elif kind == "hold-revoked":
        # a client slow to revoke: it heartbeats claiming everything it was last given, plus what
        # it should be revoking, for one round (the coordinator must not hand those out meanwhile)
        assert c is not None
        if c.member is not None and c.alive and c.member.epoch > 0:
            group = h.shard.state.consumer_groups.get(c.group)
            stored = None if group is None else group.members.get(c.member.member_id)
            if stored is not None and stored.state is MemberState.UNREVOKED_PARTITIONS:
                names = {t.topic_id: t.name for t in h.topics.by_name.values()}
                for topic_id, ps in stored.partitions_pending_revocation.items():
                    if topic_id in names:
                        c.member.owned.setdefault(names[topic_id], set()).update(ps)
                c.member.heartbeat()
    elif kind == "subscribe":
        assert c is not None
        c.topics = SUBSCRIPTIONS[op[2]]
        if c.member is not None:
            c.member.topics = c.topics
            c.member.send_full = True
    elif kind == "topics":
        h.set_topics(IMAGES[op[1]])
    elif kind == "commit":
        assert c is not None
        if c.member is not None and c.alive and c.member.epoch > 0:
            h.commit(c.group, {("t", 0): h.now}, generation=c.member.epoch, member_id=c.member.member_id)
    elif kind == "delete":
        h.send(DeleteGroupsRequest(groups_names=[op[1]]), 2)
    else:
        h.apply(h.coordinator.expire_offsets(h.now))


def check_replay(h: ConsumerHarness, fresh: GroupCoordinatorShard, replayed: int) -> int:
    for record in h.records[replayed:]:
        fresh.replay(record.key, record.value)
    live, rebuilt = h.shard.state, fresh.state
    assert set(rebuilt.consumer_groups) == set(live.consumer_groups)
    assert set(rebuilt.groups) == set(live.groups)
    assert rebuilt.offsets.snapshot() == live.offsets.snapshot()
    for group_id, group in live.consumer_groups.items():
        assert projection(rebuilt.consumer_groups[group_id]) == projection(group)
    return len(h.records)


def projection(group: ConsumerGroup) -> tuple[Any, ...]:
    return (
        group.group_epoch,
        group.assignment_epoch,
        group.state,
        group.members,
        group.static_members,
        group.target_assignment,
        group.subscription_metadata,
        group.partition_owners,
        +group.subscribed_topic_names,
    )


def check_invariants(h: ConsumerHarness, population: list[Client]) -> None:
    state = h.shard.state
    assert h.timers == {key: timer.deadline_ms for key, timer in state.timers.items()}
    assert not set(state.groups) & set(state.consumer_groups)
    for group in state.consumer_groups.values():
        for member in group.members.values():
            assert h.timers.get(
                h.shard.state.timer_key(TimerKind.CONSUMER_SESSION, group.group_id, member.member_id)
            )
            if member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch >= 0:
                key = state.timer_key(TimerKind.CONSUMER_REBALANCE, group.group_id, member.member_id)
                assert key in h.timers
    # No partition is consumed by two live clients whose membership the coordinator still knows.
    for group_id in ("g0", "g1"):
        owners: dict[tuple[str, int], str] = {}
        consumer_group = state.consumer_groups.get(group_id)
        for client in population:
            m = client.member
            if client.group != group_id or m is None or not client.alive or consumer_group is None:
                continue
            if m.member_id not in consumer_group.members:
                continue
            for tp in m.consuming():
                assert tp not in owners, f"{tp} consumed by {owners[tp]} and {m.member_id}"
                owners[tp] = m.member_id


def converge(h: ConsumerHarness, population: list[Client]) -> None:
    """Chaos stops: survivors heartbeat while dead incarnations expire, then until the groups settle."""
    survivors = [c for c in population if c.alive]
    for _ in range(SESSION_MS // HEARTBEAT_MS + 2):
        h.advance(HEARTBEAT_MS)
        for client in survivors:
            client.current(h).heartbeat()
    for _ in range(10):
        h.advance(100)
        for client in survivors:
            client.current(h).heartbeat()
    for group_id in ("g0", "g1"):
        members = [c.current(h) for c in survivors if c.group == group_id]
        group = h.shard.state.consumer_groups.get(group_id)
        if not members:
            continue
        assert group is not None
        assert group.state is ConsumerGroupState.STABLE, (group, group.members)
        assert set(group.members) == {m.member_id for m in members}
        owned = sorted((t, p) for m in members for t, ps in m.owned.items() for p in ps)
        subscribed = {t for m in members for t in m.topics if t in h.topics.by_name}
        expected = sorted((t, p) for t in subscribed for p in range(h.topics.by_name[t].num_partitions))
        assert owned == expected
        event(f"{group_id} settles with {len(members)} members")


@given(st.lists(ops, min_size=20, max_size=120))
def test_consumer_groups_replay_revoke_before_reassign_and_settle(sequence: list[tuple[Any, ...]]) -> None:
    h = ConsumerHarness(IMAGES[0])
    population = [Client(*spec) for spec in CLIENTS]
    fresh_coordinator = GroupCoordinator(h.config)
    fresh_coordinator.set_topics_image(TopicsImage.EMPTY)  # replay must not depend on the topics
    fresh = fresh_coordinator.begin_loading(0)
    replayed = 0
    for op in sequence:
        run(h, population, op)
        check_invariants(h, population)
        replayed = check_replay(h, fresh, replayed)
    errors = {e for c in population if c.member is not None for e in c.member.errors}
    for error in errors:
        event(f"saw {ErrorCode(error).name}")
    converge(h, population)
    replayed = check_replay(h, fresh, replayed)
