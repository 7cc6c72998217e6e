"""The checks of ``tidelog doctor``: each looks at one thing a broker needs and says what to fix.

Invariants: a check never changes anything it inspects (a writability probe creates and removes one
temporary file; a missing log dir is not created); each returns :class:`Check` results with a status
(OK, WARN, FAIL) and, unless OK, a fix. FAIL means the broker will not start or will lose data; WARN means
it will start but something should be looked at. Network checks use short timeouts.
"""

from __future__ import annotations

import enum
import os
import resource
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidelog.server.config import BrokerConfig, ConfigError, load_broker_config
from tidelog.server.config.metrics_listener import parse_metrics_listener

__all__ = ["Check", "Status", "run_checks"]

GIB: Final = 1 << 30
FILES_PER_SEGMENT: Final = 3
"""A segment's .log, .index and .timeindex (what a broker may hold open)."""
MAPS_PER_SEGMENT: Final = 2
"""A segment's offset and time indexes are memory-mapped."""
FD_HEADROOM: Final = 1024
"""Descriptors for connections, checkpoints and the rest, on top of the segments'."""


class Status(enum.Enum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class Check:
    status: Status
    name: str
    detail: str
    fix: str = ""


def run_checks(
    config_file: Path | None, overrides: Sequence[tuple[str, str]], *, min_free_bytes: int = GIB
) -> list[Check]:
    """Every check, in order; the config's own check first (nothing else runs without a config)."""
    try:
        config, warnings = load_broker_config(config_file, overrides)
    except ConfigError as exc:
        key = f" ({exc.key})" if exc.key else ""
        return [Check(Status.FAIL, "config", str(exc), f"correct the value of the key named{key}")]
    except OSError as exc:
        return [
            Check(Status.FAIL, "config", f"cannot read {config_file}: {exc.strerror}", "give a readable file")
        ]
    where = str(config_file) if config_file is not None else "defaults and --set"
    checks = [Check(Status.OK, "config", f"parses ({where})")]
    checks += [Check(Status.WARN, "config", warning, "remove or correct the key") for warning in warnings]
    segments = 0
    partitions = 0
    for log_dir in config.log_dirs:
        checks += _log_dir(Path(log_dir), min_free_bytes)
        dir_partitions, dir_segments = _count(Path(log_dir))
        partitions += dir_partitions
        segments += dir_segments
    checks.append(_fd_limit(partitions, segments))
    checks.append(_max_map_count(segments))
    checks += _clock()
    if config.zookeeper_connect:
        checks.append(_zookeeper(config.zookeeper_connect))
    checks += _ports(config)
    return checks


def _log_dir(path: Path, min_free_bytes: int) -> Iterator[Check]:
    name = f"log dir {path}"
    if not path.exists():
        parent = path
        while not parent.exists():
            parent = parent.parent
        if parent.is_dir() and _writable(parent):
            yield Check(
                Status.WARN, name, f"missing; the broker will create it (in {parent})", f"mkdir -p {path}"
            )
            path = parent
        else:
            yield Check(
                Status.FAIL,
                name,
                f"missing, and cannot be created: {parent} is not a writable directory",
                f"create {path} as a directory the broker's user can write",
            )
            return
    elif not path.is_dir():
        yield Check(
            Status.FAIL, name, "exists but is not a directory", "remove it or point log.dirs elsewhere"
        )
        return
    elif not _writable(path):
        yield Check(
            Status.FAIL,
            name,
            "not writable by this user",
            f"chown/chmod {path} so the broker's user can write it",
        )
        return
    else:
        mode = path.stat().st_mode
        if mode & stat.S_IWOTH:
            yield Check(
                Status.WARN, name, f"writable by everyone (mode {mode & 0o7777:o})", f"chmod o-w {path}"
            )
        else:
            yield Check(Status.OK, name, f"writable (mode {mode & 0o7777:o})")
    usage = shutil.disk_usage(path)
    free = f"{usage.free / GIB:.1f} GiB free of {usage.total / GIB:.1f} GiB"
    if usage.free < min(min_free_bytes, 100 << 20):
        yield Check(Status.FAIL, f"disk space {path}", free, "free disk space or move log.dirs")
    elif usage.free < min_free_bytes or usage.free < usage.total * 0.05:
        yield Check(Status.WARN, f"disk space {path}", free, "free disk space or lower retention")
    else:
        yield Check(Status.OK, f"disk space {path}", free)


def _writable(path: Path) -> bool:
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".tidelog-doctor-"):
            return True
    except OSError:
        return False


def _count(log_dir: Path) -> tuple[int, int]:
    """(partition directories, segment files) under ``log_dir``."""
    if not log_dir.is_dir():
        return 0, 0
    partitions = segments = 0
    for child in log_dir.iterdir():
        if child.is_dir() and "-" in child.name:
            partitions += 1
            segments += sum(1 for f in child.iterdir() if f.suffix == ".log")
    return partitions, segments


def _fd_limit(partitions: int, segments: int) -> Check:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = segments * FILES_PER_SEGMENT + FD_HEADROOM
    detail = f"soft limit {soft}; {partitions} partitions, {segments} segments need about {needed}"
    if soft != resource.RLIM_INFINITY and soft < needed:
        return Check(
            Status.WARN,
            "open files limit",
            detail,
            f"raise it: ulimit -n {max(needed * 2, 100_000)} (or LimitNOFILE=)",
        )
    return Check(Status.OK, "open files limit", detail)


def _max_map_count(segments: int) -> Check:
    try:
        limit = int(Path("/proc/sys/vm/max_map_count").read_text().strip())
    except (OSError, ValueError):
        return Check(Status.OK, "vm.max_map_count", "not readable on this system; skipped")
    needed = segments * MAPS_PER_SEGMENT + 1000
    detail = f"{limit}; {segments} segments map about {needed}"
    if limit < needed:
        return Check(
            Status.WARN, "vm.max_map_count", detail, f"sysctl -w vm.max_map_count={max(needed * 2, 262144)}"
        )
    return Check(Status.OK, "vm.max_map_count", detail)


def _clock() -> Iterator[Check]:
    wall_before, mono_before = time.time(), time.monotonic()
    time.sleep(0.05)
    wall_step, mono_step = time.time() - wall_before, time.monotonic() - mono_before
    year = time.gmtime().tm_year
    if year < 2020:
        yield Check(
            Status.FAIL,
            "clock",
            f"the wall clock says {year}",
            "set the system time (timestamps and retention use it)",
        )
    elif abs(wall_step - mono_step) > 0.5:
        yield Check(Status.WARN, "clock", "the wall clock jumped while checked", "check NTP / time sync")
    else:
        yield Check(Status.OK, "clock", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if shutil.which("timedatectl") is None:
        return
    try:
        synced = subprocess.run(
            ["timedatectl", "show", "-p", "NTPSynchronized", "--value"],
            capture_output=True,
            text=True,
            timeout=3,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return
    if synced == "yes":
        yield Check(Status.OK, "NTP", "synchronized")
    elif synced == "no":
        yield Check(Status.WARN, "NTP", "not synchronized", "enable time sync (timedatectl set-ntp true)")


def _zookeeper(connect: str) -> Check:
    hosts = connect.split("/", 1)[0]
    tried = []
    for entry in hosts.split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host:
            host, port = port, "2181"
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
                return Check(Status.OK, "ZooKeeper", f"{host}:{port} reachable")
        except (OSError, ValueError) as exc:
            tried.append(f"{host}:{port} ({exc})")
    return Check(
        Status.FAIL,
        "ZooKeeper",
        "unreachable: " + ", ".join(tried),
        "start ZooKeeper or correct zookeeper.connect",
    )


def _ports(config: BrokerConfig) -> Iterator[Check]:
    endpoints = [(str(listener), listener.host, listener.port) for listener in config.listeners]
    metrics = parse_metrics_listener(config.metrics_listener)
    if metrics is not None:
        endpoints.append((f"metrics.listener {metrics}", metrics.host, metrics.port))
    for name, host, port in endpoints:
        if port == 0:
            yield Check(Status.OK, f"port {name}", "port 0: any free port")
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                yield Check(
                    Status.FAIL,
                    f"port {name}",
                    f"cannot bind: {exc.strerror}",
                    "stop what uses the port or change it",
                )
                continue
        yield Check(Status.OK, f"port {name}", "free")
