"""The log dirs an I/O error took offline (Kafka's ``LogDirFailureChannel``).

Invariants:

- A log dir goes offline on the first I/O error of one of its files other than a full disk (ENOSPC,
  EDQUOT: produce is refused with KAFKA_STORAGE_ERROR and everything stored stays readable, the disk may
  get space back) and stays offline until the broker restarts: a disk that answered EIO once is not
  trusted again (Kafka's rule).
- Offline is per log dir, never per file: every partition whose log lives there answers
  KAFKA_STORAGE_ERROR, the broker's other log dirs carry on.
- Pure bookkeeping: no I/O here.
"""

from __future__ import annotations

import errno
from pathlib import Path

__all__ = ["FULL_DISK_ERRNOS", "LogDirFailures", "takes_dir_offline"]

FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def takes_dir_offline(exc: BaseException) -> bool:
    """Whether ``exc`` (or the OSError it was raised from) is an I/O error that takes its log dir offline."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen.errno not in FULL_DISK_ERRNOS
        seen = seen.__cause__
    return False


class LogDirFailures:
    def __init__(self) -> None:
        self._offline: dict[Path, str] = {}

    def fail(self, log_dir: Path, reason: str) -> bool:
        """Take ``log_dir`` offline; True the first time (the caller logs it once)."""
        if log_dir in self._offline:
            return False
        self._offline[log_dir] = reason
        return True

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self._offline

    @property
    def offline(self) -> dict[Path, str]:
        """Each offline log dir and the error that took it offline."""
        return dict(self._offline)

    def __bool__(self) -> bool:
        return bool(self._offline)
