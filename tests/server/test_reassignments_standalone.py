"""AlterPartitionReassignments / ListPartitionReassignments on a standalone broker (no controller): its one
replica per partition has nowhere to go. kafka-python's admin, against the session's broker."""

from __future__ import annotations

import uuid

from tidelog.protocol.errors import ErrorCode
from tidelog.testing import Broker


def test_a_standalone_broker_accepts_only_itself_and_lists_nothing(tidelog_broker_session: Broker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    bootstrap = tidelog_broker_session.bootstrap_servers
    topic = f"standalone-{uuid.uuid4().hex[:8]}"
    creator = AdminClient({"bootstrap.servers": bootstrap})
    creator.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(30)
    node = next(iter(creator.list_topics(timeout=10).brokers))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert admin.alter_partition_reassignments({tp: [node]}) == {tp: None}
        outcome = admin.alter_partition_reassignments(
            {tp: [node, node + 1], TopicPartition(topic, 3): [node], TopicPartition(f"{topic}-x", 0): None}
        )
        assert {k: v.errno for k, v in outcome.items()} == {
            tp: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            TopicPartition(topic, 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            TopicPartition(f"{topic}-x", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert (
            admin.alter_partition_reassignments({tp: None})[tp].errno == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        )
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments([tp]) == {}
    finally:
        admin.close()
