"""Deleting a topic deletes every group's committed offsets of it (Kafka's ``onPartitionsDeleted``).

- Real broker, confluent-kafka: a group consumes and commits on topics T and U, a group-less client commits
  on T only; T is deleted with the AdminClient. Then OffsetFetch (``Consumer.committed``,
  ``AdminClient.list_consumer_group_offsets``) and ``tidelog groups describe`` show U's offsets and none of
  T, and the group that had only T's offsets is gone (ListGroups); the same after a broker restart
  (``__consumer_offsets`` replayed) and after T is created again with the same name.
- In-process: a topic deleted while its groups' ``__consumer_offsets`` partition is still loading loses its
  offsets as soon as the partition is loaded; so does one whose tombstone append failed (the partition is
  reloaded from its log, and the deletion redone).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.server.group_harness import create_topic, produce
from tests.server.test_groups_runtime import commit_request, ctx, fetch, make_broker, running, until

from tidelog.coordinator.common import partition_for
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey
from tidelog.server.group_runtime import OFFSETS_TOPIC
from tidelog.testing import Broker

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000}

TIDELOG = str(Path(sys.executable).parent / "tidelog")
T, U = "doomed", "kept"
GROUP, ONLY_T = "reader", "only-doomed"
NO_OFFSET = confluent_kafka.OFFSET_INVALID


def consume_and_commit(bootstrap: str, count: int) -> None:
    """GROUP subscribes to T and U, reads ``count`` messages, commits its positions and leaves."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        consumer.subscribe([T, U])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < count:
            assert time.monotonic() < deadline, f"consumed {seen} of {count}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """OffsetFetch through ``Consumer.committed`` for T-0, T-1 and U-0 (OFFSET_INVALID: none)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        asked = [TopicPartition(T, 0), TopicPartition(T, 1), TopicPartition(U, 0)]
        return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(asked, timeout=30)}
    finally:
        consumer.close()


def listed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of the group (OffsetFetch for all topics)."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30)
    result = futures[group].result(timeout=30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def group_ids(admin: AdminClient) -> set[str]:
    return {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result(timeout=30).valid}


def described_offsets(bootstrap: str, group: str) -> list[tuple[str, int, int | None]]:
    result = subprocess.run(
        [TIDELOG, "groups", "describe", group, "-b", bootstrap, "--format", "json"],
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    (document,) = json.loads(result.stdout)
    return [(o["topic"], o["partition"], o["current_offset"]) for o in document["offsets"]]


def assert_only_u_offsets(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    assert committed(bootstrap, GROUP) == {(T, 0): NO_OFFSET, (T, 1): NO_OFFSET, (U, 0): 4}
    assert committed(bootstrap, ONLY_T) == {(T, 0): NO_OFFSET, (T, 1): NO_OFFSET, (U, 0): NO_OFFSET}
    assert listed_offsets(admin, GROUP) == {(U, 0): 4}
    groups = group_ids(admin)
    assert GROUP in groups
    assert ONLY_T not in groups


@pytest.mark.clients
@pytest.mark.timeout(180)
def test_deleted_topic_offsets_are_gone_for_good(fresh_broker: Broker) -> None:
    bootstrap = fresh_broker.bootstrap_servers
    create_topic(bootstrap, T, 2)
    create_topic(bootstrap, U, 1)
    produce(bootstrap, T, {0: ["a", "b", "c"], 1: ["d", "e"]})
    produce(bootstrap, U, {0: ["f", "g", "h", "i"]})
    consume_and_commit(bootstrap, 9)
    group_less = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": ONLY_T, "log_level": 3}
    )
    group_less.commit(offsets=[TopicPartition(T, 1, 1)], asynchronous=False)
    group_less.close()
    assert committed(bootstrap, GROUP) == {(T, 0): 3, (T, 1): 2, (U, 0): 4}
    assert committed(bootstrap, ONLY_T)[(T, 1)] == 1

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.delete_topics([T], operation_timeout=30)[T].result(timeout=30)
    assert_only_u_offsets(bootstrap)
    assert described_offsets(bootstrap, GROUP) == [(U, 0, 4)]

    fresh_broker.restart()
    bootstrap = fresh_broker.bootstrap_servers
    assert_only_u_offsets(bootstrap)

    create_topic(bootstrap, T, 2)
    assert_only_u_offsets(bootstrap)


# -- in-process: loading, failed appends -------------------------------------------------------------


def create_in_process(broker: Any, name: str) -> None:
    broker.admin.create_topic_now(name, 1, 1, {})


def test_topic_deleted_while_the_partition_loads(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            create_in_process(broker, "t")
            answer = broker.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request("g", 5))
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE

        again = make_broker(tmp_path)
        again.groups.start()  # every partition loading, nothing replayed yet
        again.admin.delete_topic_now("t")
        create_in_process(again, "t")
        async with running(again):
            await until(lambda: not again.groups.coordinator.is_loading(partition_for("g", 50)))
            assert fetch(again, "g") == (ErrorCode.NONE, -1)

        third = make_broker(tmp_path)
        async with running(third):
            await until(lambda: not third.groups.coordinator.is_loading(partition_for("g", 50)))
            assert fetch(third, "g") == (ErrorCode.NONE, -1)

    asyncio.run(scenario())


def test_failed_tombstone_append_is_redone_after_the_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            create_in_process(broker, "t")
            broker.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request("g", 5))
            real_append = broker.replicas.append
            calls: list[str] = []

            def failing_append(topic: str, index: int, records: Any, **kwargs: Any) -> Any:
                calls.append(topic)
                return ErrorCode.KAFKA_STORAGE_ERROR, None, "disk on fire"

            monkeypatch.setattr(broker.replicas, "append", failing_append)
            broker.admin.delete_topic_now("t")
            assert calls == [OFFSETS_TOPIC]
            monkeypatch.setattr(broker.replicas, "append", real_append)
            await until(lambda: not broker.groups.coordinator.is_loading(partition_for("g", 50)))
            assert fetch(broker, "g") == (ErrorCode.NONE, -1)

        again = make_broker(tmp_path)
        async with running(again):
            await until(lambda: not again.groups.coordinator.is_loading(partition_for("g", 50)))
            assert fetch(again, "g") == (ErrorCode.NONE, -1)

    asyncio.run(scenario())
