"""Test support for share groups: a share group starts at the log's end (``share.auto.offset.reset=latest``),
so a test first produces primers until its consumer receives one; from then on the share-partition exists and
every later record is delivered."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Message, Producer, ShareConsumer

from tidelog.client.wire import connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from tidelog.server.broker import Broker
from tidelog.server.clock import ManualClock
from tidelog.server.config import load_broker_config

PRIMER = b"primer"


def value_of(message: Message) -> bytes:
    value = message.value()
    assert isinstance(value, bytes)
    return value


def prime_acknowledging(producer: Producer, topic: str, consumer: ShareConsumer, deadline: float) -> None:
    """Produce primers until ``consumer`` (explicit mode) receives one, acknowledging everything it gets,
    then commit those acknowledgements; fails at ``deadline`` (``time.monotonic()``)."""
    primed = False
    while not primed:
        assert time.monotonic() < deadline, "the consumer received no primer"
        producer.produce(topic, PRIMER)
        producer.flush(5)
        for message in consumer.poll(0.5):
            consumer.acknowledge(message)
            primed = primed or value_of(message) == PRIMER
    consumer.commit_sync()


def pass_by(bootstrap: str, group: str, topic: str) -> None:
    """Another member joins ``group`` (subscribed to ``topic``) and leaves again over the wire: the group's
    epoch rises by 3 (the member, its subscription, its leaving), so a member that rejoins after a restart
    shows a lower epoch than one the group kept."""
    with connect(bootstrap, timeout=10) as wire:
        for epoch in (0, -1):
            beat = wire.call(
                ShareGroupHeartbeatRequest(
                    group_id=group,
                    member_id="passer-by",
                    member_epoch=epoch,
                    subscribed_topic_names=[topic] if epoch == 0 else None,
                ),
                1,
                expect=ShareGroupHeartbeatResponse,
            )
            assert beat.error_code == ErrorCode.NONE


def in_process_broker(log_dir: Path, clock: ManualClock) -> Broker:
    """A broker driven in process on ``clock`` (no sockets, no event loop unless the test runs one), with one
    partition each for ``__consumer_offsets`` and ``__share_group_state``; ``broker.logs.shutdown`` ends it."""
    config, _ = load_broker_config(
        None,
        {
            "log.dirs": str(log_dir),
            "share.coordinator.state.topic.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        },
    )
    return Broker(config, clock=clock)
