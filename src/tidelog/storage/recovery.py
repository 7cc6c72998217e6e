"""Loading a partition directory at start-up: leftovers, interrupted swaps, index checks, recovery.

Kafka's ``LogLoader``. In order:

1. Leftovers: ``*.deleted`` files are removed; ``*.cleaned`` files are removed (an interrupted clean);
   ``*.swap`` files at or above the smallest ``.cleaned`` base offset are removed (an incomplete swap);
   index files without a ``.log`` are removed.
2. Interrupted swaps (the crash side of :mod:`.segment_swap`): a remaining ``<base>.log.swap`` is a
   finished cleaner output. Segments whose base offsets fall in its offset range are removed, then the
   ``.swap`` suffix is dropped (indexes rebuilt).
3. Segments before the recovery point (all of them after a clean shutdown) are trusted: their indexes are
   sanity-checked and compared with the log (:meth:`LogSegment.check_against_log`); a missing or
   inconsistent index makes the segment revalidated and its indexes rebuilt. The last segment's torn tail
   is cut.
4. After an unclean shutdown, every segment from the one holding the recovery point onwards is revalidated
   batch by batch (:meth:`LogSegment.recover`: CRC32C, structure, offsets); the first invalid byte cuts the
   segment and every later segment is deleted. In a log without ``compact`` in ``cleanup.policy``, offsets
   must also be contiguous (base offsets lie outside the CRC, so this is what catches a damaged one), also
   from one revalidated segment to the next. A compacted log legitimately has gaps: the cleaner must only
   replace segments below the recovery point. Anywhere, a segment overlapping the one before ends the log.
5. A log whose end is below the checkpointed log start offset starts over, empty, at that offset.
6. The leader epoch cache (:mod:`.leader_epoch_cache`): a ``leader-epoch-checkpoint`` that parses and keeps
   the cache's invariants is trusted, as Kafka does, then cut to the log: entries at or past the log end
   offset go (written before a crash that cut the tail, or before a truncation's write), the epochs of
   the batches revalidated in step 4 that are newer than its last entry are added (Kafka's
   ``LogSegment.recover``), and its first entry starts at the log start offset. A missing file (a log
   written before tidelog kept one, or lost) or a damaged one (warned about, naming it) is rebuilt from
   the partition leader epochs of every batch header instead, Kafka's ``assign`` of each new epoch in
   offset order: Kafka would start with an empty cache, and a leader answering OffsetForLeaderEpoch from
   an empty cache lets a follower keep a diverged tail. Either way the file is rewritten if that changed
   anything; a stale ``leader-epoch-checkpoint.tmp`` is removed.

Invariant: the loaded log is a prefix of what was appended; nothing before the recovery point is dropped
unless its own bytes are invalid. Every segment revalidated in step 3 or 4 has lost its transaction index;
``LoadedLog.recovered_from`` (the first such segment's base offset) tells the log where the producer state
replay that rebuilds it must start at the latest. After an unclean shutdown the recovery point does not advance (the
revalidated data is not known to be on disk); after a clean one it is the log end offset. The leader epoch
cache names no offset at or past the log end offset and none below the log start offset.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tidelog.storage import layout
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import CheckpointError, CorruptIndexError, LogCorruptionError
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.leader_epoch_cache import LeaderEpochFileCache
from tidelog.storage.segment import LogSegment

__all__ = ["LoadedLog", "load_log"]

logger = logging.getLogger(__name__)

_INDEX_SUFFIXES = (layout.INDEX_FILE_SUFFIX, layout.TIME_INDEX_FILE_SUFFIX, layout.TXN_INDEX_FILE_SUFFIX)


@dataclass(slots=True)
class LoadedLog:
    """Segments in base-offset order (the last one active), and the offsets the log resumes with."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    leader_epochs: LeaderEpochFileCache
    """The leader epoch cache, cut to the log (step 6) and written if that changed it."""
    recovered_from: int | None = None
    """Base offset of the first segment revalidated (its transaction index emptied), None if none was."""


def _segment_suffix(name: str) -> str:
    """``".index"`` for ``00000000000000000000.index`` (the part after the offset), else ``""``."""
    if layout.offset_from_file_name(name) is None:
        return ""
    return name[name.index(".") :]


def _delete_index_files(directory: Path, base_offset: int) -> None:
    for suffix in _INDEX_SUFFIXES:
        (directory / layout.file_name(base_offset, suffix)).unlink(missing_ok=True)


def _remove_leftovers(directory: Path) -> list[Path]:
    """Step 1; returns the valid ``.log.swap`` files."""
    swaps: list[Path] = []
    min_cleaned = None
    for path in sorted(directory.iterdir()):
        name = path.name
        if not path.is_file():
            continue
        if name.endswith(layout.DELETED_FILE_SUFFIX):
            logger.info("%s: removing leftover %s", directory.name, name)
            path.unlink(missing_ok=True)
        elif name.endswith(layout.CLEANED_FILE_SUFFIX):
            base = layout.offset_from_file_name(name)
            if base is not None:
                min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
            path.unlink(missing_ok=True)
        elif name.endswith(layout.SWAP_FILE_SUFFIX):
            base = layout.offset_from_file_name(name)
            suffix = _segment_suffix(name[: -len(layout.SWAP_FILE_SUFFIX)])
            if base is None:
                continue
            _delete_index_files(directory, base)
            if suffix == layout.LOG_FILE_SUFFIX:
                swaps.append(path)
            else:
                path.unlink(missing_ok=True)
    valid = []
    for swap in swaps:
        base = layout.offset_from_file_name(swap.name)
        if min_cleaned is not None and base is not None and base >= min_cleaned:
            logger.info("%s: removing incomplete swap %s", directory.name, swap.name)
            swap.unlink(missing_ok=True)
        else:
            valid.append(swap)
    return valid


def _complete_swaps(
    directory: Path, swaps: list[Path], config: LogConfig, limiter: OpenSegmentLimiter, now_ms: int
) -> None:
    """Step 2."""
    if not swaps:
        return
    min_swap = None
    max_swap = None
    for swap in swaps:
        base = layout.offset_from_file_name(swap.name)
        assert base is not None
        segment = LogSegment.open(
            directory, base, config, limiter, now_ms=now_ms, extra_suffix=layout.SWAP_FILE_SUFFIX
        )
        next_offset = base
        try:
            for _, header in segment.batches():
                next_offset = header.next_offset
        except LogCorruptionError as exc:
            logger.warning("%s: %s", directory.name, exc)
        segment.release_handles()
        limiter.forget(segment)
        min_swap = base if min_swap is None else min(min_swap, base)
        max_swap = next_offset if max_swap is None else max(max_swap, next_offset)
    assert min_swap is not None
    assert max_swap is not None
    for path in sorted(directory.iterdir()):
        base = layout.offset_from_file_name(path.name)
        if (
            path.is_file()
            and base is not None
            and not path.name.endswith(layout.SWAP_FILE_SUFFIX)
            and min_swap <= base < max_swap
        ):
            logger.info("%s: removing %s, replaced by an interrupted swap", directory.name, path.name)
            path.unlink()
    for swap in swaps:
        os.rename(swap, swap.with_name(swap.name[: -len(layout.SWAP_FILE_SUFFIX)]))


def _segment_bases(directory: Path) -> list[int]:
    """Base offsets of the ``.log`` files; index files without a ``.log`` are removed."""
    bases: set[int] = set()
    indexes: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        base = layout.offset_from_file_name(path.name)
        if base is None or not path.is_file():
            continue
        suffix = _segment_suffix(path.name)
        if suffix == layout.LOG_FILE_SUFFIX:
            bases.add(base)
        elif suffix in _INDEX_SUFFIXES:
            indexes.append((base, path))
    for base, path in indexes:
        if base not in bases:
            logger.info("%s: removing orphaned index file %s", directory.name, path.name)
            path.unlink(missing_ok=True)
    return sorted(bases)


def _follows(previous: LogSegment, segment: LogSegment, *, contiguous: bool) -> bool:
    """Whether ``segment`` may come after ``previous``: no overlap; no gap either when ``contiguous``."""
    end = previous.next_offset
    return segment.base_offset == end if contiguous else segment.base_offset >= end


def _delete_from(directory: Path, segments: list[LogSegment], index: int) -> None:
    logger.warning(
        "%s: %s does not follow the segment before it (ending at offset %d); deleting it and every later one",
        directory.name,
        segments[index].log_path.name,
        segments[index - 1].next_offset,
    )
    for doomed in segments[index:]:
        doomed.delete_files()
    del segments[index:]


def load_log(
    directory: Path,
    config: LogConfig,
    limiter: OpenSegmentLimiter,
    *,
    now_ms: int,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
) -> LoadedLog:
    """Load (and if needed recover) the partition log in ``directory``, creating it if absent."""
    directory.mkdir(parents=True, exist_ok=True)
    _complete_swaps(directory, _remove_leftovers(directory), config, limiter, now_ms)
    bases = _segment_bases(directory)
    segments = [LogSegment.open(directory, base, config, limiter, now_ms=now_ms) for base in bases]
    contiguous = not config.compact_enabled

    first_unflushed = (
        len(segments) if clean_shutdown else max(bisect.bisect_right(bases, recovery_point) - 1, 0)
    )
    recovered_from: int | None = None
    for i, segment in enumerate(segments[:first_unflushed]):
        try:
            segment.check_against_log(cut_torn_tail=i == len(segments) - 1)
        except (CorruptIndexError, LogCorruptionError) as exc:
            logger.warning("%s: %s; revalidating %s", directory.name, exc, segment.log_path.name)
            segment.recover(contiguous=contiguous)
            if recovered_from is None:
                recovered_from = segment.base_offset

    if not clean_shutdown:
        for i in range(first_unflushed, len(segments)):
            segment = segments[i]
            if i > 0 and not _follows(segments[i - 1], segment, contiguous=contiguous):
                _delete_from(directory, segments, i)
                break
            if recovered_from is None:
                recovered_from = segment.base_offset
            if segment.recover(contiguous=contiguous) > 0 and i + 1 < len(segments):
                _delete_from(directory, segments, i + 1)
                break
    for i in range(1, len(segments)):  # trusted segments: overlaps only (compaction leaves gaps)
        if segments[i].base_offset < segments[i - 1].next_offset:
            _delete_from(directory, segments, i)
            break

    if segments and segments[-1].next_offset < log_start_offset:
        logger.warning(
            "%s: log end offset %d is below the log start offset %d; starting over empty",
            directory.name,
            segments[-1].next_offset,
            log_start_offset,
        )
        for doomed in segments:
            doomed.delete_files()
        segments = []
    if not segments:
        segments = [LogSegment.create(directory, log_start_offset, config, limiter, now_ms=now_ms)]

    for segment in segments[:-1]:
        segment.mark_inactive()
    segments[-1].mark_active()
    log_end_offset = segments[-1].next_offset
    start = max(log_start_offset, segments[0].base_offset)
    point = (
        log_end_offset
        if clean_shutdown
        else min(max(recovery_point, segments[0].base_offset), log_end_offset)
    )
    epochs = _load_leader_epochs(
        directory,
        segments,
        log_start_offset=start,
        log_end_offset=log_end_offset,
        recovered_from=recovered_from,
    )
    return LoadedLog(segments, start, point, epochs, recovered_from)


def _first_epoch(segment: LogSegment) -> int | None:
    for _, header in segment.batches():
        return header.partition_leader_epoch
    return None


def _assign_new_epochs(cache: LeaderEpochFileCache, segments: list[LogSegment], from_offset: int) -> None:
    """Assign the partition leader epoch of each batch from the segment holding ``from_offset`` on that is
    newer than the cache's latest (batches without one, -1, are skipped). Epochs never fall along a log, so
    a segment whose first batch has the epoch of the next segment's first batch holds that epoch alone: only
    its first header is read."""
    first = max(bisect.bisect_right([s.base_offset for s in segments], from_offset) - 1, 0)
    tail = segments[first:]
    firsts = [_first_epoch(segment) for segment in tail]
    for i, segment in enumerate(tail):
        single = i + 1 < len(tail) and firsts[i] is not None and firsts[i] == firsts[i + 1]
        for _, header in segment.batches():
            epoch = header.partition_leader_epoch
            latest = cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                cache.assign(epoch, header.base_offset)
            if single:
                break


def _load_leader_epochs(
    directory: Path,
    segments: list[LogSegment],
    *,
    log_start_offset: int,
    log_end_offset: int,
    recovered_from: int | None,
) -> LeaderEpochFileCache:
    """Step 6."""
    path = directory / layout.LEADER_EPOCH_CHECKPOINT_FILE
    path.with_name(path.name + layout.TMP_FILE_SUFFIX).unlink(missing_ok=True)
    try:
        cache = LeaderEpochFileCache.load(path)
    except CheckpointError as exc:
        logger.warning("%s; rebuilding %s from the log's batches", exc, path.name)
        cache = None
    if cache is None:
        cache = LeaderEpochFileCache(path)
        _assign_new_epochs(cache, segments, segments[0].base_offset)
    else:
        cache.truncate_from_end(log_end_offset)
        if recovered_from is not None:
            _assign_new_epochs(cache, segments, recovered_from)
    cache.truncate_from_start(log_start_offset)
    cache.write()
    return cache
