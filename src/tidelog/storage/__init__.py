"""The partition log on disk: segments, indexes, checkpoints, recovery, retention. Blocking file I/O, no asyncio.

Kafka's layout and semantics (``<log.dir>/<topic>-<partition>/<base offset>.log .index .timeindex``). The
server uses :class:`LogManager` (all logs of a broker) and :class:`PartitionLog` (one partition: append as
leader or follower, read as :class:`FileRegion` s for ``os.sendfile``, offsets, leader epochs
(:class:`EpochEndOffset`, :class:`OffsetTruncationState`), retention, truncation). Time comes in as
``now_ms``; nothing here reads a clock or is thread-safe.
"""

from tidelog.protocol import TopicPartition
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import (
    CheckpointError,
    InconsistentClusterIdError,
    InconsistentNodeIdError,
    InvalidConfigError,
    InvalidTopicError,
    KafkaStorageError,
    LogCorruptionError,
    LogDirError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from tidelog.storage.fetch_data import FetchDataInfo, FileRegion
from tidelog.storage.leader_epoch_cache import EpochEndOffset, EpochEntry, OffsetTruncationState
from tidelog.storage.log_manager import LogManager
from tidelog.storage.partition_log import OffsetAndTimestamp, PartitionLog
from tidelog.storage.segment import LogSegment

__all__ = [
    "CheckpointError",
    "EpochEndOffset",
    "EpochEntry",
    "FetchDataInfo",
    "FileRegion",
    "InconsistentClusterIdError",
    "InconsistentNodeIdError",
    "InvalidConfigError",
    "InvalidTopicError",
    "KafkaStorageError",
    "LogAppendInfo",
    "LogConfig",
    "LogCorruptionError",
    "LogDirError",
    "LogManager",
    "LogSegment",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OffsetTruncationState",
    "PartitionLog",
    "RecordBatchTooLargeError",
    "StorageError",
    "TopicPartition",
    "UnexpectedAppendOffsetError",
]
