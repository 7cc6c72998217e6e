"""A flush of one log, planned by the log's owner and carried out on another thread (Kafka fsyncs on its
scheduler thread, never on a network thread).

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
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from tidelog.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from tidelog.storage.txn_index import TransactionIndex

__all__ = ["FlushPlan", "close_descriptors", "open_dir_for_fsync"]


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
