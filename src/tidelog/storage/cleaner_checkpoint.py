"""``cleaner-offset-checkpoint``: where each compacted log's dirty section starts, one file per log dir.

Kafka's ``LogCleanerManager`` checkpoints, in Kafka's offset checkpoint format (:mod:`.checkpoint`).

Invariants:

* The offset of a partition is the first offset the cleaner has not yet cleaned: everything below it was
  deduplicated against everything below it at some cleaning. A missing entry means "nothing clean yet".
* Every file write is atomic (temp file, fsync, rename) and names only partitions that still have a log
  in that dir (:meth:`CleanerCheckpoints.update` drops the others).
* A checkpoint is only a hint: the cleaner checks it against the log (below the log start offset or above
  the log end offset it is reset to the log start offset, as Kafka does), so a stale entry costs at most
  extra cleaning, never data.
* Not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.storage.checkpoint import read_offsets_checkpoint, write_offsets_checkpoint
from tidelog.storage.errors import CheckpointError

__all__ = ["CLEANER_OFFSET_CHECKPOINT_FILE", "CleanerCheckpoints"]

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT_FILE: Final = "cleaner-offset-checkpoint"
"""Kafka's ``LogCleanerManager.offsetCheckpointFile``."""


class CleanerCheckpoints:
    """The cleaner checkpoints of every log dir, cached in memory, written through."""

    def __init__(self, log_dirs: Sequence[Path]) -> None:
        self._offsets: dict[Path, dict[TopicPartition, int]] = {}
        for log_dir in log_dirs:
            path = log_dir / CLEANER_OFFSET_CHECKPOINT_FILE
            try:
                self._offsets[log_dir] = read_offsets_checkpoint(path)
            except CheckpointError as exc:
                logger.warning("%s; every compacted log in %s will be cleaned from its start", exc, log_dir)
                self._offsets[log_dir] = {}

    def get(self, tp: TopicPartition) -> int | None:
        """The checkpointed first dirty offset of ``tp`` (whatever dir it is in), None if none."""
        for offsets in self._offsets.values():
            if tp in offsets:
                return offsets[tp]
        return None

    def update(
        self,
        log_dir: Path,
        tp: TopicPartition,
        offset: int | None,
        *,
        live: Callable[[TopicPartition], bool] | None = None,
    ) -> None:
        """Set (``offset`` None: remove) the entry of ``tp`` in ``log_dir``'s file and write the file. Entries
        that ``live`` says have no log any more are dropped on the way (Kafka's ``updateCheckpoints``)."""
        offsets = self._offsets.setdefault(log_dir, {})
        for other_dir, others in self._offsets.items():
            if other_dir != log_dir:
                others.pop(tp, None)
        if offset is None:
            offsets.pop(tp, None)
        else:
            offsets[tp] = offset
        if live is not None:
            for stale in [t for t in offsets if t != tp and not live(t)]:
                del offsets[stale]
        write_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE, offsets)

    def remove(self, tp: TopicPartition) -> None:
        """Forget ``tp`` (its log was deleted), rewriting the files that named it."""
        for log_dir, offsets in self._offsets.items():
            if offsets.pop(tp, None) is not None:
                write_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE, offsets)

    def truncate(self, tp: TopicPartition, offset: int) -> None:
        """Lower the entry of ``tp`` to ``offset`` if it is above (Kafka's ``maybeTruncateCheckpoint``, for a
        log truncated below it: nothing truncates logs on a single broker yet; replication will)."""
        for log_dir, offsets in self._offsets.items():
            if offsets.get(tp, -1) > offset:
                offsets[tp] = offset
                write_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE, offsets)
