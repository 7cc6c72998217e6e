"""A share group's membership across a broker crash: it is in ``__consumer_offsets`` (ShareGroup* records).

A ``ShareConsumer`` keeps polling while its broker (the group coordinator) is SIGKILLed and restarted on the
same data directory: it goes on receiving every record produced, each once, and the group the restarted
broker describes has the same member, with the member epoch and group epoch it had before (the member went
on with them; it did not join again, which would start the group again at epoch 3), and the group's id is
still refused to a classic consumer.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.share_groups import PRIMER, pass_by, prime_acknowledging, value_of

from tidelog.client.wire import connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]


def _described(bootstrap: str, group: str) -> tuple[str, int, list[tuple[str, int, str]]]:
    with connect(bootstrap, timeout=10) as wire:
        (described,) = wire.call(
            ShareGroupDescribeRequest(group_ids=[group]), 0, expect=ShareGroupDescribeResponse
        ).groups
    assert described.error_code == ErrorCode.NONE
    return (
        described.group_state,
        described.group_epoch,
        [(m.member_id, m.member_epoch, m.client_id) for m in described.members],
    )


def test_a_consumer_keeps_its_membership_across_a_broker_kill() -> None:
    config = {
        "offsets.topic.num.partitions": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "group.share.heartbeat.interval.ms": 500,
    }
    with Broker(config) as broker:
        bootstrap = broker.bootstrap_servers
        topic, group = f"q-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": "worker",
                "share.acknowledgement.mode": "explicit",
            }
        )
        consumer.subscribe([topic])
        deadline = time.monotonic() + 90

        def consume(values: list[bytes]) -> list[bytes]:
            for value in values:
                producer.produce(topic, value)
            producer.flush(30)
            got: list[bytes] = []
            while not set(values) <= set(got) and time.monotonic() < deadline:
                for message in consumer.poll(0.5):
                    if message.error() is None:
                        consumer.acknowledge(message)
                        if value_of(message) != PRIMER:
                            got.append(value_of(message))
            consumer.commit_sync()
            return got

        prime_acknowledging(producer, topic, consumer, deadline)
        # joining: the member (1), its subscription (2), the subscribed topic's partitions (3)
        assert _described(bootstrap, group)[:2] == ("Stable", 3)
        # another member comes (4, 5 with its subscription) and goes (6) over the wire: a member that joined
        # again after the restart would start again at epoch 3, not 6
        pass_by(bootstrap, group, topic)
        before = [b"a%02d" % i for i in range(20)]
        assert consume(before) == before
        while _described(bootstrap, group)[2][0][1] != 6:  # the worker takes epoch 6 at its next heartbeat
            assert time.monotonic() < deadline, "the worker's member epoch never became 6"
            consumer.poll(0.2)
        state, epoch, members = _described(bootstrap, group)
        assert (state, epoch) == ("Stable", 6)
        [(member_id, member_epoch, client_id)] = members
        assert (member_epoch, client_id) == (6, "worker")

        broker.kill()
        broker.restart()

        after = [b"b%02d" % i for i in range(20)]
        assert consume(after) == after  # every record, once, in order: nothing acknowledged comes again
        assert _described(broker.bootstrap_servers, group) == ("Stable", 6, [(member_id, 6, "worker")])
        with connect(broker.bootstrap_servers, timeout=10) as wire:  # still a share group's id
            join = JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            )
            joined = wire.call(join, 9, expect=JoinGroupResponse)
        assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        consumer.close()
        assert _described(broker.bootstrap_servers, group) == ("Empty", 7, [])
