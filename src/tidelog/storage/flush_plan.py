"""A flush of one log, planned by the log's owner and carried out on another thread (Kafka fsyncs on its
scheduler thread, never on a network thread), and the bookkeeping that tells what is due.

:class:`FlushState` is the log's side: its recovery point (everything below it is fsynced), when it was
last flushed, the end of the segments that rolled since, and two generations: the directory changes
(files created, renamed, deleted) against the ones an fsync of the directory covered, and the log's
truncations, which make a plan made before one stale.

Three steps: :meth:`PartitionLog.plan_flush` (owner's thread) picks what is due and opens new descriptors of
those files; :meth:`FlushPlan.execute` (any thread) fsyncs them; :meth:`PartitionLog.complete_flush`
(owner's thread again) advances the recovery point. The log itself stays single-threaded: the worker never
sees it or its segments, only the plan's own descriptors.

Invariants:

* The descriptors are the plan's own (``os.dup`` of an open log file, else opened by name at planning), so
  a segment renamed ``.deleted``, unlinked, released, closed or swapped by retention, the cleaner or a
  topic deletion meanwhile is harmless: a descriptor keeps its inode, and an fsync of an unlinked file or
  directory succeeds. A file created later under the same name is never fsynced in its place.
* Order: for each segment its log, then its offset and time indexes, then its transaction index if it was
  written since its last fsync (as :meth:`LogSegment.flush`); the directory last, if files came or went.
* The indexes are memory-mapped. The worker does not msync them: CPython's ``mmap.flush`` holds the GIL for
  the whole msync (stalling the event loop anyway) and the owner may unmap at any time. On Linux, an fsync
  of the file writes back the pages dirtied through a shared mapping too (``msync(MS_SYNC)`` is an fsync
  of the mapped range there), so the index fsync covers the entries. The synchronous
  :meth:`PartitionLog.flush` still msyncs.
* ``target_offset`` is what the plan makes durable. :meth:`PartitionLog.complete_flush` refuses a plan
  that has not executed successfully, and drops one of a log closed or truncated since it was planned:
  the recovery point never claims an offset that was not fsynced, whatever happened in between.
* The plan owns its descriptors until :meth:`close` (or the end of a ``with`` block): the owner closes it
  only once :meth:`execute` is no longer running, never while a thread may still fsync them.
* :class:`FlushState`: the recovery point rises only with what an fsync covered (:meth:`FlushState.record`)
  and falls only with the log (:meth:`FlushState.truncated`, :meth:`FlushState.started_over`); a roll flush
  stays due until the recovery point reaches the roll.
* :attr:`FlushState.on_change` is told of every change that can make a flush due (an append, a roll, files
  coming or going, a truncation, a new config), so the periodic flush visits only the logs told since they
  were last :meth:`FlushState.idle` instead of every log (issue 17: no per-partition cost when idle). An
  idle log is one :meth:`FlushState.due` would leave exactly as it is however much time passes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from tidelog.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from tidelog.storage.config import LogConfig
    from tidelog.storage.txn_index import TransactionIndex

__all__ = ["FlushPlan", "FlushState", "close_descriptors", "open_dir_for_fsync"]

_LONG_MAX = (1 << 63) - 1
"""``flush.ms`` at or above this never elapses (``now_ms - last_flush_ms`` never reaches it)."""


def open_dir_for_fsync(directory: Path) -> int:
    """A new descriptor of ``directory`` (to fsync its entries later, wherever it is renamed meanwhile)."""
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY)


def close_descriptors(descriptors: Iterable[int]) -> None:
    """Close every descriptor, whatever fails (a cleanup path)."""
    for fd in descriptors:
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass(eq=False)
class FlushPlan:
    """What one flush of a log makes durable. Built by :meth:`PartitionLog.plan_flush` only.

    ``descriptors`` and ``dir_descriptor`` are what :meth:`execute` fsyncs; the fields after them are read
    back by the log in :meth:`PartitionLog.complete_flush` and mean nothing to anyone else.
    """

    log_name: str
    target_offset: int
    descriptors: tuple[int, ...]
    dir_descriptor: int | None
    owner: object
    truncations: int
    flush_time_ms: int | None
    dir_generation: int
    txn_writes: tuple[tuple[TransactionIndex, int], ...]
    executed: bool = False
    closed: bool = False

    def execute(self) -> None:
        """fsync every descriptor in order, then the directory. Any thread; blocking.

        Raises :class:`KafkaStorageError` on a failed fsync (``executed`` stays False: the log must not
        record this plan) or :class:`ValueError` if the plan was closed.
        """
        if self.closed:
            raise ValueError(f"flush plan of {self.log_name} is closed")
        try:
            for fd in self.descriptors:
                os.fsync(fd)
            if self.dir_descriptor is not None:
                os.fsync(self.dir_descriptor)
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.log_name} failed: {exc}") from exc
        self.executed = True

    def close(self) -> None:
        """Close the descriptors (idempotent). Only once :meth:`execute` is not running."""
        if self.closed:
            return
        self.closed = True
        close_descriptors(self.descriptors)
        if self.dir_descriptor is not None:
            close_descriptors((self.dir_descriptor,))

    def __enter__(self) -> FlushPlan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class FlushState:
    """The flush bookkeeping of one log (module docstring); owner's thread only."""

    __slots__ = (
        "_dir_changes",
        "_dir_synced",
        "last_flush_ms",
        "on_change",
        "recovery_point",
        "roll_flush_offset",
        "truncations",
    )

    def __init__(self, *, recovery_point: int, now_ms: int) -> None:
        self.recovery_point = recovery_point
        self.last_flush_ms = now_ms
        self.roll_flush_offset: int | None = None
        """Where the segments that rolled since the last flush end (None: none rolled)."""
        self.truncations = 0
        """Truncations of the log that removed something: a plan made before one is stale."""
        self._dir_changes = 0
        self._dir_synced = 0
        self.on_change: Callable[[], None] | None = None
        """Told of every change that can make a flush due (the owner's list of logs to visit)."""

    def __repr__(self) -> str:
        return (
            f"FlushState(recovery_point={self.recovery_point}, last_flush_ms={self.last_flush_ms}, "
            f"roll_flush_offset={self.roll_flush_offset}, dir={self._dir_synced}/{self._dir_changes})"
        )

    # ---- what happened to the log ---------------------------------------------------------------

    def changed(self) -> None:
        """Something that can make a flush due happened (an append, a new config): tell ``on_change``."""
        if self.on_change is not None:
            self.on_change()

    def files_changed(self) -> None:
        """A file of the log was created, renamed or deleted: the directory needs an fsync."""
        self._dir_changes += 1
        self.changed()

    @property
    def dir_generation(self) -> int:
        """The directory changes so far (a plan records what it will cover)."""
        return self._dir_changes

    @property
    def dir_dirty(self) -> bool:
        return self._dir_changes != self._dir_synced

    def dir_fsynced(self, generation: int | None = None) -> None:
        """The directory was fsynced after the changes up to ``generation`` (None: all so far)."""
        self._dir_synced = max(self._dir_synced, self._dir_changes if generation is None else generation)

    def rolled(self, new_base: int) -> None:
        """A segment with data rolled: everything below ``new_base`` is due at the next periodic flush."""
        self.roll_flush_offset = new_base
        self.changed()

    def truncated(self, log_end_offset: int) -> None:
        """The log was truncated to ``log_end_offset``."""
        self.truncations += 1
        self.recovery_point = min(self.recovery_point, log_end_offset)
        if self.roll_flush_offset is not None and self.roll_flush_offset > log_end_offset:
            self.roll_flush_offset = None
        self.changed()

    def started_over(self, offset: int) -> None:
        """The log was emptied and starts at ``offset``."""
        self.truncations += 1
        self.recovery_point = offset
        self.roll_flush_offset = None
        self.changed()

    # ---- flushing ---------------------------------------------------------------------------------

    def due(self, *, now_ms: int, log_end_offset: int, config: LogConfig) -> tuple[int, int | None] | None:
        """What the periodic flush owes (Kafka's ``flushDirtyLogs``): ``(target offset, flush time)``, the
        flush time None when only a roll is due; None when nothing is. Everything once ``flush.messages``
        are unflushed or ``flush.ms`` passed since the last flush, else the segments that rolled."""
        if (
            log_end_offset - self.recovery_point >= config.flush_messages
            or now_ms - self.last_flush_ms >= config.flush_ms
        ):
            return log_end_offset, now_ms
        if self.roll_flush_offset is not None:
            return min(self.roll_flush_offset, log_end_offset), None
        return None

    def idle(self, *, log_end_offset: int, config: LogConfig) -> bool:
        """Whether :meth:`due` returns None at every time from now on, until a change (``on_change``): no roll
        pending, fewer than ``flush.messages`` unflushed, and a ``flush.ms`` that never elapses (Kafka's
        default, ``Long.MAX_VALUE``). Unflushed data in the active segment alone is no flush due (Kafka
        leaves it to the page cache). A log with a finite ``flush.ms`` is never idle: its periodic rounds
        move its last flush time even with nothing to fsync, and that time decides when its next data is
        due."""
        return (
            self.roll_flush_offset is None
            and log_end_offset - self.recovery_point < config.flush_messages
            and config.flush_ms >= _LONG_MAX
        )

    def record(self, target_offset: int, flush_time_ms: int | None) -> None:
        """An fsync covered everything below ``target_offset`` (a periodic flush at ``flush_time_ms``, None
        for a roll flush)."""
        self.recovery_point = max(self.recovery_point, target_offset)
        if flush_time_ms is not None:
            self.last_flush_ms = max(self.last_flush_ms, flush_time_ms)
        if self.roll_flush_offset is not None and self.roll_flush_offset <= self.recovery_point:
            self.roll_flush_offset = None
