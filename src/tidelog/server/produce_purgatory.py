"""acks=all produces waiting for their records to be committed (Kafka's ``DelayedProduce``).

A produce with ``acks=-1`` appends on the leader at once, then its answer waits here until, for every
partition it appended to, the high watermark reached the end of its batch (every ISR member has it), or
the partition's leadership moved away, or ``timeout_ms`` ran out.

Invariants:

- Each partition's result is decided once: NONE (or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank
  below ``min.insync.replicas`` meanwhile) when the high watermark passes its batch;
  NOT_LEADER_OR_FOLLOWER when this broker no longer leads it (the batch may be truncated away by the new
  leader: the client must not take it as written); REQUEST_TIMED_OUT when the wait expires first. The
  base offset stays in the answer: a client retrying after a time out is deduplicated by idempotence.
- Partitions whose append failed are answered with their error at once and never waited for.
- The answer (a future the connection awaits) is set exactly once, when the last partition is decided;
  a high-watermark move or leadership change of a partition checks the produces watching it.
- The same wait serves every acks=-1 append of the broker's own: a coordinator's records (answered once
  committed) and the transaction markers WriteTxnMarkers writes. What is answered is the caller's: any
  object, with a :class:`AppendStatus` per partition whose ``error_code`` is filled in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tidelog.protocol.errors import ErrorCode
from tidelog.replication.partition import Partition

from .clock import Clock
from .delayed_operations import AsyncPurgatory
from .purgatory import DelayedOperation

__all__ = ["AppendStatus", "DelayedProduce", "PendingAppend", "ProducePurgatory"]

R = TypeVar("R")


class AppendStatus(Protocol):
    """Where one partition's outcome is written: a produce response's partition entry, a marker result."""

    error_code: int


@dataclass(slots=True)
class PendingAppend:
    """One partition of a delayed produce: the offset its batch ends before, and the result to fill in."""

    topic: str
    index: int
    required_offset: int
    result: AppendStatus
    """The partition's response entry; its ``error_code`` is set when decided."""
    done: bool = False


def _decide_one(
    partition_of: Callable[[str, int], Partition | None],
    topic: str,
    index: int,
    required_offset: int,
    result: AppendStatus,
) -> bool:
    """Decide one partition's wait if it can be decided now (``result.error_code`` set); True when it was."""
    partition = partition_of(topic, index)
    if partition is None:
        done, error = True, ErrorCode.NOT_LEADER_OR_FOLLOWER
    else:
        done, error = partition.check_enough_replicas_reach_offset(required_offset)
    if done:
        result.error_code = error
    return done


def _decide(pending: list[PendingAppend], partition_of: Callable[[str, int], Partition | None]) -> bool:
    """Decide every partition of ``pending`` that can be decided now; True when all are."""
    undecided = False
    for entry in pending:
        if entry.done:
            continue
        if _decide_one(partition_of, entry.topic, entry.index, entry.required_offset, entry.result):
            entry.done = True
        else:
            undecided = True
    return not undecided


class DelayedProduce(DelayedOperation, Generic[R]):
    """An acks=all produce waiting for its partitions' high watermarks."""

    def __init__(
        self,
        timeout_ms: int,
        pending: list[PendingAppend],
        partition_of: Callable[[str, int], Partition | None],
        response: R,
        future: asyncio.Future[R],
        on_done: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(timeout_ms)
        self._pending = pending
        self._partition_of = partition_of
        self._response = response
        self._future = future
        self._on_done = on_done

    def try_complete(self) -> bool:
        if self._future.done():  # the connection went away: nothing to answer
            return self.force_complete()
        if _decide(self._pending, self._partition_of):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        self._on_done()  # first: the purgatory's count of waiting produces is right whatever follows
        for entry in self._pending:
            if not entry.done:
                entry.done = True
                entry.result.error_code = ErrorCode.REQUEST_TIMED_OUT
        if not self._future.done():
            self._future.set_result(self._response)


class ProducePurgatory:
    """Delayed acks=all produces keyed by (topic, partition)."""

    def __init__(self, clock: Clock, partition_of: Callable[[str, int], Partition | None]) -> None:
        self._operations: AsyncPurgatory[DelayedOperation] = AsyncPurgatory("Produce", clock)
        self._partition_of = partition_of
        self.waiting = 0
        """Produces handed to the purgatory and not completed yet (each completes exactly once, and its
        ``on_complete`` counts it off): while none waits, :meth:`check` returns at once, and the replica
        manager's append neither reads the high watermark before and after nor calls it. On a single node,
        where every produce is decided at once, that is every append. Read-only outside this class."""

    def _done(self) -> None:
        self.waiting -= 1

    def decided(self, topic: str, index: int, required_offset: int, result: AppendStatus) -> bool:
        """Decide one partition's wait now if it can be (``result.error_code`` set), as :meth:`delay` decides
        each partition first: True when it was (a leader alone in its ISR, the common single-node case),
        so the caller passes :meth:`delay` only the partitions that must wait (none: no
        :class:`PendingAppend` and no call at all). :func:`_decide_one` without its call (every acks=all
        produce asks)."""
        partition = self._partition_of(topic, index)
        if partition is None:
            result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return True
        done, error = partition.check_enough_replicas_reach_offset(required_offset)
        if done:
            result.error_code = error
        return done

    def delay(self, timeout_ms: int, pending: list[PendingAppend], response: R) -> R | asyncio.Future[R]:
        """``response`` now if every partition is already decided, else a future of it (set once the last
        one is). A caller that no longer wants the answer cancels the future."""
        if _decide(pending, self._partition_of):  # e.g. a leader alone in its ISR: no operation, no future
            return response
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        operation = DelayedProduce(
            max(timeout_ms, 0), pending, self._partition_of, response, future, self._done
        )
        self.waiting += 1  # before: an operation completed inside delay() is counted off there
        if self._operations.delay(operation, [(p.topic, p.index) for p in pending]):
            return response
        return future

    def check(self, key: tuple[str, int]) -> None:
        """The high watermark or leadership of ``key`` changed: check the produces waiting on it."""
        if self.waiting:
            self._operations.check(key)

    def complete_all(self) -> None:
        self._operations.complete_all()

    @property
    def delayed(self) -> int:
        return self._operations.delayed

    async def run(self) -> None:
        await self._operations.run()
