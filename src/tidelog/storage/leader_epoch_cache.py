"""The leader epochs of one partition log and where each began (Kafka's ``LeaderEpochFileCache``), kept in
the partition dir's ``leader-epoch-checkpoint`` (format: :mod:`.checkpoint`).

An entry ``(epoch, start_offset)`` says that the first batch stamped with partition leader epoch ``epoch``
is at ``start_offset``; the epoch runs until the next entry's start offset (the last one until the log
end). Followers truncate by it after a leader change (KIP-101, KIP-279) and OffsetForLeaderEpoch answers
from it (:meth:`LeaderEpochFileCache.end_offset_for`).

Invariants:

* Entries strictly increase in epoch *and* in start offset; epochs and offsets are >= 0.
* :meth:`~LeaderEpochFileCache.assign` of a new entry first removes every entry that would break that
  (an equal or higher epoch, an equal or higher start offset): the log has just been truncated below them,
  or a new leader starts an epoch where nothing of the old one was written. Assigning the latest epoch
  again at a later offset changes nothing.
* The cache changes in memory; :meth:`~LeaderEpochFileCache.write` replaces the file (temp file, fsync,
  rename, fsync of the directory) if it changed since the last write. The log writes it after every
  operation that changed it, and an append writes it *before* its batches: the file never lacks the epoch
  of a batch in the log, and may only hold entries past the log end (an append that failed afterwards, a
  crash before a truncation's write), which loading removes (:meth:`~LeaderEpochFileCache.truncate_from_end`
  at the log end offset).
* Pure apart from :meth:`~LeaderEpochFileCache.write` and :meth:`~LeaderEpochFileCache.load`: no clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

from tidelog.storage.checkpoint import read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from tidelog.storage.errors import CheckpointError

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "LeaderEpochFileCache",
    "OffsetTruncationState",
]

UNDEFINED_EPOCH: Final = -1
"""OffsetForLeaderEpoch's "no such epoch" (Kafka's ``UNDEFINED_EPOCH``)."""
UNDEFINED_EPOCH_OFFSET: Final = -1
"""OffsetForLeaderEpoch's "no end offset" (Kafka's ``UNDEFINED_EPOCH_OFFSET``)."""


class EpochEntry(NamedTuple):
    """A leader epoch and the offset of its first batch."""

    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """OffsetForLeaderEpoch's answer: the largest epoch at most the requested one and where it ends, or
    ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``."""

    epoch: int
    end_offset: int


class OffsetTruncationState(NamedTuple):
    """Where a follower truncates after the leader answered its epoch (Kafka's ``OffsetTruncationState``);
    ``truncation_completed`` False: ask the leader again, for the follower's epoch below (KIP-279)."""

    offset: int
    truncation_completed: bool


_UNDEFINED: Final = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class LeaderEpochFileCache:
    """The ``(epoch, start_offset)`` entries of one log, and their file ``path``."""

    __slots__ = ("_dirty", "_entries", "_epochs", "path")

    def __init__(self, path: Path, entries: Iterable[tuple[int, int]] = ()) -> None:
        """A cache holding ``entries`` (checked: ``ValueError`` unless they keep the invariants), marked
        changed, so that :meth:`write` writes them."""
        self.path = path
        self._entries: list[EpochEntry] = []
        self._epochs: list[int] = []
        for epoch, start_offset in entries:
            entry = EpochEntry(epoch, start_offset)
            previous = self._entries[-1] if self._entries else None
            if (
                epoch < 0
                or start_offset < 0
                or (
                    previous is not None
                    and (epoch <= previous.epoch or start_offset <= previous.start_offset)
                )
            ):
                raise ValueError(f"leader epoch entry {entry} does not follow {previous}")
            self._entries.append(entry)
            self._epochs.append(epoch)
        self._dirty = True

    @classmethod
    def load(cls, path: Path) -> LeaderEpochFileCache | None:
        """The cache in the file at ``path``, None if there is none; :class:`CheckpointError` if it does not
        parse or breaks the invariants. Not marked changed."""
        entries = read_leader_epoch_checkpoint(path)
        if entries is None:
            return None
        try:
            cache = cls(path, entries)
        except ValueError as exc:
            raise CheckpointError(f"leader epoch checkpoint {path}: {exc}") from None
        cache._dirty = False
        return cache

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({[tuple(e) for e in self._entries]})"

    # ---- reading ----------------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the last entry (the epoch the log's last batches carry), None when empty."""
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def dirty(self) -> bool:
        """Whether the entries changed since the file was last written (or read)."""
        return self._dirty

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch (Kafka's ``endOffsetFor``): the largest epoch at most ``requested_epoch``
        and its end offset, the start offset of the next epoch.

        * ``requested_epoch`` UNDEFINED_EPOCH, or above every epoch known: ``(-1, -1)``; an empty cache
          too.
        * the latest epoch: ``(requested_epoch, log_end_offset)``.
        * below the first epoch: ``(requested_epoch, first entry's start offset)``: the log no longer
          holds (or never held) that epoch, and a follower may keep everything below the first known one.
        * else: ``(largest epoch <= requested, start offset of the first epoch above it)``.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return _UNDEFINED
        latest = self.latest_epoch
        if latest is not None and latest == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._entries):
            return _UNDEFINED
        if higher == 0:
            return EpochEndOffset(requested_epoch, self._entries[0].start_offset)
        return EpochEndOffset(self._entries[higher - 1].epoch, self._entries[higher].start_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the batch holding ``offset`` (Kafka's ``epochForOffset``): the epoch of the last
        entry starting at or before it; None below the first entry."""
        index = bisect.bisect_right([entry.start_offset for entry in self._entries], offset)
        return self._entries[index - 1].epoch if index else None

    def offset_truncation_state(
        self, leader: EpochEndOffset, *, log_end_offset: int, fetch_offset: int
    ) -> OffsetTruncationState:
        """Where a follower with this cache truncates once the leader answered ``leader`` for the
        follower's latest epoch (OffsetForLeaderEpoch, or a fetch's DivergingEpoch): Kafka's
        ``AbstractFetcherThread.getOffsetTruncationState``.

        * the leader knows no end offset: ``fetch_offset`` (the follower's high watermark), completed.
        * the follower knows the leader's epoch: min(its own end of that epoch, the leader's, its log end),
          completed.
        * the follower knows only epochs below it: min(its end of the largest one below, its log end), not
          completed: ask the leader again for its epoch there (KIP-279).
        * the follower knows no epoch at or below it: min(the leader's end offset, its log end), completed.
        """
        if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
            return OffsetTruncationState(fetch_offset, truncation_completed=True)
        if leader.epoch == UNDEFINED_EPOCH:
            return OffsetTruncationState(min(leader.end_offset, log_end_offset), truncation_completed=True)
        mine = self.end_offset_for(leader.epoch, log_end_offset)
        if mine.end_offset == UNDEFINED_EPOCH_OFFSET:
            return OffsetTruncationState(min(leader.end_offset, log_end_offset), truncation_completed=True)
        if mine.epoch != leader.epoch:
            return OffsetTruncationState(min(mine.end_offset, log_end_offset), truncation_completed=False)
        return OffsetTruncationState(
            min(mine.end_offset, leader.end_offset, log_end_offset), truncation_completed=True
        )

    # ---- changes ----------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka's ``assign``); returns whether the entries
        changed. Nothing changes when ``epoch`` is the latest epoch already and ``start_offset`` is not
        below its start. Otherwise the entries with an epoch >= ``epoch`` or a start offset >=
        ``start_offset`` are removed from the end first. ``ValueError`` for a negative epoch or offset."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {EpochEntry(epoch, start_offset)}")
        entries = self._entries
        if entries:  # asked before every leader append: the latest entry without the property
            latest = entries[-1]
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            entries.pop()
            self._epochs.pop()
        entries.append(EpochEntry(epoch, start_offset))
        self._epochs.append(epoch)
        self._dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove the entries starting at or after ``end_offset`` (the log was truncated to it; Kafka's
        ``truncateFromEnd``); returns whether any went."""
        entries = self._entries
        removed = False
        while end_offset >= 0 and entries and entries[-1].start_offset >= end_offset:
            entries.pop()
            self._epochs.pop()
            removed = True
        self._dirty |= removed
        return removed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset`` (Kafka's ``truncateFromStart``): the entries starting at or
        below it go, and the last of them comes back starting at ``start_offset`` (so an entry starting
        exactly there stays). Returns whether the entries changed."""
        entries = self._entries
        keep = bisect.bisect_right([entry.start_offset for entry in entries], start_offset)
        if keep == 0:
            return False
        first = EpochEntry(entries[keep - 1].epoch, start_offset)
        if keep == 1 and entries[0] == first:
            return False
        self._entries = [first, *entries[keep:]]
        self._epochs = [entry.epoch for entry in self._entries]
        self._dirty = True
        return True

    def clear(self) -> None:
        """Remove every entry (the log starts over empty)."""
        if self._entries:
            self._dirty = True
        self._entries = []
        self._epochs = []

    def write(self) -> bool:
        """Replace the file with the entries if they changed since the last write; returns whether it
        wrote."""
        if not self._dirty:
            return False
        write_leader_epoch_checkpoint(self.path, self._entries)
        self._dirty = False
        return True
