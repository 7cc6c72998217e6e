"""Checkpoint files: crash-safe replacement of a small file, and Kafka's checkpoint text formats.

Offset checkpoint format (Kafka's ``OffsetCheckpointFile``: recovery points, log start offsets, high
watermarks of a log dir)::

    0                      <- version
    2                      <- number of entries
    my.topic 0 1234        <- topic partition offset
    my.topic 1 99

Leader epoch checkpoint format (Kafka's ``LeaderEpochCheckpointFile``, ``leader-epoch-checkpoint`` in a
partition dir; what the entries mean is :mod:`.leader_epoch_cache`'s)::

    0                      <- version
    2                      <- number of entries
    0 0                    <- leader epoch, start offset
    3 1200

Invariants:

* :func:`atomic_write` writes ``<file>.tmp``, fsyncs it, renames it over ``<file>`` and fsyncs the
  directory: a reader sees the old content or the new, never a mix. A crash leaves at worst a stale
  ``.tmp``, which readers ignore and the next write replaces.
* :func:`read_offsets_checkpoint` of a missing file is empty (:func:`read_leader_epoch_checkpoint`: None);
  a malformed one raises :class:`CheckpointError` (version, count and every line are checked, as Kafka
  does).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from tidelog.protocol import TopicPartition
from tidelog.storage.errors import CheckpointError
from tidelog.storage.layout import TMP_FILE_SUFFIX

__all__ = [
    "atomic_write",
    "fsync_dir",
    "read_leader_epoch_checkpoint",
    "read_offsets_checkpoint",
    "write_leader_epoch_checkpoint",
    "write_offsets_checkpoint",
]

_VERSION: Final = 0


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` crash-safely: temp file, fsync, rename, fsync of the directory.

    ``mode`` is the new file's permission bits (before the umask)."""
    tmp = path.with_name(path.name + TMP_FILE_SUFFIX)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover temp file keeps its mode through O_CREAT: start from a fresh one
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a half-written temp file only takes space (on a full disk, the space it needs)
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _write_checkpoint(path: Path, lines: Sequence[str]) -> None:
    text = "\n".join([str(_VERSION), str(len(lines)), *lines]) + "\n"
    atomic_write(path, text.encode("utf-8"))


def write_offsets_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Write ``offsets`` in Kafka's checkpoint format, atomically (sorted, for stable diffs)."""
    _write_checkpoint(path, [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())])


def _entry_lines(path: Path) -> list[list[str]] | None:
    """The entry lines of a checkpoint file split on whitespace, after its version and count are checked;
    None if the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"malformed checkpoint {path}: {len(lines)} lines, need version and count")
    try:
        version = int(lines[0])
        expected = int(lines[1])
    except ValueError:
        raise CheckpointError(f"malformed checkpoint {path}: bad version or count line") from None
    if version != _VERSION:
        raise CheckpointError(f"checkpoint {path} has version {version}, only {_VERSION} is known")
    if len(lines) - 2 != expected:
        raise CheckpointError(f"checkpoint {path} announces {expected} entries, holds {len(lines) - 2}")
    return [line.split() for line in lines[2:]]


def read_offsets_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The entries of a checkpoint file; empty if the file does not exist."""
    rows = _entry_lines(path)
    if rows is None:
        return {}
    entries: dict[TopicPartition, int] = {}
    for parts in rows:
        if len(parts) != 3:
            raise CheckpointError(f"malformed line in checkpoint {path}: {' '.join(parts)!r}")
        try:
            tp = TopicPartition(parts[0], int(parts[1]))
            entries[tp] = int(parts[2])
        except ValueError:
            raise CheckpointError(f"malformed line in checkpoint {path}: {' '.join(parts)!r}") from None
    if len(entries) != len(rows):
        raise CheckpointError(f"checkpoint {path} names a partition twice")
    return entries


def write_leader_epoch_checkpoint(path: Path, entries: Sequence[tuple[int, int]]) -> None:
    """Write ``(epoch, start_offset)`` entries in Kafka's leader epoch checkpoint format, atomically."""
    _write_checkpoint(path, [f"{epoch} {start_offset}" for epoch, start_offset in entries])


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """The ``(epoch, start_offset)`` entries of a leader epoch checkpoint, in file order; None if the file
    does not exist. Every line must be two integers (:class:`CheckpointError`); their meaning is checked by
    the reader (:mod:`.leader_epoch_cache`)."""
    rows = _entry_lines(path)
    if rows is None:
        return None
    entries: list[tuple[int, int]] = []
    for parts in rows:
        try:
            epoch, start_offset = (int(part) for part in parts)
        except ValueError:
            raise CheckpointError(f"malformed line in checkpoint {path}: {' '.join(parts)!r}") from None
        entries.append((epoch, start_offset))
    return entries
