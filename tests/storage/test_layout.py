"""File and directory names: Kafka's segment names, <topic>-<partition> split at the last '-', delete dirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.storage import layout
from tidelog.storage.errors import InvalidTopicError


def test_segment_file_names_are_twenty_digit_base_offsets() -> None:
    d = Path("/logs/t-0")
    assert layout.log_file(d, 0) == d / "00000000000000000000.log"
    assert layout.offset_index_file(d, 42) == d / "00000000000000000042.index"
    assert layout.time_index_file(d, 2**40) == d / "00000001099511627776.timeindex"
    assert layout.txn_index_file(d, 7, ".deleted") == d / "00000000000000000007.txnindex.deleted"
    assert layout.log_file(d, 5, ".swap").name == "00000000000000000005.log.swap"


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000000042.log", 42),
        ("00000000000000000042.index.swap", 42),
        ("00000000000000000000.timeindex.deleted", 0),
        ("0000000000000000042.log", None),
        ("leader-epoch-checkpoint", None),
        ("00000000000000000042", None),
        ("0000000000000000004x.log", None),
    ],
)
def test_offset_from_file_name(name: str, offset: int | None) -> None:
    assert layout.offset_from_file_name(name) == offset


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-0", (TopicPartition("orders", 0), "")),
        ("my-topic-12", (TopicPartition("my-topic", 12), "")),
        ("a.b_c-d-3", (TopicPartition("a.b_c-d", 3), "")),
        ("x-1-2", (TopicPartition("x-1", 2), "")),
        ("foo-delete-0", (TopicPartition("foo-delete", 0), "")),
        ("my-topic-3.0123456789abcdef0123456789abcdef-delete", (TopicPartition("my-topic", 3), "-delete")),
        ("t-0.abc-future", (TopicPartition("t", 0), "-future")),
        ("t-9.abc-stray", (TopicPartition("t", 9), "-stray")),
    ],
)
def test_partition_dir_names_split_at_the_last_dash(name: str, expected: tuple[TopicPartition, str]) -> None:
    assert layout.parse_partition_dir_name(name) == expected


@pytest.mark.parametrize("name", ["orders", "orders-", "-0", "orders-x", "orders-0x", ""])
def test_not_partition_dir_names(name: str) -> None:
    with pytest.raises(ValueError, match="not a <topic>-<partition>"):
        layout.parse_partition_dir_name(name)


def test_round_trip_and_delete_dir_name() -> None:
    tp = TopicPartition("a.b-c_d", 17)
    assert str(tp) == layout.partition_dir_name(tp) == "a.b-c_d-17"
    assert layout.parse_partition_dir_name(str(tp)) == (tp, "")
    uid = "0123456789abcdef0123456789abcdef"
    name = layout.delete_dir_name(tp, uid)
    assert name == f"a.b-c_d-17.{uid}-delete"
    assert layout.parse_partition_dir_name(name) == (tp, "-delete")


def test_delete_dir_name_cut_to_255_bytes() -> None:
    tp = TopicPartition("t" * 249, 123)
    name = layout.delete_dir_name(tp, "f" * 32)
    assert len(name) == 255
    assert name.endswith("-123." + "f" * 32 + "-delete")


@pytest.mark.parametrize("topic", ["", ".", "..", "a" * 250, "has space", "slash/no", "ü"])
def test_invalid_topic_names(topic: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        layout.validate_topic_name(topic)
    assert info.value.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("topic", ["a", "A.b_c-d", "a" * 249, "__consumer_offsets", "..."])
def test_valid_topic_names(topic: str) -> None:
    layout.validate_topic_name(topic)
