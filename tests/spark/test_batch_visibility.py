"""The kill test's reader check (tests/spark/batch_visibility.py) over hand-written outputs and samples:
it passes what the two-phase sink allows and names the sample that shows what it does not."""

from __future__ import annotations

import pytest
from tests.spark.batch_visibility import OutputRecord, check_samples, partial_batch_samples


def _records(*rows: tuple[int, int, int, int]) -> list[OutputRecord]:
    """(partition, offset, batch, task) each."""
    return [OutputRecord(p, o, b, t, b"k", b"1") for p, o, b, t in rows]


# Partition 0: batch 0 task 0 at 0-1 (and its commit marker at 2), batch 0 task 1 at 3 (marker 4),
# batch 1 task 0 at 5-6 (marker 7). Partition 1: batch 0 task 1 at 0 (marker 1), batch 1 task 1 at 2-3.
OUTPUT = _records((0, 0, 0, 0), (0, 1, 0, 0), (0, 3, 0, 1), (0, 5, 1, 0), (0, 6, 1, 0), (1, 0, 0, 1))
OUTPUT += _records((1, 2, 1, 1), (1, 3, 1, 1))


def test_whole_transactions_in_batch_order_pass() -> None:
    samples = [(0, 0), (1, 0), (0, 3), (1, 2), (0, 5), (1, 2), (0, 8), (1, 5)]
    check_samples(OUTPUT, samples)
    assert partial_batch_samples(OUTPUT, samples) == 1  # (0, 3): batch 0 task 0 without task 1


def test_part_of_a_transaction_fails() -> None:
    with pytest.raises(AssertionError, match=r"sample 1: partition 0 at LSO 1 shows part of batch 0 task 0"):
        check_samples(OUTPUT, [(1, 0), (0, 1)])


def test_a_later_batch_before_an_earlier_one_is_whole_fails() -> None:
    # Partition 1 shows batch 1 while partition 0 still lacks batch 0's task 1.
    with pytest.raises(
        AssertionError,
        match=r"sample 1: batch 1 was visible, but partition 0 at LSO 3 does not show all of batch 0",
    ):
        check_samples(OUTPUT, [(1, 5), (0, 3)])


def test_a_later_batch_in_the_same_partition_fails() -> None:
    late = _records((0, 0, 0, 0), (0, 2, 1, 0), (0, 4, 0, 1))  # batch 1 committed before batch 0's task 1
    with pytest.raises(AssertionError, match=r"sample 0: batch 1 was visible"):
        check_samples(late, [(0, 4)])
    check_samples(late, [(0, 0), (0, 5)])
