"""Names on disk: Kafka's log directory layout, every file suffix, and partition directory names.

Layout (Kafka's, so operators recognise it)::

    <log.dir>/meta.properties  recovery-point-offset-checkpoint  log-start-offset-checkpoint
              replication-offset-checkpoint  .kafka_cleanshutdown  .lock
    <log.dir>/<topic>-<partition>/<20-digit base offset>.log .index .timeindex [.txnindex .snapshot]
                                  leader-epoch-checkpoint  partition.metadata

Invariants:

* This module owns every suffix; nobody else spells ``".log"`` or ``".deleted"``.
* A segment file name is its base offset zero-padded to 20 digits plus a suffix; transitional states are
  an extra suffix appended to the whole name (``00000000000000000000.log.deleted``).
* ``<topic>-<partition>`` is split at the LAST '-', because topic names may contain '-', '.' and '_'.
* A deleted partition directory is ``<topic>-<partition>.<32 hex uuid>-delete`` (the topic cut so the name
  stays within 255 bytes), as Kafka's ``logDeleteDirName``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.storage.errors import InvalidTopicError

__all__ = [
    "CLEANED_FILE_SUFFIX",
    "CLEAN_SHUTDOWN_FILE",
    "DELETED_FILE_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "FUTURE_DIR_SUFFIX",
    "INDEX_FILE_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LOCK_FILE",
    "LOG_FILE_SUFFIX",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "META_PROPERTIES_FILE",
    "PARTITION_METADATA_FILE",
    "PRODUCER_SNAPSHOT_FILE_SUFFIX",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "SEGMENT_FILE_SUFFIXES",
    "STRAY_DIR_SUFFIX",
    "SWAP_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TMP_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "delete_dir_name",
    "future_dir_name",
    "special_dir_uid",
    "file_name",
    "log_file",
    "offset_from_file_name",
    "offset_index_file",
    "parse_partition_dir_name",
    "partition_dir_name",
    "time_index_file",
    "txn_index_file",
    "validate_topic_name",
    "stray_dir_name",
]

LOG_FILE_SUFFIX: Final = ".log"
INDEX_FILE_SUFFIX: Final = ".index"
TIME_INDEX_FILE_SUFFIX: Final = ".timeindex"
TXN_INDEX_FILE_SUFFIX: Final = ".txnindex"
"""Aborted-transaction index of a segment (:mod:`tidelog.storage.txn_index`), created at its first entry."""
PRODUCER_SNAPSHOT_FILE_SUFFIX: Final = ".snapshot"
"""Producer-state snapshot (:mod:`tidelog.storage.producer_snapshot`)."""
SEGMENT_FILE_SUFFIXES: Final = (
    LOG_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
)

DELETED_FILE_SUFFIX: Final = ".deleted"
CLEANED_FILE_SUFFIX: Final = ".cleaned"
SWAP_FILE_SUFFIX: Final = ".swap"
TMP_FILE_SUFFIX: Final = ".tmp"

DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"

META_PROPERTIES_FILE: Final = "meta.properties"
RECOVERY_POINT_CHECKPOINT_FILE: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE: Final = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE: Final = "replication-offset-checkpoint"
"""High watermarks, one per partition (Kafka's ReplicaManager file)."""
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
LOCK_FILE: Final = ".lock"
LEADER_EPOCH_CHECKPOINT_FILE: Final = "leader-epoch-checkpoint"
"""Leader epoch cache (not written yet)."""
PARTITION_METADATA_FILE: Final = "partition.metadata"
"""Topic id of the partition (not written yet)."""

_OFFSET_DIGITS: Final = 20
_MAX_TOPIC_LENGTH: Final = 249
_MAX_DIR_NAME_LENGTH: Final = 255
_LEGAL_TOPIC: Final = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR: Final = re.compile(r"(?P<topic>.+)-(?P<partition>[0-9]+)")
_SPECIAL_DIR: Final = re.compile(
    r"(?P<topic>.+)-(?P<partition>[0-9]+)\.(?P<uid>[0-9a-zA-Z]+)(?P<suffix>-delete|-future|-stray)"
)


def validate_topic_name(topic: str) -> None:
    """Kafka's ``Topic.validate``: raise :class:`InvalidTopicError` for a name Kafka refuses."""
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > _MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is {len(topic)} characters, the maximum is {_MAX_TOPIC_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters outside [a-zA-Z0-9._-]")


def partition_dir_name(tp: TopicPartition) -> str:
    """``<topic>-<partition>``."""
    return f"{tp.topic}-{tp.partition}"


def delete_dir_name(tp: TopicPartition, uid_hex: str) -> str:
    """``<topic>-<partition>.<uid>-delete``, the topic cut so the whole name fits in 255 bytes."""
    return _special_dir_name(tp, uid_hex, DELETE_DIR_SUFFIX)


def future_dir_name(tp: TopicPartition, uid_hex: str) -> str:
    """``<topic>-<partition>.<uid>-future`` (a replica being moved into this log dir), cut to 255 bytes."""
    return _special_dir_name(tp, uid_hex, FUTURE_DIR_SUFFIX)


def special_dir_uid(name: str) -> str:
    """The uid of a ``-delete`` / ``-future`` / ``-stray`` directory name (``ValueError`` for another)."""
    special = _SPECIAL_DIR.fullmatch(name)
    if special is None:
        raise ValueError(f"{name!r} is not a -delete, -future or -stray directory name")
    return special["uid"]


def stray_dir_name(tp: TopicPartition, uid_hex: str) -> str:
    """``<topic>-<partition>.<uid>-stray``, the topic cut so the whole name fits in 255 bytes."""
    return _special_dir_name(tp, uid_hex, STRAY_DIR_SUFFIX)


def _special_dir_name(tp: TopicPartition, uid_hex: str, kind: str) -> str:
    suffix = f"-{tp.partition}.{uid_hex}{kind}"
    return tp.topic[: _MAX_DIR_NAME_LENGTH - len(suffix)] + suffix


def parse_partition_dir_name(name: str) -> tuple[TopicPartition, str]:
    """``(TopicPartition, suffix)`` of a partition directory name; suffix is ``""``, ``"-delete"``,
    ``"-future"`` or ``"-stray"``. ``ValueError`` for a name that is none of those."""
    special = _SPECIAL_DIR.fullmatch(name)
    if special is not None:
        return TopicPartition(special["topic"], int(special["partition"])), special["suffix"]
    plain = _PARTITION_DIR.fullmatch(name)
    if plain is None:
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return TopicPartition(plain["topic"], int(plain["partition"])), ""


def file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for ``(42, ".log")``."""
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:0{_OFFSET_DIGITS}d}{suffix}"


def log_file(directory: Path, base_offset: int, extra_suffix: str = "") -> Path:
    return directory / file_name(base_offset, LOG_FILE_SUFFIX + extra_suffix)


def offset_index_file(directory: Path, base_offset: int, extra_suffix: str = "") -> Path:
    return directory / file_name(base_offset, INDEX_FILE_SUFFIX + extra_suffix)


def time_index_file(directory: Path, base_offset: int, extra_suffix: str = "") -> Path:
    return directory / file_name(base_offset, TIME_INDEX_FILE_SUFFIX + extra_suffix)


def txn_index_file(directory: Path, base_offset: int, extra_suffix: str = "") -> Path:
    return directory / file_name(base_offset, TXN_INDEX_FILE_SUFFIX + extra_suffix)


def offset_from_file_name(name: str) -> int | None:
    """The base offset in a segment file name (``"00000000000000000042.index.swap"`` -> 42), or None."""
    head, dot, _ = name.partition(".")
    if not dot or len(head) != _OFFSET_DIGITS or not head.isdigit():
        return None
    return int(head)
