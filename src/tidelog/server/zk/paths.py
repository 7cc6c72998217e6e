"""Kafka's ZooKeeper layout (``kafka.zk.ZkData`` in apache/kafka 3.3): every znode path tidelog reads or writes.

Invariants: paths are relative to the chroot of the connect string (``host:port/chroot``), exactly as
Kafka names them, so an operator's ``zkCli`` shows a tidelog cluster as it would show a Kafka one.
Sequential znodes are created from a prefix path (ending in ``config_change_`` or ``isr_change_``);
ZooKeeper appends a ten-digit sequence number.
"""

from __future__ import annotations

from typing import Final

from tidelog.protocol import TopicPartition

__all__ = [
    "ADMIN",
    "BROKERS",
    "BROKER_IDS",
    "BROKER_SEQUENCE_ID",
    "CLUSTER",
    "CLUSTER_ID",
    "CONFIG",
    "CONFIG_CHANGES",
    "CONFIG_CHANGE_PREFIX",
    "CONFIG_TYPES",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "DELETE_TOPICS",
    "ISR_CHANGE_NOTIFICATION",
    "ISR_CHANGE_PREFIX",
    "LOG_DIR_EVENT_NOTIFICATION",
    "LOG_DIR_EVENT_PREFIX",
    "PERSISTENT_PATHS",
    "PRODUCER_ID_BLOCK",
    "TOPICS",
    "broker_path",
    "config_entity_path",
    "config_entity_type_path",
    "delete_topic_path",
    "partition_path",
    "partition_state_path",
    "partitions_path",
    "sequence_number",
    "topic_path",
]

CONTROLLER: Final = "/controller"
CONTROLLER_EPOCH: Final = "/controller_epoch"
BROKERS: Final = "/brokers"
BROKER_IDS: Final = "/brokers/ids"
TOPICS: Final = "/brokers/topics"
BROKER_SEQUENCE_ID: Final = "/brokers/seqid"
CONFIG: Final = "/config"
CONFIG_CHANGES: Final = "/config/changes"
CONFIG_CHANGE_PREFIX: Final = "config_change_"
ADMIN: Final = "/admin"
DELETE_TOPICS: Final = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION: Final = "/isr_change_notification"
ISR_CHANGE_PREFIX: Final = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION: Final = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX: Final = "log_dir_event_"
PRODUCER_ID_BLOCK: Final = "/latest_producer_id_block"
CLUSTER: Final = "/cluster"
CLUSTER_ID: Final = "/cluster/id"

# Kafka's ConfigType.all: the entity types under /config.
CONFIG_TYPES: Final = ("topics", "clients", "users", "brokers", "ips")

# Kafka's ZkData.PersistentZkPaths (less the old consumers' /consumers): created at broker start-up so that watches and sequential creates find a parent.
PERSISTENT_PATHS: Final = (
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    *(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_TYPES),
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{TOPICS}/{tp.topic}/partitions/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{TOPICS}/{tp.topic}/partitions/{tp.partition}/state"


def config_entity_type_path(entity_type: str) -> str:
    return f"{CONFIG}/{entity_type}"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    """``/config/topics/T``, ``/config/brokers/1``, ``/config/brokers/<default>``."""
    return f"{CONFIG}/{entity_type}/{entity_name}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def sequence_number(name: str, prefix: str) -> str:
    """The ten digits ZooKeeper appended to a sequential znode's name (``isr_change_0000000003`` → ``0000000003``)."""
    base = name.rsplit("/", 1)[-1]
    if not base.startswith(prefix):
        raise ValueError(f"{name!r} is not a {prefix}N znode")
    return base[len(prefix) :]
