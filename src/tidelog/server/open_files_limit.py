"""The open-files limit (RLIMIT_NOFILE) a broker needs: one descriptor per client connection, plus segment
files and indexes; and how many segments may keep their files open under it.

Invariants:

* :func:`raise_open_files_limit` raises the soft limit to the hard limit (never above it, never lowering it)
  and reports both; a broker calls it when it is built, before its logs load and before its listeners
  accept, so a broker started from a shell whose soft limit is 1,024 still serves 10,000 connections when
  the hard limit allows. Where the platform has no ``resource`` module it does nothing.
* :func:`default_max_open_segments` (``log.max.open.segments`` when unset) gives segments at most half the
  descriptors of the soft limit and half the memory maps of ``vm.max_map_count``, at
  :data:`DESCRIPTORS_PER_SEGMENT` and :data:`MAPS_PER_SEGMENT` each; the other halves are left to client
  connections, checkpoints, the interpreter and its libraries. So descriptors and maps stay bounded by the
  process's own limits, and every partition being written keeps its active segment open (no ``open`` per
  append) as long as the limits allow: 2,500 segments at a limit of 20,000 descriptors, 16,382 (the map
  count's bound) from a limit of 131,072 up.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from tidelog.storage.log_manager import DEFAULT_MAX_OPEN_SEGMENTS

__all__ = [
    "DEFAULT_MAX_MAP_COUNT",
    "DESCRIPTORS_PER_SEGMENT",
    "MAPS_PER_SEGMENT",
    "default_max_open_segments",
    "max_map_count",
    "max_open_segments",
    "raise_open_files_limit",
]

log = logging.getLogger("tidelog.broker")

DESCRIPTORS_PER_SEGMENT: Final = 4
"""At most per open segment: its ``.log``, the descriptors its two index mappings hold, its ``.txnindex``."""
MAPS_PER_SEGMENT: Final = 2
"""At most per open segment: the offset and time index mappings."""
DEFAULT_MAX_MAP_COUNT: Final = 65_530
"""Linux's default ``vm.max_map_count``, assumed where it cannot be read."""
_MAX_MAP_COUNT_PATH: Final = Path("/proc/sys/vm/max_map_count")
_UNKNOWN_OPEN_FILES: Final = 1 << 20
"""Taken for an unlimited soft limit (as :func:`raise_open_files_limit` targets)."""


def max_map_count() -> int:
    """The kernel's per-process memory map limit (``vm.max_map_count``); Linux's default where unreadable."""
    try:
        return int(_MAX_MAP_COUNT_PATH.read_text())
    except (OSError, ValueError):
        return DEFAULT_MAX_MAP_COUNT


def default_max_open_segments(open_files: int, map_count: int) -> int:
    """Segments that may keep their files open: half of ``open_files`` descriptors and half of ``map_count``
    memory maps (see the module docstring), at least one."""
    by_descriptors = open_files // 2 // DESCRIPTORS_PER_SEGMENT
    by_maps = map_count // 2 // MAPS_PER_SEGMENT
    return max(1, min(by_descriptors, by_maps))


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; ``(soft, hard)`` after, None where unsupported."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit from %s to %s: %s", soft, target, exc)
            return soft, hard
        log.info("raised the open-files limit (RLIMIT_NOFILE) from %s to %s", soft, target)
        soft = target
    return soft, hard


def max_open_segments(configured: int | None) -> int:
    """Raise the open-files limit, then ``log.max.open.segments``: ``configured`` when set, else derived
    from the limit and ``vm.max_map_count`` (:func:`default_max_open_segments`) and said in the log."""
    limits = raise_open_files_limit()
    if configured is not None:
        return configured
    if limits is None:  # pragma: no cover - not POSIX
        return DEFAULT_MAX_OPEN_SEGMENTS
    import resource

    soft = limits[0] if limits[0] != resource.RLIM_INFINITY else _UNKNOWN_OPEN_FILES
    maps = max_map_count()
    bound = default_max_open_segments(soft, maps)
    log.info(
        "log.max.open.segments unset: %s segments keep their files open (open-files limit %s, "
        "vm.max_map_count %s)",
        bound,
        soft,
        maps,
    )
    return bound
