"""A slow disk made by a test: ext4 on a loop device whose writes the kernel throttles to a few MiB/s, for
the tests of a broker writing faster than its disk takes it.

Mechanism (root only; the test is skipped with the reason otherwise):

- **Throughput**: cgroup v1's block throttle (``blkio.throttle.write_bps_device``) set in the root blkio
  cgroup for the loop device. Every write bio to that device is throttled, whoever issues it: an fsync
  in the broker's flush thread, and the kernel flusher's writeback of the page cache (charged to the root
  cgroup). The rule names the loop device only, so nothing else on the machine is slowed. cgroup v2's
  ``io.max`` cannot be set on the root group, and this kernel has no device-mapper (dm-delay).
- **Dirty pages**: by default the page cache would absorb gigabytes of writes (``vm.dirty_ratio``) before
  the disk's speed shows, so the device's ``strict_limit`` and ``max_bytes`` (``/sys/class/bdi/<maj:min>``)
  keep its dirty pages to a few MiB: a ``write(2)`` to the filesystem then waits in
  ``balance_dirty_pages`` for writeback, as it does on a real slow disk once the cache is full.

Invariants: on leaving the block the throttle rule is removed and the device's dirty limits restored
before the filesystem is unmounted (unmount writes back at full speed), and the loop device is detached;
a setup step that fails undoes the steps before it and skips the test with the reason.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .small_fs import loop_ext4

__all__ = ["BLKIO_ROOT", "slow_loop_ext4"]

BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")


def _device_of(mount: Path) -> str:
    """``major:minor`` of the block device mounted at ``mount``."""
    dev = os.stat(mount).st_dev
    return f"{os.major(dev)}:{os.minor(dev)}"


@contextlib.contextmanager
def _throttled_writes(device: str, bytes_per_second: int) -> Iterator[None]:
    rule = BLKIO_ROOT / "blkio.throttle.write_bps_device"
    if not rule.exists():
        pytest.skip(f"no cgroup v1 blkio throttle ({rule}): cannot make a slow disk here")
    try:
        rule.write_text(f"{device} {bytes_per_second}\n")
    except OSError as exc:
        pytest.skip(f"cannot throttle writes to {device}: {exc}")
    try:
        yield
    finally:
        rule.write_text(f"{device} 0\n")  # 0 removes the rule


@contextlib.contextmanager
def _small_dirty_limit(device: str, max_dirty_bytes: int) -> Iterator[None]:
    bdi = Path("/sys/class/bdi") / device
    if not (bdi / "max_bytes").exists() or not (bdi / "strict_limit").exists():
        pytest.skip(f"no per-device dirty limits ({bdi}/max_bytes, strict_limit: Linux 6.2+)")
    saved_ratio = (bdi / "max_ratio").read_text().strip()
    saved_strict = (bdi / "strict_limit").read_text().strip()
    try:
        (bdi / "max_bytes").write_text(f"{max_dirty_bytes}\n")
        (bdi / "strict_limit").write_text("1\n")
        yield
    finally:
        (bdi / "strict_limit").write_text(f"{saved_strict}\n")
        (bdi / "max_ratio").write_text(f"{saved_ratio}\n")


@contextlib.contextmanager
def slow_loop_ext4(
    mount: Path,
    image: Path,
    *,
    size_mb: int = 256,
    write_bytes_per_second: int = 4 << 20,
    max_dirty_bytes: int = 4 << 20,
) -> Iterator[Path]:
    """A fresh ext4 of ``size_mb`` at ``mount`` on which writes reach the device at
    ``write_bytes_per_second`` and at most ``max_dirty_bytes`` of written data wait in the page cache."""
    with loop_ext4(mount, image, size_mb=size_mb) as mounted:
        device = _device_of(mounted)
        with _throttled_writes(device, write_bytes_per_second), _small_dirty_limit(device, max_dirty_bytes):
            yield mounted
