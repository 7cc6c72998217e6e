"""The open-files limit (RLIMIT_NOFILE) a broker needs: one descriptor per client connection, plus segment
files and indexes.

Invariant: :func:`raise_open_files_limit` raises the soft limit to the hard limit (never above it, never
lowering it) and reports both; it is called once when a broker starts, before its listeners accept, so a
broker started from a shell whose soft limit is 1,024 still serves 10,000 connections when the hard limit
allows. Where the platform has no ``resource`` module it does nothing.
"""

from __future__ import annotations

import logging

__all__ = ["raise_open_files_limit"]

log = logging.getLogger("tidelog.broker")


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
