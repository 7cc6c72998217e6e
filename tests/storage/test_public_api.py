"""The public surface of tidelog.storage, pinned."""

from __future__ import annotations

import tidelog.storage


def test_exports() -> None:
    assert tidelog.storage.__all__ == [
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
    for name in tidelog.storage.__all__:
        assert getattr(tidelog.storage, name).__name__ == name
