"""Small filesystems made by a test, for disk-full and power-loss scenarios: a tmpfs of a given size, and
an ext4 filesystem on a loop device whose block-level content can be copied as a power loss leaves it.

Invariants: every helper either gives a mounted, empty filesystem and unmounts it (and detaches what it
attached) when its block ends, or skips the test with the reason (not root, no tmpfs, no loop devices, no
mkfs.ext4); never a half-made setup. Remounting a tmpfs with a larger ``size=`` frees space without
touching its files.

A failed disk (:func:`shut_down_ext4`): ext4's shutdown ioctl (what xfstests' ``godown`` uses) makes every
later read, write, open and fsync on that filesystem fail with EIO, as a dead disk does. Device-mapper's
error and flakey targets would do it at the block level, but this kernel has no device-mapper.

Power loss (:func:`power_loss_copy`): the ext4 filesystem is mounted with ``commit=600``, so neither its
journal nor its data reach the loop device unless an fsync (or the kernel's writeback of pages dirty for
more than ``vm.dirty_expire_centisecs``, 30 s by default) sends them; a copy of the backing image taken
after the writer was killed is the device as a power cut would leave it: what was fsynced, and whatever
writeback happened to send. Mounted, ext4 replays its journal as after a real power loss. Device-mapper
(dm-flakey's drop_writes, dm-log-writes) would be the exact tool but this kernel has no device-mapper.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["grow_tmpfs", "loop_ext4", "power_loss_copy", "shut_down_ext4", "small_tmpfs"]


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


def _need_root_and(*tools: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(
            "a loop-device filesystem needs root (losetup, mount); run as root for the power-loss test"
        )
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup.sh test installs e2fsprogs and mount)")


@contextlib.contextmanager
def loop_ext4(mount: Path, image: Path, *, size_mb: int = 48, fresh: bool = True) -> Iterator[Path]:
    """ext4 on ``image`` (made unless ``fresh`` is False: then an existing image, its journal replayed)
    attached to a loop device and mounted at ``mount`` with ``commit=600``."""
    _need_root_and("losetup", "mkfs.ext4", "mount", "umount")
    if fresh:
        with image.open("wb") as f:
            f.truncate(size_mb << 20)
        made = _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
        if made.returncode != 0:
            pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    attached = _run("losetup", "--find", "--show", str(image))
    if attached.returncode != 0:
        pytest.skip(f"no loop device: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    try:
        mount.mkdir(parents=True, exist_ok=True)
        mounted = _run("mount", "-t", "ext4", "-o", "commit=600", device, str(mount))
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount ext4 from {device}: {mounted.stderr.strip()}")
        try:
            yield mount
        finally:
            _run("umount", str(mount))
    finally:
        _run("losetup", "-d", device)


def power_loss_copy(image: Path, copy: Path) -> None:
    """The loop device's content now, without the mounted filesystem's dirty pages (call it after the
    writer was killed, before unmounting, which would write them)."""
    shutil.copyfile(image, copy)


EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def shut_down_ext4(mount: Path) -> None:
    """From now on every I/O on the ext4 filesystem at ``mount`` fails with EIO (until unmounted)."""
    import fcntl
    import struct

    fd = os.open(mount, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


def enospc_on_writes_to(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """``os.write`` to a file whose name ends with ``suffix`` fails with ENOSPC (a disk that filled just
    there), every other write goes through; ``monkeypatch.undo()`` gives the space back."""
    real_write = os.write

    def full_disk(fd: int, data: object) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            raise OSError(28, "No space left on device")
        return real_write(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "write", full_disk)
