"""Group -> ``__consumer_offsets`` partition, as Kafka computes it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator.common.partitioning import java_string_hash, partition_for


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("abc", 96354),  # 97*31^2 + 98*31 + 99
        ("hello", 99162322),
        ("Aa", 2112),  # the classic collision with "BB"
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # outside the BMP: two UTF-16 surrogate units
        ("é", 0xE9),
    ],
)
def test_java_string_hash_known_values(value: str, expected: int) -> None:
    assert java_string_hash(value) == expected


def test_int32_overflow_wraps_like_java() -> None:
    # 31 * 99162322 + 33 overflows int32: Java wraps it to a negative number.
    assert java_string_hash("hello!") == (99162322 * 31 + 33) - 2**32


@pytest.mark.parametrize(
    ("group", "partitions", "expected"),
    [
        ("a", 50, 47),
        ("abc", 50, 96354 % 50),
        ("polygenelubricants", 50, 0),  # Utils.abs(Integer.MIN_VALUE) == 0
        ("hello!", 50, abs((99162322 * 31 + 33) - 2**32) % 50),
        ("anything", 1, 0),
    ],
)
def test_partition_for(group: str, partitions: int, expected: int) -> None:
    assert partition_for(group, partitions) == expected


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        partition_for("g", 0)


@given(st.text(max_size=40), st.integers(min_value=1, max_value=500))
def test_partition_in_range_and_hash_in_int32(group: str, partitions: int) -> None:
    h = java_string_hash(group)
    assert -(2**31) <= h < 2**31
    assert 0 <= partition_for(group, partitions) < partitions
