"""Sparse, memory-mapped indexes of one segment: offset -> position and timestamp -> offset.

Kafka's ``AbstractIndex``, ``OffsetIndex`` and ``TimeIndex``. Entries are big-endian, offsets stored
relative to the segment's base offset (int32):

* :class:`OffsetIndex`: 8 bytes, ``(relative_offset int32, position int32)``. An entry maps the LAST offset
  of a batch to the file position where that batch starts. Both columns strictly increase.
* :class:`TimeIndex`: 12 bytes, ``(timestamp int64, relative_offset int32)``. An entry says "up to the batch
  whose last offset is ``offset``, the largest timestamp in the segment is ``timestamp``, first reached
  there". Timestamps strictly increase, offsets never decrease.

Invariants:

* An index may hold up to :attr:`max_entries` entries: its *capacity*, ``max_index_size`` rounded down to
  the entry size for a writable index (:meth:`resize`), else the whole entries of the file. The file is
  created empty with its segment (:meth:`create_empty`; an index used without it has no file until its
  first entry is written) and is never preallocated: Kafka preallocates the whole capacity (a 10 MiB
  ``ftruncate``, map and first fault per fresh segment, about 2 ms of system time, on the append path), and
  even a one-page ``ftruncate`` + map + fault costs ~25 µs per fresh index, paid by every partition of a
  wide produce.
* Appended entries are *pending*: kept in memory (up to one page, :data:`_PENDING_BYTES`, rounded up to whole
  entries) and written to the file's end with one ``pwrite`` when a page of them is due, and by
  :meth:`write_pending`, :meth:`flush`, :meth:`open_for_fsync` and :meth:`trim_to_valid_size` (roll, close).
  Lookups see file and pending entries alike. So the file holds exactly a prefix of the entries (a truncation
  cuts the file too; :meth:`reset`, before a rebuild, empties it); the process dying loses only pending
  entries, leaving a sparser index that is still correct (every entry in the file maps a batch that is in the
  log, written before it), and the segment holding them is the active one, past the recovery point (a flush
  writes them first), so recovery rebuilds its indexes anyway. Memory: at most ~8 KiB of pending entries per
  active segment (both indexes), whatever its handles' state. :meth:`trim_to_valid_size` cuts the file to
  exactly ``entries * ENTRY_SIZE`` bytes (creating it if absent). Opening an existing file takes every whole
  entry in it as valid (Kafka's rule), so a damaged file fails :meth:`sanity_check` and gets rebuilt.
* A :class:`TimeIndex` keeps one slot free for the entry written when its segment rolls (``is_full``).
* Indexes are never checksummed. :meth:`sanity_check` checks size, monotonicity and bounds; the segment
  additionally checks each entry it uses against the log and rebuilds the index on a mismatch.
* The mapping (of the file as written, for lookups of entries in the file) is opened lazily, dropped when
  a write extends the file past it, and can be released at any time (:meth:`close`); the entries,
  pending ones too, survive and the next use maps the file again. A mapping holds one descriptor and one
  memory map of the process (``vm.max_map_count``); the segment's owner bounds how many are open
  (:mod:`.file_handles`). Writing pending entries opens the file for that one ``pwrite`` only.
  Not thread-safe.
"""

from __future__ import annotations

import contextlib
import mmap
import operator
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import ClassVar, Final, NamedTuple

from tidelog.storage.errors import CorruptIndexError

__all__ = ["OffsetIndex", "OffsetPosition", "TimeIndex", "TimestampOffset"]

_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_INT32_MAX: Final = 2**31 - 1
_PENDING_BYTES: Final = 4096
"""Pending entries are written once this many bytes of them (one page) are due."""
_OFFSET_ENTRY: Final = struct.Struct(">ii")
_TIME_ENTRY: Final = struct.Struct(">qi")


class OffsetPosition(NamedTuple):
    """An offset index entry: the batch whose last offset is ``offset`` starts at ``position``."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: largest timestamp ``timestamp``, first reached by the batch ending at ``offset``."""

    timestamp: int
    offset: int


class _SparseIndex:
    """Shared machinery: a file of fixed-size entries, appended through a one-page buffer, mapped lazily."""

    ENTRY_SIZE: ClassVar[int]
    _ENTRY: ClassVar[struct.Struct]
    _SUFFIX_NAME: ClassVar[str]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self._path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._mm: mmap.mmap | None = None
        self._length = 0
        self._capacity = 0
        self._entries = 0
        self._file_entries = 0
        """Entries ``[0, _file_entries)`` are in the file; the rest (``_entries`` in all) are ``_pending``."""
        self._pending = bytearray()
        self._exists = False
        self._loaded = False
        self._last: tuple[int, int] | None = None
        """The raw fields of entry ``_entries - 1`` when known (None: read it); every change of the entries
        other than an append forgets it, an append sets it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._path.name}, entries={self.entries})"

    # ---- file and mapping -------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> int:
        self._load()
        return self._entries

    @property
    def length(self) -> int:
        """Current file length in bytes (0 while there is no file); pending entries are not in it yet."""
        self._load()
        return self._length

    @property
    def max_entries(self) -> int:
        """The capacity in entries (see the module docstring)."""
        self._load()
        return self._capacity // self.ENTRY_SIZE

    @property
    def is_full(self) -> bool:
        if not self._loaded:  # asked before every append (should_roll): no nested properties
            self._load()
        return self._entries >= self._capacity // self.ENTRY_SIZE

    def _rounded(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _load(self) -> None:
        """First use: take every whole entry of an existing file; a missing file is an empty index with the
        full capacity, created by its first entry."""
        if self._loaded:
            return
        self._last = None
        try:
            fd = os.open(self._path, os.O_RDWR)
        except FileNotFoundError:
            self._length = self._entries = self._file_entries = 0
            self._capacity = self._rounded(self.max_index_size)
            self._exists = False
        else:
            try:
                length = os.fstat(fd).st_size
                self._mm = mmap.mmap(fd, length) if length else None
            finally:
                os.close(fd)
            self._length = self._capacity = length
            self._entries = self._file_entries = length // self.ENTRY_SIZE
            self._exists = True
        self._loaded = True

    def _map(self) -> mmap.mmap:
        """The mapping (re-established if it was released); only called when the file has entries."""
        self._load()
        if self._mm is None:
            fd = os.open(self._path, os.O_RDWR)
            try:
                actual = os.fstat(fd).st_size
                if actual != self._length:
                    raise CorruptIndexError(f"{self._path} changed size under us: {actual} != {self._length}")
                self._mm = mmap.mmap(fd, self._length)
            finally:
                os.close(fd)
        return self._mm

    def create_empty(self) -> None:
        """Create the file empty (replacing any), unmapped, with the full capacity: a new segment's index,
        made where the segment is made so that the append path never creates a file."""
        self.close()
        os.close(os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        self._length = self._entries = self._file_entries = 0
        self._pending = bytearray()
        self._last = None
        self._capacity = self._rounded(self.max_index_size)
        self._exists = self._loaded = True

    def _set_length(self, length: int) -> None:
        """Make the file ``length`` bytes (creating it if absent) and map it anew (no mapping when 0)."""
        self.close()
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, length)
            self._mm = mmap.mmap(fd, length) if length else None
        finally:
            os.close(fd)
        self._length = length
        self._exists = True

    def _add_pending(self, entry: bytes, fields: tuple[int, int]) -> None:
        """Append one packed entry (room checked by the caller), ``fields`` unpacked; a page of them due is
        written."""
        pending = self._pending
        pending += entry
        self._entries += 1
        self._last = fields
        if len(pending) >= _PENDING_BYTES:
            self.write_pending()

    def write_pending(self) -> None:
        """Write the pending entries at the end of the file's entries (one ``pwrite``; the file is created
        if absent). A mapping the file now outgrows is dropped (the next lookup maps it again)."""
        pending = self._pending
        if not pending:
            return
        start = self._file_entries * self.ENTRY_SIZE
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            view = memoryview(pending)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], start + done)
        finally:
            os.close(fd)
        end = start + len(pending)
        if end > self._length:
            self.close()
            self._length = end
        self._file_entries = self._entries
        self._pending = bytearray()
        self._exists = True

    def close(self) -> None:
        """Release the mapping (and its descriptor); the index stays usable and maps again when needed."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def resize(self, new_size: int) -> bool:
        """Set the capacity to ``new_size`` rounded down to whole entries (never below the entries); a longer
        file is cut to it now, a shorter one grows as entries come. Returns whether the capacity changed."""
        self._load()
        rounded = max(self._rounded(new_size), self._entries * self.ENTRY_SIZE)
        changed = rounded != self._capacity
        self._capacity = rounded
        if self._length > rounded:
            self._set_length(rounded)
        return changed

    def trim_to_valid_size(self) -> None:
        """Cut the file to exactly its entries (an empty file if it had none yet); the capacity too."""
        self._load()
        self.write_pending()
        valid = self._entries * self.ENTRY_SIZE
        self._capacity = valid
        if self._length != valid or not self._exists:
            self._set_length(valid)

    def reset(self) -> None:
        """Drop every entry, the capacity back to ``max_index_size`` (before a rebuild)."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def flush(self) -> None:
        """Make the entries and the file length durable (pending ones written, msync, then fsync)."""
        if not self._loaded:
            return
        self.write_pending()
        if not self._exists:
            return
        if self._mm is not None:
            self._mm.flush()
        fd = os.open(self._path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open_for_fsync(self) -> int | None:
        """A new read-only descriptor of the file for an fsync on another thread (the caller closes it),
        pending entries written first; None if the index was never loaded or has no file (nothing
        written). No msync: see :mod:`.flush_plan`."""
        if not self._loaded:
            return None
        self.write_pending()
        if not self._exists:
            return None
        return os.open(self._path, os.O_RDONLY)

    def rename_to(self, new_path: Path) -> None:
        """Rename the file (a mapping stays valid across a rename)."""
        with contextlib.suppress(FileNotFoundError):
            os.rename(self._path, new_path)
        self._path = new_path

    def delete_file(self) -> None:
        self.close()
        self._path.unlink(missing_ok=True)
        self._loaded = self._exists = False
        self._entries = self._file_entries = self._length = self._capacity = 0
        self._pending = bytearray()
        self._last = None

    # ---- entries ----------------------------------------------------------------------------------

    def _last_raw_entry(self) -> tuple[int, int]:
        """The raw fields of the last entry (the caller checked there is one): remembered from the append
        that made it, so the append path's checks do not read it back."""
        last = self._last
        if last is None:
            last = self._last = self._raw_entry(self._entries - 1)
        return last

    def _raw_entry(self, n: int) -> tuple[int, int]:
        in_file = self._file_entries
        if n >= in_file:
            return self._ENTRY.unpack_from(self._pending, (n - in_file) * self.ENTRY_SIZE)
        return self._ENTRY.unpack_from(self._map(), n * self.ENTRY_SIZE)

    def _truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries; entries cut from the file are cut from it now (``ftruncate``)."""
        self._load()
        n = min(n, self._entries)
        self._last = None
        in_file = self._file_entries
        if n >= in_file:
            del self._pending[(n - in_file) * self.ENTRY_SIZE :]
        else:
            self._pending = bytearray()
            self._file_entries = n
            self._set_length(n * self.ENTRY_SIZE)
        self._entries = n

    def _check_append(self, relative_offset: int) -> None:
        if not 0 <= relative_offset <= _INT32_MAX:
            raise ValueError(
                f"offset {relative_offset + self.base_offset} out of range for base {self.base_offset}"
            )

    def _largest_lower_bound(self, target: int, field: struct.Struct, field_offset: int) -> int:
        """The last slot whose field (at ``field_offset`` within an entry) is <= target, or -1."""
        n = self.entries
        if n == 0:
            return -1
        in_file = self._file_entries
        size = self.ENTRY_SIZE
        unpack = field.unpack_from
        mm = self._map() if in_file else None
        pending = self._pending

        def at(slot: int) -> int:
            if slot < in_file:
                assert mm is not None
                return int(unpack(mm, slot * size + field_offset)[0])
            return int(unpack(pending, (slot - in_file) * size + field_offset)[0])

        if at(0) > target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if at(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _entries_bytes(self) -> bytes:
        self._load()
        in_file = self._file_entries
        head = self._map()[: in_file * self.ENTRY_SIZE] if in_file else b""
        return head + bytes(self._pending)

    def _check_shape(self) -> None:
        self._load()
        if self._length % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self._path}: length {self._length} is not a multiple of the entry size {self.ENTRY_SIZE}"
            )


def _int32_columns(data: bytes) -> tuple[array[int], array[int]]:
    values = array("i")
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values[0::2], values[1::2]


def _strictly_increasing(values: array[int] | list[int]) -> bool:
    return all(map(operator.lt, values, values[1:]))


class OffsetIndex(_SparseIndex):
    """Offset -> file position, one entry per ``index.interval.bytes`` of log."""

    ENTRY_SIZE = 8
    _ENTRY = _OFFSET_ENTRY

    def entry(self, n: int) -> OffsetPosition:
        relative, position = self._raw_entry(n)
        return OffsetPosition(self.base_offset + relative, position)

    def last_entry(self) -> OffsetPosition | None:
        if not self.entries:
            return None
        relative, position = self._last_raw_entry()
        return OffsetPosition(self.base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        """The last entry's offset, or the base offset when empty."""
        last = self.last_entry()
        return last.offset if last is not None else self.base_offset

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; False (and nothing written) when the index is full. ``offset`` must increase."""
        # Once per batch a segment indexes (every batch of 4 KiB or more): the checks of _check_append,
        # entries, _last_raw_entry and the body of _add_pending inline, the same steps without their calls.
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            self._check_append(relative)  # raises
        if not self._loaded:
            self._load()
        n = self._entries
        if n:
            last = self._last
            if last is None:
                last = self._last_raw_entry()
            if relative <= last[0]:
                raise ValueError(f"index entry offset {offset} not above the last entry {self.last_offset}")
        if n >= self._capacity // 8:  # max_entries (ENTRY_SIZE 8)
            return False
        fields = (relative, position)
        pending = self._pending
        pending += _OFFSET_ENTRY.pack(relative, position)
        self._entries = n + 1
        self._last = fields
        if len(pending) >= _PENDING_BYTES:
            self.write_pending()
        return True

    def lookup(self, target_offset: int) -> OffsetPosition | None:
        """The entry with the largest offset <= ``target_offset``; None when there is none."""
        slot = self._largest_lower_bound(target_offset - self.base_offset, _INT32, 0)
        return self.entry(slot) if slot >= 0 else None

    def lookup_by_position(self, position: int) -> OffsetPosition | None:
        """The entry with the largest position <= ``position``; None when there is none."""
        slot = self._largest_lower_bound(position, _INT32, 4)
        return self.entry(slot) if slot >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        slot = self._largest_lower_bound(offset - self.base_offset - 1, _INT32, 0)
        self._truncate_to_entries(slot + 1)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise :class:`CorruptIndexError` unless the entries are whole, strictly increasing in both columns,
        not below the base offset and (given ``log_size``) pointing inside the log."""
        self._check_shape()
        offsets, positions = _int32_columns(self._entries_bytes())
        if not offsets:
            return
        if offsets[0] < 0 or positions[0] < 0:
            raise CorruptIndexError(f"{self._path}: first entry ({offsets[0]}, {positions[0]}) is negative")
        if not _strictly_increasing(offsets) or not _strictly_increasing(positions):
            raise CorruptIndexError(f"{self._path}: entries are not strictly increasing")
        if log_size is not None and positions[-1] >= log_size:
            raise CorruptIndexError(f"{self._path}: last position {positions[-1]} beyond log size {log_size}")


class TimeIndex(_SparseIndex):
    """Timestamp -> offset, an entry whenever the segment's largest timestamp grows at an index interval."""

    ENTRY_SIZE = 12
    _ENTRY = _TIME_ENTRY

    @property
    def is_full(self) -> bool:
        """Full one entry early: the last slot is kept for the entry written when the segment rolls."""
        if not self._loaded:
            self._load()
        return self._entries >= self._capacity // self.ENTRY_SIZE - 1

    def entry(self, n: int) -> TimestampOffset:
        timestamp, relative = self._raw_entry(n)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def last_entry(self) -> TimestampOffset | None:
        if not self.entries:
            return None
        timestamp, relative = self._last_raw_entry()
        return TimestampOffset(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's (and >= 0).

        ``skip_full_check`` lets the roll entry use the reserved last slot. Returns whether it was added.
        """
        # With each offset index entry (every batch of 4 KiB or more): entries, _last_raw_entry and
        # _add_pending inline, the same steps without their calls.
        if not self._loaded:
            self._load()
        n = self._entries
        relative = offset - self.base_offset
        if n:
            last = self._last
            if last is None:
                last = self._last_raw_entry()
            last_timestamp, last_relative = last
            if relative < last_relative:
                raise ValueError(
                    f"time index offset {offset} below the last entry's {self.base_offset + last_relative}"
                )
            if timestamp <= last_timestamp:
                return False
        elif timestamp < 0:
            return False
        max_entries = self._capacity // 12  # ENTRY_SIZE 12
        if n >= (max_entries if skip_full_check else max_entries - 1):
            return False
        if not 0 <= relative <= _INT32_MAX:
            self._check_append(relative)  # raises
        fields = (timestamp, relative)
        pending = self._pending
        pending += _TIME_ENTRY.pack(timestamp, relative)
        self._entries = n + 1
        self._last = fields
        if len(pending) >= _PENDING_BYTES:
            self.write_pending()
        return True

    def lookup(self, target_timestamp: int) -> TimestampOffset | None:
        """The entry with the largest timestamp <= ``target_timestamp``; None when there is none."""
        slot = self._largest_lower_bound(target_timestamp, _INT64, 0)
        return self.entry(slot) if slot >= 0 else None

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        slot = self._largest_lower_bound(offset - self.base_offset - 1, _INT32, 8)
        self._truncate_to_entries(slot + 1)

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` unless entries are whole, timestamps non-negative and strictly
        increasing, offsets non-decreasing and not below the base offset."""
        self._check_shape()
        rows = list(struct.iter_unpack(">qi", self._entries_bytes()))
        if not rows:
            return
        timestamps = [row[0] for row in rows]
        offsets = [row[1] for row in rows]
        if timestamps[0] < 0 or offsets[0] < 0:
            raise CorruptIndexError(f"{self._path}: first entry {rows[0]} is negative")
        if not _strictly_increasing(timestamps) or not all(map(operator.le, offsets, offsets[1:])):
            raise CorruptIndexError(f"{self._path}: entries are not increasing")
