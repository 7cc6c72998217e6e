"""The periodic log flush in the broker: plans on the event loop, fsyncs in a worker thread, completes on the
event loop (Kafka flushes on its scheduler thread, so an fsync never stalls the connections).

Invariants:

- Everything that touches a ``PartitionLog`` runs on the event loop: :meth:`PartitionLog.plan_flush` (which
  opens the plan's own descriptors) and :meth:`PartitionLog.complete_flush` (which advances the recovery
  point). The worker thread only runs :meth:`FlushPlan.execute` over those descriptors, so appends, reads,
  retention, the cleaner and topic deletion go on meanwhile (see :mod:`tidelog.storage.flush_plan`).
- One background flush at a time: a round plans the due logs, fsyncs the plans one after the other in a
  worker call, then completes them, in batches of at most :data:`PLANS_PER_BATCH` logs (a plan holds
  descriptors: the batches keep them bounded however many logs are due); ``Broker._every`` starts the next
  round only after this one ended.
- A round asks ``logs`` for the logs to visit: in the broker ``ReplicaManager.logs_to_flush``, the logs a
  change may have made due since they were last found idle (``LogManager.logs_to_flush``), so an idle
  broker's rounds cost nothing per partition (issue 17); which of them are due is still
  :meth:`PartitionLog.plan_flush`'s answer, as for every log before.
- A recovery point moves only after its fsync returned: the checkpoint written meanwhile
  (``log.flush.offset.checkpoint.interval.ms``) still has the old one, so a ``kill -9`` or a power loss
  at any moment never leaves a checkpoint claiming unsynced data.
- A log whose fsync fails is logged and left as it was (recovery point, due roll flush); the next round
  retries it. The other logs of the round complete.
- Stopping the broker cancels the task: the worker is awaited to its end (however often the task is
  cancelled) before the descriptors are closed and the task ends, so ``LogManager.shutdown``, whose own
  flush covers whatever this round did not record, never races it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from tidelog.storage.flush_plan import FlushPlan
from tidelog.storage.partition_log import PartitionLog

from .metrics.samples import Samples

__all__ = ["LogFlushTask"]

log = logging.getLogger("tidelog.log_flush")

_T = TypeVar("_T")

PLANS_PER_BATCH = 64
"""Plans fsynced per worker call: each holds new descriptors of its log's files (up to four per segment),
so a round over 10,000 dirty logs never holds more than this many logs' worth open at once."""


def _execute(plans: Sequence[FlushPlan]) -> list[tuple[Exception | None, float]]:
    """The worker thread: every plan's fsyncs; each plan's failure (None: success) and its duration in ms,
    in order."""
    outcomes: list[tuple[Exception | None, float]] = []
    for plan in plans:
        started = time.perf_counter()
        try:
            plan.execute()
        except Exception as exc:  # noqa: BLE001 - reported per log on the event loop
            outcomes.append((exc, (time.perf_counter() - started) * 1000))
        else:
            outcomes.append((None, (time.perf_counter() - started) * 1000))
    return outcomes


class LogFlushTask:
    """Runs the broker's periodic flush rounds (``log.flush.scheduler.interval.ms``, at most 1 s)."""

    def __init__(
        self,
        logs: Callable[[], Iterable[PartitionLog]],
        *,
        clock_ms: Callable[[], int],
        on_io_error: Callable[[PartitionLog, BaseException], None] | None = None,
    ) -> None:
        self._logs = logs
        self._clock_ms = clock_ms
        self._on_io_error = on_io_error
        """Told of a log whose flush could not be planned or failed (its log dir may go offline)."""
        self.rounds = 0
        self.completed = 0
        self.flush_times = Samples()
        """Duration of each log's flush, in ms (``kafka_log_logflushstats_logflushrateandtimems``)."""

    async def run_once(self) -> None:
        """One round: plan every due log, fsync in a worker thread, complete; at most
        :data:`PLANS_PER_BATCH` plans (and so their descriptors) are open at a time."""
        now = self._clock_ms()
        planned: list[tuple[PartitionLog, FlushPlan]] = []
        counted = False
        for partition_log in self._logs():
            try:
                plan = partition_log.plan_flush(now)
            except OSError as exc:
                if self._on_io_error is None:
                    for _, pending in planned:
                        pending.close()
                    raise
                self._on_io_error(partition_log, exc)
                continue
            except BaseException:
                for _, pending in planned:
                    pending.close()
                raise
            if plan is None:
                continue
            planned.append((partition_log, plan))
            if len(planned) >= PLANS_PER_BATCH:
                if not counted:
                    self.rounds += 1
                    counted = True
                await self._flush(planned)
                planned = []
        if planned:
            if not counted:
                self.rounds += 1
            await self._flush(planned)

    async def _flush(self, planned: list[tuple[PartitionLog, FlushPlan]]) -> None:
        """fsync ``planned`` in a worker thread, close their descriptors, complete the ones that succeeded
        (a failed one is told to ``on_io_error``)."""
        try:
            outcomes = await _wait_out(
                asyncio.ensure_future(asyncio.to_thread(_execute, [plan for _, plan in planned]))
            )
        finally:
            for _, plan in planned:
                plan.close()
        for (partition_log, plan), (failure, elapsed_ms) in zip(planned, outcomes, strict=True):
            self.flush_times.add(elapsed_ms)
            if failure is not None:
                log.warning("flush of %s failed: %s", plan.log_name, failure)
                if self._on_io_error is not None:
                    self._on_io_error(partition_log, failure)
            elif partition_log.complete_flush(plan):
                self.completed += 1


async def _wait_out(work: asyncio.Future[_T]) -> _T:
    """``work``'s result; if the caller is cancelled meanwhile, ``work`` still runs to its end first and
    the cancellation is raised then (a worker thread cannot be interrupted, and its caller's cleanup must
    not race it)."""
    cancelled = False
    while not work.done():
        try:
            await asyncio.wait((work,))
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return work.result()
