"""The group APIs at the wire, against a real broker: exact answers a client library would hide.

- FindCoordinator v0-6: a GROUP key names this broker (batched keys from v4); SHARE and unknown key types
  get INVALID_REQUEST (TRANSACTION keys: tests/server/test_transactions.py).
- ``__consumer_offsets`` appears on first use: 50 partitions, internal, compacted; clients cannot produce to it.
- OffsetCommit/OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for partitions the broker does not have.
- A commit from a stale generation gets ILLEGAL_GENERATION, one during the sync phase
  REBALANCE_IN_PROGRESS, one from an unknown member UNKNOWN_MEMBER_ID; the current generation commits.
- SIGKILL of the broker: every committed offset of 200 groups spread over the partitions, and a Stable
  group's generation, leader and member come back (the member's heartbeat is accepted without a rebalance).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from tests.server.group_harness import Wire, assignment, subscription

from tidelog.coordinator.common import partition_for
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DeleteGroupsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    ProduceRequest,
    SyncGroupRequest,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0}

OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture
def wire(broker: Broker) -> Iterator[Wire]:
    connection = Wire(broker.bootstrap_servers)
    try:
        yield connection
    finally:
        connection.close()


def create_topic(wire: Wire, name: str, partitions: int) -> None:
    from tidelog.protocol.messages import CreateTopicsRequest

    response = wire.call(
        CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)
            ],
            timeout_ms=10_000,
        ),
        4,
    )
    assert response.topics[0].error_code == ErrorCode.NONE


def commit(
    wire: Wire,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member: str = "",
    version: int = 8,
) -> dict[tuple[str, int], int]:
    """OffsetCommit; returns the error code per partition."""
    topics: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=f"m{offset}"
            )
        )
    response = wire.call(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in topics.items()
            ],
        ),
        version,
    )
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def fetch(
    wire: Wire, group: str, partitions: list[tuple[str, int]], deadline: float = 0.0
) -> dict[tuple[str, int], tuple[int, str | None]]:
    """OffsetFetch v7 (one group), retried while the group's partition loads; (offset, metadata) per partition."""
    deadline = deadline or time.monotonic() + 20
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    response = wire.call(
        OffsetFetchRequest(
            group_id=group,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                for t, p in topics.items()
            ],
        ),
        7,
    )
    if response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
        time.sleep(0.05)
        return fetch(wire, group, partitions, deadline)
    assert response.error_code == ErrorCode.NONE
    result = {}
    for t in response.topics:
        for p in t.partitions:
            assert p.error_code == ErrorCode.NONE
            result[(t.name, p.partition_index)] = (p.committed_offset, p.metadata)
    return result


def join(wire: Wire, group: str, member: str = "", *, topic: str = "t", version: int = 5) -> object:
    """JoinGroup; a new dynamic member takes the MEMBER_ID_REQUIRED round trip (v4+) first."""
    response = wire.call(join_request(group, member, topic=topic), version)
    if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        assert not member
        response = wire.call(join_request(group, response.member_id, topic=topic), version)
    return response


def join_request(group: str, member: str = "", *, topic: str = "t") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        member_id=member,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription(topic))],
    )


def sync(wire: Wire, group: str, member: str, generation: int, assignments: dict[str, bytes]) -> object:
    return wire.call(
        SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()
            ],
        ),
        3,
    )


def heartbeat(wire: Wire, group: str, member: str, generation: int) -> int:
    response = wire.call(HeartbeatRequest(group_id=group, generation_id=generation, member_id=member), 3)
    return int(response.error_code)


def form_group(wire: Wire, group: str, topic: str) -> tuple[str, int]:
    """One dynamic member joins and syncs; returns (member id, generation)."""
    joined = join(wire, group, topic=topic)
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.leader == joined.member_id
    synced = sync(
        wire, group, joined.member_id, joined.generation_id, {joined.member_id: assignment(topic, [0])}
    )
    assert synced.error_code == ErrorCode.NONE
    return joined.member_id, joined.generation_id


# ---- FindCoordinator -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_names_this_broker_at_every_version(
    broker: Broker, wire: Wire, version: int
) -> None:
    if version < 4:
        response = wire.call(FindCoordinatorRequest(key="some-group", key_type=0), version)
        assert (response.error_code, response.node_id, response.host, response.port) == (
            ErrorCode.NONE,
            1,
            "127.0.0.1",
            broker.port,
        )
        return
    response = wire.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2", ""]), version)
    assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in response.coordinators] == [
        (key, 1, "127.0.0.1", broker.port, ErrorCode.NONE) for key in ("g1", "g2", "")
    ]


@pytest.mark.parametrize("version", range(1, 7))
def test_find_coordinator_other_key_types(wire: Wire, version: int) -> None:
    expected = {
        2: ErrorCode.INVALID_REQUEST,  # share groups are not served
        7: ErrorCode.INVALID_REQUEST,
    }
    for key_type, error in expected.items():
        if version < 4:
            response = wire.call(FindCoordinatorRequest(key="k", key_type=key_type), version)
            assert (response.error_code, response.node_id, response.host, response.port) == (
                error,
                -1,
                "",
                -1,
            )
            assert response.error_message
        else:
            response = wire.call(
                FindCoordinatorRequest(key_type=key_type, coordinator_keys=["a", "b"]), version
            )
            assert [(c.key, c.error_code, c.node_id) for c in response.coordinators] == [
                ("a", error, -1),
                ("b", error, -1),
            ]


def test_consumer_offsets_created_on_first_use(fresh_broker: Broker) -> None:
    wire = Wire(fresh_broker.bootstrap_servers)
    try:
        listed = wire.call(MetadataRequest(topics=None), 12)
        assert OFFSETS_TOPIC not in {t.name for t in listed.topics}
        assert wire.call(FindCoordinatorRequest(key="g", key_type=0), 3).error_code == ErrorCode.NONE
        for request in (
            MetadataRequest(topics=None),
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=OFFSETS_TOPIC)]),
        ):
            topics = {t.name: t for t in wire.call(request, 12).topics}
            internal = topics[OFFSETS_TOPIC]
            assert internal.error_code == ErrorCode.NONE
            assert internal.is_internal is True
            assert sorted(p.partition_index for p in internal.partitions) == list(range(50))
            assert all(p.leader_id == 1 for p in internal.partitions)
        configs = wire.call(
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=OFFSETS_TOPIC, configuration_keys=None
                    )
                ]
            ),
            4,
        )
        values = {c.name: c.value for c in configs.results[0].configs}
        assert values["cleanup.policy"] == "compact"
        assert values["segment.bytes"] == "104857600"
        # Clients cannot write to it.
        batch = encode_batch([SimpleRecord(key=b"k", value=b"v", timestamp=0)])
        produced = wire.call(
            ProduceRequest(
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=OFFSETS_TOPIC,
                        partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
                    )
                ],
            ),
            9,
        )
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    finally:
        wire.close()


# ---- offsets ---------------------------------------------------------------------------------------------


def test_commit_to_unknown_topics_and_partitions(wire: Wire) -> None:
    create_topic(wire, "known", 2)
    errors = commit(wire, "unknowns", {("known", 0): 5, ("known", 1): 6, ("known", 2): 7, ("ghost", 0): 8})
    assert errors == {
        ("known", 0): ErrorCode.NONE,
        ("known", 1): ErrorCode.NONE,
        ("known", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("ghost", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert fetch(wire, "unknowns", [("known", 0), ("known", 1), ("known", 2), ("ghost", 0)]) == {
        ("known", 0): (5, "m5"),
        ("known", 1): (6, "m6"),
        ("known", 2): (-1, ""),
        ("ghost", 0): (-1, ""),
    }
    # Only unknown partitions: the coordinator is not asked, so no group appears.
    assert commit(wire, "only-ghosts", {("ghost", 3): 1}) == {
        ("ghost", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    listed = {g.group_id for g in wire.call(ListGroupsRequest(), 4).groups}
    assert "unknowns" in listed
    assert "only-ghosts" not in listed
    # OffsetDelete: unknown partitions per partition, known ones deleted.
    deleted = wire.call(
        OffsetDeleteRequest(
            group_id="unknowns",
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name="known",
                    partitions=[
                        OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=i) for i in (0, 9)
                    ],
                ),
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name="ghost",
                    partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
                ),
            ],
        ),
        0,
    )
    assert deleted.error_code == ErrorCode.NONE
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in deleted.topics] == [
        ("known", [(0, ErrorCode.NONE), (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("ghost", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
    ]
    assert fetch(wire, "unknowns", [("known", 0), ("known", 1)]) == {
        ("known", 0): (-1, ""),
        ("known", 1): (6, "m6"),
    }
    missing = wire.call(
        OffsetDeleteRequest(
            group_id="never-existed",
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name="ghost",
                    partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
                )
            ],
        ),
        0,
    )
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_commits_from_stale_generations_are_rejected(broker: Broker, wire: Wire) -> None:
    create_topic(wire, "stale", 2)
    a, first = form_group(wire, "stale-group", "stale")
    assert commit(wire, "stale-group", {("stale", 0): 1}, generation=first, member=a) == {("stale", 0): 0}

    # A second member joins: its JoinGroup waits (on its own connection) until the first rejoins.
    other = Wire(broker.bootstrap_servers)
    try:
        required = other.call(join_request("stale-group", topic="stale"), 5)
        assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED
        other.send(join_request("stale-group", required.member_id, topic="stale"), 5)
        assert heartbeat(wire, "stale-group", a, first) == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = join(wire, "stale-group", a, topic="stale")
        b_joined = other.receive()
        assert rejoined.error_code == b_joined.error_code == ErrorCode.NONE
        second = rejoined.generation_id
        assert second == first + 1 == b_joined.generation_id
        b = b_joined.member_id
        # Sync phase: the new generation may not commit yet, the old one never again.
        assert commit(wire, "stale-group", {("stale", 0): 2}, generation=second, member=a) == {
            ("stale", 0): ErrorCode.REBALANCE_IN_PROGRESS
        }
        assert commit(wire, "stale-group", {("stale", 0): 2}, generation=first, member=a) == {
            ("stale", 0): ErrorCode.ILLEGAL_GENERATION
        }
        other.send(SyncGroupRequest(group_id="stale-group", generation_id=second, member_id=b), 3)
        leader_sync = sync(
            wire, "stale-group", a, second, {a: assignment("stale", [0]), b: assignment("stale", [1])}
        )
        assert leader_sync.error_code == ErrorCode.NONE
        assert other.receive().error_code == ErrorCode.NONE
        # Stable: only the current generation of a current member commits.
        assert commit(wire, "stale-group", {("stale", 0): 3}, generation=first, member=a) == {
            ("stale", 0): ErrorCode.ILLEGAL_GENERATION
        }
        assert commit(wire, "stale-group", {("stale", 0): 3}, generation=second, member="stranger") == {
            ("stale", 0): ErrorCode.UNKNOWN_MEMBER_ID
        }
        assert commit(wire, "stale-group", {("stale", 1): 4}, generation=second, member=b) == {
            ("stale", 1): ErrorCode.NONE
        }
        assert commit(wire, "stale-group", {("stale", 0): 5}, generation=second, member=a) == {
            ("stale", 0): ErrorCode.NONE
        }
        assert fetch(wire, "stale-group", [("stale", 0), ("stale", 1)]) == {
            ("stale", 0): (5, "m5"),
            ("stale", 1): (4, "m4"),
        }
    finally:
        other.close()


# ---- durability ------------------------------------------------------------------------------------------


def test_offsets_and_groups_survive_sigkill(fresh_broker: Broker) -> None:
    wire = Wire(fresh_broker.bootstrap_servers)
    create_topic(wire, "durable", 4)
    assert wire.call(FindCoordinatorRequest(key="durable-0"), 0).error_code == ErrorCode.NONE
    groups = [f"durable-{i}" for i in range(200)]
    spread = {partition_for(g, 50) for g in groups}
    assert len(spread) >= 45, "the groups must land on most __consumer_offsets partitions"
    expected: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
    for i, group in enumerate(groups):
        # Two commits each: the later one must win after loading.
        commit(wire, group, {("durable", p): i for p in range(4)})
        offsets = {("durable", p): 1000 * i + p for p in range(4)}
        assert set(commit(wire, group, offsets).values()) == {ErrorCode.NONE}
        expected[group] = {tp: (o, f"m{o}") for tp, o in offsets.items()}
    member, generation = form_group(wire, "durable-stable", "durable")
    assert commit(wire, "durable-stable", {("durable", 0): 42}, generation=generation, member=member) == {
        ("durable", 0): ErrorCode.NONE
    }
    # A deleted group must stay deleted.
    commit(wire, "durable-deleted", {("durable", 0): 7})
    deleted = wire.call(DeleteGroupsRequest(groups_names=["durable-deleted"]), 2)
    assert deleted.results[0].error_code == ErrorCode.NONE
    wire.close()

    fresh_broker.kill()
    fresh_broker.restart()

    wire = Wire(fresh_broker.bootstrap_servers)
    try:
        for group in groups:
            assert fetch(wire, group, sorted(expected[group])) == expected[group]
        assert fetch(wire, "durable-stable", [("durable", 0)]) == {("durable", 0): (42, "m42")}
        # The Stable group came back as it was: same generation, same member, no rebalance needed.
        assert heartbeat(wire, "durable-stable", member, generation) == ErrorCode.NONE
        described = wire.call(DescribeGroupsRequest(groups=["durable-stable", "durable-deleted"]), 5).groups
        assert [(g.group_id, g.group_state, g.protocol_type, g.protocol_data) for g in described] == [
            ("durable-stable", "Stable", "consumer", "range"),
            ("durable-deleted", "Dead", "", ""),
        ]
        assert [m.member_id for m in described[0].members] == [member]
        assert described[0].members[0].member_assignment == assignment("durable", [0])
        listed = {g.group_id: g.group_state for g in wire.call(ListGroupsRequest(), 4).groups}
        assert listed == {**dict.fromkeys(groups, "Empty"), "durable-stable": "Stable"}
    finally:
        wire.close()
    log = fresh_broker.log_path.read_text()
    assert "loaded __consumer_offsets-" in log
