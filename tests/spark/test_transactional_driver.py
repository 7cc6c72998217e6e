"""The exactly-once writer's driver side (``commit`` / ``abort``): which query it fences, which batch shape
it checks and records (pure: the broker calls are replaced by recorders, no Spark, no broker)."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.spark import transactional
from tidelog.spark.options import parse_writer_options
from tidelog.spark.replay_shape import BatchShape, ReplayChangedError
from tidelog.spark.transactional import TransactionalCommit, TransactionalStreamWriter

Q = "5b9d2c1e-1111-4c55-8a55-2b1f4e7f2a10"
OPTIONS = parse_writer_options(
    {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out", "deliveryGuarantee": "exactly-once"}
)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    recorded: list[tuple[Any, ...]] = []
    shapes = {Q: BatchShape(6, 2)}
    monkeypatch.setattr(
        transactional, "fence_leftovers", lambda options, q: recorded.append(("fence", q)) or []
    )
    monkeypatch.setattr(transactional, "read_batch_shape", lambda options, q: shapes.get(q))
    monkeypatch.setattr(
        transactional, "record_batch_shape", lambda options, q, shape: recorded.append(("record", q, shape))
    )
    return recorded


def _done(p: int, skipped: bool = False) -> TransactionalCommit:
    return TransactionalCommit(0 if skipped else 10, skipped, f"tidelog-spark-{Q}-{p}")


def test_a_writer_built_for_a_known_query_records_the_shape_and_does_not_fence_again(
    calls: list[tuple[Any, ...]],
) -> None:
    writer = TransactionalStreamWriter(OPTIONS, fenced_query=Q, shape=BatchShape(6, 2))
    writer.commit([_done(0), _done(1), _done(2)], 7)
    writer.abort([None, _done(1)], 8)
    assert calls == [("record", Q, BatchShape(7, 3))]


def test_without_the_query_id_the_tasks_name_it_and_it_is_fenced_in_commit_and_abort(
    calls: list[tuple[Any, ...]],
) -> None:
    writer = TransactionalStreamWriter(OPTIONS)
    writer.commit([_done(0), _done(1)], 7)
    writer.abort([None, _done(1)], 8)
    writer.abort([None, None], 9)  # no task reported: nothing names the query
    assert calls == [("fence", Q), ("record", Q, BatchShape(7, 2)), ("fence", Q)]


def test_a_replay_on_other_partitions_fails_the_commit_and_records_nothing(
    calls: list[tuple[Any, ...]],
) -> None:
    writer = TransactionalStreamWriter(OPTIONS, fenced_query=Q, shape=BatchShape(6, 2))
    writer.commit([_done(0, skipped=True), _done(1, skipped=True)], 6)  # the same shape: fine
    with pytest.raises(
        ReplayChangedError, match="micro-batch 6 was committed by 2 write partitions; its replay has 3"
    ):
        writer.commit([_done(0, skipped=True), _done(1, skipped=True), _done(2)], 6)
    unknown = TransactionalStreamWriter(OPTIONS)  # the shape read in commit, from the tasks' query
    with pytest.raises(ReplayChangedError, match="its replay has 1:"):
        unknown.commit([_done(0, skipped=True)], 6)
    assert calls == [("record", Q, BatchShape(6, 2)), ("fence", Q)]


def test_a_task_without_a_report_fails_the_commit(calls: list[tuple[Any, ...]]) -> None:
    writer = TransactionalStreamWriter(OPTIONS, fenced_query=Q)
    with pytest.raises(RuntimeError, match="micro-batch 3: 1 tasks reported no transaction"):
        writer.commit([_done(0), None], 3)
    assert calls == []
