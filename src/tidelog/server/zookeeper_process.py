"""A standalone ZooKeeper server from Debian's ``zookeeper`` package: its ``zoo.cfg``, its java command line,
its ``ruok`` probe, and a foreground runner for ``tidelog zookeeper``.

The server is ``java -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
org.apache.zookeeper.server.ZooKeeperServerMain <zoo.cfg>``: Debian's ``zookeeper.jar`` names its other jars
(jute, netty, slf4j-api, ...) in its manifest's ``Class-Path``; slf4j-simple (from ``libslf4j-java``, a
dependency of the package) is the logging binding, without which slf4j prints three lines of "no binding"
warnings and ZooKeeper logs nothing. No system service is involved: the Debian ``zookeeper`` package ships
none (its init script is in ``zookeeperd``, which tidelog never installs).

Invariants:

- :func:`zoo_cfg_text` always writes ``admin.enableServer=false`` (no Jetty admin port to collide on) and
  whitelists only the four-letter words tidelog uses (``ruok``, ``stat``, ``srvr``, ``mntr``, ``conf``).
- ZooKeeper cannot bind port 0 and tell us the port: callers pick a free port (:func:`free_port`) and
  retry when the bind races.
- :func:`run_zookeeper` returns only when the java process has exited; SIGINT and SIGTERM sent to this
  process become one SIGTERM to java (SIGKILL after ``stop_timeout``), so Ctrl-C never leaves a JVM behind.
  On Linux a SIGKILL of this process kills java too (``PR_SET_PDEATHSIG``): no orphan holds the port.
- Missing java or a missing jar is reported as :class:`ZooKeeperNotInstalledError` naming the fix, before
  anything is started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

__all__ = [
    "DEFAULT_MAX_SESSION_TIMEOUT_MS",
    "DEFAULT_TICK_TIME_MS",
    "SLF4J_BINDING",
    "ZOOKEEPER_JAR",
    "ZOOKEEPER_MAIN",
    "ZooKeeperNotInstalledError",
    "find_java",
    "four_letter_word",
    "free_port",
    "is_ok",
    "is_serving",
    "run_zookeeper",
    "write_zoo_cfg",
    "zoo_cfg_text",
    "zookeeper_command",
]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = "install it with scripts/setup.sh test (or: apt-get install zookeeper)"

# tickTime is ZooKeeper's clock: sessions may be as short as 2 ticks and expire on tick boundaries, so a
# short tick lets tests use short session timeouts (Kafka's zookeeper.session.timeout.ms) and see expiry
# promptly. The ceiling is generous so that Kafka's default 18 s session is accepted as asked.
DEFAULT_TICK_TIME_MS = 500
DEFAULT_MAX_SESSION_TIMEOUT_MS = 120_000
FOUR_LETTER_WORDS = ("ruok", "stat", "srvr", "mntr", "conf")


class ZooKeeperNotInstalledError(RuntimeError):
    """java or Debian's ZooKeeper jar is missing; the message says how to install it."""


def find_java(java: str | None = None) -> str:
    """The java executable: ``java`` if given, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    if java is not None:
        if shutil.which(java) is None:
            raise ZooKeeperNotInstalledError(f"java not found at {java}; {INSTALL_HINT}")
        return java
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ZooKeeperNotInstalledError(f"java not found (ZooKeeper runs on Java 17); {INSTALL_HINT}")
    return found


def zookeeper_command(
    config_path: Path,
    *,
    java: str | None = None,
    jar: Path = ZOOKEEPER_JAR,
    log_level: str = "info",
    heap_mb: int = 256,
) -> list[str]:
    """The argv that runs a standalone ZooKeeper on ``config_path`` (absolute, so ZooKeeper does not warn).

    ``log_level`` is slf4j-simple's (``trace``, ``debug``, ``info``, ``warn``, ``error``, ``off``); logs go
    to stderr. A small heap and the serial collector keep a test's ZooKeeper light on a small machine.
    """
    if not jar.is_file():
        raise ZooKeeperNotInstalledError(f"ZooKeeper's jar {jar} is missing; {INSTALL_HINT}")
    java_bin = find_java(java)
    classpath = [str(jar)]
    if SLF4J_BINDING.is_file():
        classpath.append(str(SLF4J_BINDING))
    return [
        java_bin,
        f"-Xmx{heap_mb}m",
        "-XX:+UseSerialGC",
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        ":".join(classpath),
        ZOOKEEPER_MAIN,
        str(config_path.absolute()),
    ]


def zoo_cfg_text(
    *,
    data_dir: Path,
    port: int,
    host: str = "127.0.0.1",
    tick_time_ms: int = DEFAULT_TICK_TIME_MS,
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
    extra: Mapping[str, str] | None = None,
) -> str:
    """A standalone ``zoo.cfg``: data in ``data_dir``, clients on ``host:port``, no admin server."""
    settings = {
        "tickTime": str(tick_time_ms),
        "dataDir": str(data_dir.absolute()),
        "clientPortAddress": host,
        "clientPort": str(port),
        "admin.enableServer": "false",
        "4lw.commands.whitelist": ",".join(FOUR_LETTER_WORDS),
        "minSessionTimeout": str(2 * tick_time_ms),
        "maxSessionTimeout": str(max_session_timeout_ms),
        "maxClientCnxns": "0",  # no per-address cap: a test cluster's brokers all come from one address
        "autopurge.snapRetainCount": "3",
        "autopurge.purgeInterval": "1",
        **(extra or {}),
    }
    lines = ["# written by tidelog: a standalone ZooKeeper for a tidelog cluster"]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def write_zoo_cfg(path: Path, text: str) -> Path:
    """Write a ``zoo.cfg`` (:func:`zoo_cfg_text`) to ``path`` atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text)
    scratch.replace(path)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now (another process may still take it before ZooKeeper binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def four_letter_word(
    host: str,
    port: int,
    word: str,
    *,
    timeout: float = 2.0,
    connect: Callable[[str, int, float], socket.socket] | None = None,
) -> str:
    """Send a four-letter word (``ruok``, ``stat``, ``srvr``, ``mntr``) and return the whole answer.

    ``connect(host, port, timeout)`` makes the connection (default :func:`socket.create_connection`); a
    network-namespace helper passes its own. Raises :class:`OSError` when nothing answers.
    """
    opener = connect or (lambda h, p, t: socket.create_connection((h, p), timeout=t))
    with opener(host, port, timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def is_ok(host: str, port: int, *, timeout: float = 1.0) -> bool:
    """``ruok`` answered ``imok``: the process is up. Not yet ready: see :func:`is_serving`."""
    try:
        return four_letter_word(host, port, "ruok", timeout=timeout) == "imok"
    except OSError:
        return False


def is_serving(host: str, port: int, *, data_dir: Path | None = None, timeout: float = 1.0) -> bool:
    """The server answers clients: ``ruok`` gives ``imok`` and ``srvr`` reports its mode; with ``data_dir``,
    ``conf`` also shows that the server answering on this port is the one keeping its data there.

    ``imok`` alone comes early: while ZooKeeper still loads its database, ``srvr`` answers "This ZooKeeper
    instance is not currently serving requests" and a client's session would be refused. And the port
    alone does not say whose server answers: a second ZooKeeper started on a taken port is still starting
    (it has not tried to bind yet) while the first one answers every probe.
    """
    try:
        if four_letter_word(host, port, "ruok", timeout=timeout) != "imok":
            return False
        if "Mode: " not in four_letter_word(host, port, "srvr", timeout=timeout):
            return False
        if data_dir is None:
            return True
        expected = f"dataDir={(data_dir.absolute() / 'version-2')}"
        return expected in four_letter_word(host, port, "conf", timeout=timeout).splitlines()
    except OSError:
        return False


def run_zookeeper(
    *,
    data_dir: Path,
    port: int,
    host: str = "127.0.0.1",
    tick_time_ms: int = DEFAULT_TICK_TIME_MS,
    max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
    log_level: str = "warn",
    startup_timeout: float = 60.0,
    stop_timeout: float = 10.0,
    on_ready: Callable[[str], None] | None = None,
    log: IO[str] | None = None,
    java: str | None = None,
) -> int:
    """Run ZooKeeper in the foreground until it exits or this process gets SIGINT/SIGTERM.

    Writes ``<data_dir>/zoo.cfg``, starts java, calls ``on_ready("host:port")`` once it serves clients
    (:func:`is_serving`). Returns 0 after a requested stop, 1 if ZooKeeper did not come up or exited by itself (its
    exit is reported on ``log``, default stderr). Raises :class:`ZooKeeperNotInstalledError` before
    starting anything when java or the jar is missing.
    """
    out = log or sys.stderr
    data_dir.mkdir(parents=True, exist_ok=True)
    config_path = write_zoo_cfg(
        data_dir / "zoo.cfg",
        zoo_cfg_text(
            data_dir=data_dir,
            port=port,
            host=host,
            tick_time_ms=tick_time_ms,
            max_session_timeout_ms=max_session_timeout_ms,
        ),
    )
    argv = zookeeper_command(config_path, java=java, log_level=log_level)
    stop_requested: list[int] = []

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # Its own session: a terminal's Ctrl-C reaches only us, and we stop java exactly once. A kill -9
        # of this process is one of ZooKeeper too (as with Kafka's script, which execs java): an orphaned
        # java would keep the port and the data directory, and the next start would fail on both.
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent(),  # noqa: PLW1509 - the CLI starts java before any thread
        )
        try:
            return _supervise(
                process, host, port, data_dir, stop_requested, startup_timeout, stop_timeout, on_ready, out
            )
        finally:
            _stop(process, stop_timeout)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child SIGKILLed when the thread that started it ends (Linux's
    ``PR_SET_PDEATHSIG``; :func:`run_zookeeper` runs it on the caller's thread, which supervises until
    the end); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the prctl took effect
            os._exit(1)

    return preexec


def _supervise(
    process: subprocess.Popen[bytes],
    host: str,
    port: int,
    data_dir: Path,
    stop_requested: Sequence[int],
    startup_timeout: float,
    stop_timeout: float,
    on_ready: Callable[[str], None] | None,
    out: IO[str],
) -> int:
    deadline = time.monotonic() + startup_timeout
    ready = False
    while not stop_requested:
        code = process.poll()
        if code is not None:
            what = "exited" if ready else "exited before it was ready"
            print(f"ZooKeeper {what} with code {code}", file=out)
            return 1
        if not ready:
            if is_serving(host, port, data_dir=data_dir, timeout=0.5):
                ready = True
                if on_ready is not None:
                    on_ready(f"{host}:{port}")
            elif time.monotonic() >= deadline:
                print(f"ZooKeeper did not serve on {host}:{port} within {startup_timeout:g} s", file=out)
                return 1
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1 if not ready else 0.5)
    _stop(process, stop_timeout)
    return 0


def _stop(process: subprocess.Popen[bytes], stop_timeout: float) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
        process.terminate()
    try:
        process.wait(timeout=stop_timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
