"""The admin side of share groups against one broker for the module: DescribeShareGroupOffsets (with
tidelog's pending-records tag), AlterShareGroupOffsets, DeleteShareGroupOffsets, ListGroups with types and
DeleteGroups on the raw wire; group ids between group types; confluent-kafka's AdminClient listing and
deleting a share group; the ``tidelog share-groups`` commands with their exact output.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cli.cli_support import failed, ok, tidelog_cli
from tests.support.share_groups import prime_acknowledging, value_of

from tidelog.client.wire import WireClient, connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from tidelog.protocol.share_pending import PENDING_TAG, decode_pending
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

_Describe = DescribeShareGroupOffsetsRequest


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker({"offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 1}) as b:
        yield b


@pytest.fixture
def topic(broker: Broker) -> str:
    name = f"qa-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def _produce(broker: Broker, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value)
    producer.flush(10)


def _join(
    wire: WireClient, group: str, topic: str, member: str, epoch: int = 0
) -> ShareGroupHeartbeatResponse:
    return wire.call(
        ShareGroupHeartbeatRequest(
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            subscribed_topic_names=[topic] if epoch == 0 else None,
        ),
        1,
        expect=ShareGroupHeartbeatResponse,
    )


def _fetch(
    wire: WireClient, group: str, member: str, topic_id: uuid.UUID, epoch: int = 0
) -> ShareFetchResponse:
    request = ShareFetchRequest(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=0,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[
            ShareFetchRequest.FetchTopic(
                topic_id=topic_id, partitions=[ShareFetchRequest.FetchPartition(partition_index=0)]
            )
        ],
    )
    return wire.call(request, 1, expect=ShareFetchResponse)


def _acquired(response: ShareFetchResponse) -> list[tuple[int, int, int]]:
    return [
        (r.first_offset, r.last_offset, r.delivery_count)
        for t in response.responses
        for p in t.partitions
        for r in p.acquired_records
    ]


def _describe(
    wire: WireClient, group: str, *, pending: bool = False
) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup:
    asked = _Describe.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)
    if pending:
        asked.unknown_tagged_fields = {PENDING_TAG: b""}
    answer = wire.call(_Describe(groups=[asked]), 0, expect=DescribeShareGroupOffsetsResponse)
    return answer.groups[0]


def _offsets(
    group: DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup,
) -> list[tuple[str, int, int, int]]:
    return [
        (t.topic_name, p.partition_index, p.start_offset, p.error_code)
        for t in group.topics
        for p in t.partitions
    ]


def _alter(wire: WireClient, group: str, topic: str, offset: int) -> AlterShareGroupOffsetsResponse:
    request = AlterShareGroupOffsetsRequest(
        group_id=group,
        topics=[
            AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(
                topic_name=topic,
                partitions=[
                    AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition(
                        partition_index=0, start_offset=offset
                    )
                ],
            )
        ],
    )
    return wire.call(request, 0, expect=AlterShareGroupOffsetsResponse)


def _delete_offsets(wire: WireClient, group: str, topic: str) -> DeleteShareGroupOffsetsResponse:
    request = DeleteShareGroupOffsetsRequest(
        group_id=group,
        topics=[DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)],
    )
    return wire.call(request, 0, expect=DeleteShareGroupOffsetsResponse)


def _delete_groups(wire: WireClient, *groups: str) -> list[tuple[str, int]]:
    answer = wire.call(DeleteGroupsRequest(groups_names=list(groups)), 2, expect=DeleteGroupsResponse)
    return [(r.group_id, r.error_code) for r in answer.results]


def _listed(wire: WireClient, types: list[str], version: int = 5) -> dict[str, tuple[str, str]]:
    answer = wire.call(ListGroupsRequest(types_filter=types), version, expect=ListGroupsResponse)
    return {g.group_id: (g.group_state or "", g.group_type) for g in answer.groups}


def test_offsets_apis_on_the_wire(broker: Broker, topic: str) -> None:
    group = f"g-{topic}"
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        meta = wire.call(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
            12,
            expect=MetadataResponse,
        )
        topic_id = meta.topics[0].topic_id
        assert _describe(wire, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        member = uuid.uuid4().hex
        assert _join(wire, group, topic, member).error_code == ErrorCode.NONE
        assert _fetch(wire, group, member, topic_id).error_code == ErrorCode.NONE  # starts at the end: 0
        _produce(broker, topic, [b"a", b"b", b"c", b"d", b"e"])
        assert _acquired(_fetch(wire, group, member, topic_id, 1)) == [(0, 4, 1)]

        described = _describe(wire, group, pending=True)
        assert _offsets(described) == [(topic, 0, 0, 0)]
        partition = described.topics[0].partitions[0]
        assert partition.leader_epoch == 0
        assert partition.unknown_tagged_fields is not None
        (pending,) = decode_pending(partition.unknown_tagged_fields[PENDING_TAG])
        assert (pending.member_id, pending.first_offset, pending.last_offset, pending.delivery_count) == (
            member,
            0,
            4,
            1,
        )
        assert 0 < pending.lock_remaining_ms <= 30_000
        assert _describe(wire, group).topics[0].partitions[0].unknown_tagged_fields is None

        # a group with a member: nothing is altered or deleted
        altered = _alter(wire, group, topic, 3)
        assert altered.error_code == ErrorCode.NON_EMPTY_GROUP
        assert [p.error_code for p in altered.responses[0].partitions] == [ErrorCode.NON_EMPTY_GROUP]
        assert _delete_offsets(wire, group, topic).error_code == ErrorCode.NON_EMPTY_GROUP
        assert _delete_groups(wire, group) == [(group, ErrorCode.NON_EMPTY_GROUP)]
        assert _listed(wire, ["share"])[group] == ("Stable", "share")
        assert group not in _listed(wire, ["consumer", "classic"])
        assert _listed(wire, [], version=4)[group][0] == "Stable"  # as Kafka lists them: all types

        assert _join(wire, group, topic, member, epoch=-1).error_code == ErrorCode.NONE
        assert _listed(wire, [])[group] == ("Empty", "share")
        altered = _alter(wire, group, topic, 3)
        assert (altered.error_code, altered.responses[0].topic_id) == (ErrorCode.NONE, topic_id)
        assert [p.error_code for p in altered.responses[0].partitions] == [ErrorCode.NONE]
        assert _alter(wire, group, "no-such-topic", 0).responses[0].partitions[0].error_code == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert _offsets(_describe(wire, group)) == [(topic, 0, 3, 0)]
        again = uuid.uuid4().hex
        _join(wire, group, topic, again)
        assert _acquired(_fetch(wire, group, again, topic_id)) == [(3, 4, 1)]
        _join(wire, group, topic, again, epoch=-1)

        deleted = _delete_offsets(wire, group, topic)
        assert (deleted.error_code, [(t.topic_name, t.error_code) for t in deleted.responses]) == (
            ErrorCode.NONE,
            [(topic, ErrorCode.NONE)],
        )
        assert _offsets(_describe(wire, group)) == []
        _alter(wire, group, topic, 1)
        assert _delete_groups(wire, group) == [(group, ErrorCode.NONE)]
        assert _describe(wire, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert group not in _listed(wire, [])
        assert _delete_offsets(wire, group, topic).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_group_ids_are_not_shared_between_group_types(broker: Broker, topic: str) -> None:
    classic, share = f"classic-{topic}", f"share-{topic}"
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        found = wire.call(
            FindCoordinatorRequest(key_type=0, coordinator_keys=[classic]), 4, expect=FindCoordinatorResponse
        )
        assert found.coordinators[0].error_code == ErrorCode.NONE
        commit = OffsetCommitRequest(
            group_id=classic,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=0
                        )
                    ],
                )
            ],
        )
        assert (
            wire.call(commit, 8, expect=OffsetCommitResponse).topics[0].partitions[0].error_code
            == ErrorCode.NONE
        )
        refused = _join(wire, classic, topic, uuid.uuid4().hex)
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {classic} is not a share group.",
        )
        assert _alter(wire, classic, topic, 0).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert _alter(wire, "", topic, 0).error_code == ErrorCode.INVALID_GROUP_ID
        assert _describe(wire, classic).error_code == ErrorCode.GROUP_ID_NOT_FOUND

        assert _join(wire, share, topic, uuid.uuid4().hex).error_code == ErrorCode.NONE
        join = JoinGroupRequest(
            group_id=share,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        joined = wire.call(join, 9, expect=JoinGroupResponse)
        assert (joined.error_code, joined.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        beat = ConsumerGroupHeartbeatRequest(
            group_id=share,
            member_id=uuid.uuid4().hex,
            member_epoch=0,
            rebalance_timeout_ms=10_000,
            subscribed_topic_names=[topic],
            topic_partitions=[],
        )
        answer = wire.call(beat, 0, expect=ConsumerGroupHeartbeatResponse)
        assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        commit.group_id = share
        assert wire.call(commit, 8, expect=OffsetCommitResponse).topics[0].partitions[0].error_code == (
            ErrorCode.GROUP_ID_NOT_FOUND
        )
        listed = _listed(wire, [])
        assert (listed[classic][1], listed[share][1]) == ("classic", "share")


def test_admin_client_lists_and_deletes_a_share_group(broker: Broker, topic: str) -> None:
    group = f"g-{topic}"
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        member = uuid.uuid4().hex
        _join(wire, group, topic, member)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        # librdkafka lists consumer groups only (classic and consumer types), as Kafka 4's admin does
        assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
        futures = admin.delete_consumer_groups([group])
        with pytest.raises(Exception, match=r"NON_EMPTY_GROUP|not empty"):
            futures[group].result(10)
        _join(wire, group, topic, member, epoch=-1)
        admin.delete_consumer_groups([group])[group].result(10)
        assert group not in _listed(wire, [])


def _squashed(text: str) -> list[str]:
    """The lines of a rich table with box drawing and runs of spaces squashed."""
    lines = []
    for line in text.splitlines():
        if re.fullmatch(r"[\s\u2500-\u257f]*", line):
            continue  # a rule of the table
        lines.append(" | ".join(c.strip() for c in re.split(r"[│┃]", line) if c.strip()))
    return lines


def test_share_groups_commands(broker: Broker, topic: str) -> None:
    group = f"g-{topic}"
    b = ["-b", broker.bootstrap_servers]
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    consumer = ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "client.id": "worker-1",
        }
    )
    consumer.subscribe([topic])
    prime_acknowledging(producer, topic, consumer, time.monotonic() + 30)
    producer.produce(topic, b"job-1")
    producer.flush(5)
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        got = [m for m in consumer.poll(0.5) if m.error() is None and value_of(m) == b"job-1"]
    (job,) = got
    offset = job.offset()

    assert group in ok(tidelog_cli("share-groups", "list", *b)).splitlines()
    pending = _squashed(ok(tidelog_cli("share-groups", "pending", group, "--topic", topic, *b)))
    assert pending[0] == f"pending records of {group}"
    assert pending[1] == "topic | partition | offsets | member | deliveries | lock left"
    assert len(pending) == 3
    row = pending[2].split(" | ")
    assert row[:3] == [topic, "0", str(offset)]
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        described_group = wire.call(
            ShareGroupDescribeRequest(group_ids=[group]), 0, expect=ShareGroupDescribeResponse
        ).groups[0]
    assert row[3] == described_group.members[0].member_id
    assert row[4] == "1"
    assert re.fullmatch(r"\d+\.\d s", row[5])
    refused = failed(
        tidelog_cli("share-groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", *b)
    )
    assert refused == (
        f"Error: cannot reset offsets of share group '{group}': it has 1 member(s); offsets can only be reset "
        "while the group has none (stop its consumers first)"
    )
    assert failed(tidelog_cli("share-groups", "delete", "--group", group, *b)) == (
        f"Error: cannot delete share group '{group}': it has members (NON_EMPTY_GROUP)"
    )
    consumer.close()

    dry = _squashed(
        ok(
            tidelog_cli(
                "share-groups",
                "reset-offsets",
                "--group",
                group,
                "--topic",
                f"{topic}:0",
                "--to-datetime",
                "1970-01-01T00:00:00+00:00",  # the first record at or after it: offset 0
                "--dry-run",
                *b,
            )
        )
    )
    assert dry == [
        "New start offsets (dry run: nothing changed; --execute applies them)",
        "group | topic | partition | new offset",
        f"{group} | {topic} | 0 | 0",
    ]
    done = _squashed(
        ok(
            tidelog_cli(
                "share-groups",
                "reset-offsets",
                "--group",
                group,
                "--topic",
                topic,
                "--to-offset",
                "1",
                "--execute",
                *b,
            )
        )
    )
    assert done == [
        "New start offsets",
        "group | topic | partition | new offset",
        f"{group} | {topic} | 0 | 1",
    ]
    described = _squashed(ok(tidelog_cli("share-groups", "describe", group, *b)))
    assert described[-3:] == [
        f"start offsets of {group}",
        "topic | partition | start offset",
        f"{topic} | 0 | 1",
    ]
    assert (
        ok(tidelog_cli("share-groups", "delete", "--group", group, *b)) == f"Deleted share group {group}.\n"
    )


def test_resets_and_deletes_survive_a_broker_kill(broker: Broker, topic: str) -> None:
    """Last in the module: the broker is SIGKILLed and restarted."""
    kept, dropped = f"kept-{topic}", f"dropped-{topic}"
    _produce(broker, topic, [b"a", b"b", b"c", b"d", b"e"])
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        assert _alter(wire, kept, topic, 2).error_code == ErrorCode.NONE  # a new group: created at 2
        assert _alter(wire, dropped, topic, 1).error_code == ErrorCode.NONE
        assert _delete_groups(wire, dropped) == [(dropped, ErrorCode.NONE)]
    broker.kill()
    broker.restart()
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        meta = wire.call(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
            12,
            expect=MetadataResponse,
        )
        assert _offsets(_describe(wire, kept)) == [(topic, 0, 2, ErrorCode.NONE)]
        (described,) = wire.call(
            ShareGroupDescribeRequest(group_ids=[kept]), 0, expect=ShareGroupDescribeResponse
        ).groups
        assert (described.error_code, described.group_state, described.members) == (
            ErrorCode.NONE,
            "Empty",
            [],
        )
        assert _describe(wire, dropped).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        listed = _listed(wire, ["share"])
        assert (listed.get(kept), dropped in listed) == (("Empty", "share"), False)
        member = uuid.uuid4().hex
        _join(wire, kept, topic, member)
        assert _acquired(_fetch(wire, kept, member, meta.topics[0].topic_id)) == [(2, 4, 1)]
