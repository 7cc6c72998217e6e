"""Small helpers for test subprocesses: wait until the kernel shows a signalled process stopped or running.

Invariant: a signal is delivered asynchronously, so after SIGSTOP/SIGCONT the caller waits here until
``/proc/<pid>/stat`` shows the new state (Linux only; elsewhere this returns at once).
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["wait_stopped"]


def wait_stopped(pid: int, stopped: bool, timeout: float) -> None:
    """Until process ``pid`` is stopped (``stopped``) or running again; a zombie or a gone process counts
    as done. Raises :class:`RuntimeError` after ``timeout`` seconds."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = stat.read_text()
        except OSError:
            return  # no /proc, or the process is gone
        state = text[text.rindex(")") + 2]
        if state == "Z" or (state == "T") == stopped:
            return
        time.sleep(0.005)
    raise RuntimeError(f"process {pid} was not {'stopped' if stopped else 'running'} after the signal")
