"""A real ZooKeeper in a subprocess, for tests: start, wait for ``imok``, kill, restart, pause, expire a session.

Invariants:

- The server is Debian's ZooKeeper jar run by java (:mod:`tidelog.server.zookeeper_process`) with a
  generated ``zoo.cfg`` in :attr:`ZooKeeper.data_dir`; :meth:`ZooKeeper.start` returns only once it
  serves clients (:func:`~tidelog.server.zookeeper_process.is_serving`: ``imok``, a mode in ``srvr``, and
  our data directory in ``conf``, so another server on a taken port is never mistaken for ours), or raises :class:`ZooKeeperError` carrying the tail of its log (a process that dies
  during startup is reported at once, not at the timeout). A missing java or jar raises
  :class:`~tidelog.server.zookeeper_process.ZooKeeperNotInstalledError` naming the fix.
- Port 0 (the default) picks a free port; a restart keeps the port and the data directory, so every
  persistent znode survives :meth:`ZooKeeper.kill` + :meth:`ZooKeeper.restart` (ZooKeeper fsyncs its
  transaction log before it answers a write), and sessions whose timeout has not passed are still alive.
- :meth:`ZooKeeper.stop` and :meth:`ZooKeeper.close` never leave a process behind (SIGCONT, SIGTERM, then
  SIGKILL after ``stop_timeout``); ZooKeepers still running at interpreter exit are killed.
- ``command_prefix`` (e.g. ``["ip", "netns", "exec", "ns1"]``) runs the server inside a network namespace;
  the prefix must exec the server in place (same pid), as ``ip netns exec`` does, so signals reach java.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from tidelog.server.zookeeper_process import (
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    DEFAULT_TICK_TIME_MS,
    four_letter_word,
    free_port,
    is_ok,
    is_serving,
    write_zoo_cfg,
    zoo_cfg_text,
    zookeeper_command,
)
from tidelog.testing._process import wait_stopped

__all__ = ["ZooKeeper", "ZooKeeperError", "zookeeper"]

_RESTART_SAME_PORT_SECONDS = 10.0
_LIVE: weakref.WeakSet[ZooKeeper] = weakref.WeakSet()


class ZooKeeperError(RuntimeError):
    """ZooKeeper did not start (it exited or timed out); the message ends with its log."""


class ZooKeeper:
    """One standalone ZooKeeper process. Use as a context manager, or call :meth:`start` and :meth:`close`."""

    def __init__(
        self,
        *,
        data_dir: Path | str | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        run_dir: Path | str | None = None,
        command_prefix: Sequence[str] = (),
        extra_config: Mapping[str, str] | None = None,
    ) -> None:
        self._owns_data_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="tidelog-zk-"))
        )
        self._owns_run_dir = run_dir is None
        self._run_dir = (
            Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="tidelog-zkrun-"))
        )
        self._run_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.command_prefix = list(command_prefix)
        self.extra_config = dict(extra_config or {})
        self._requested_port = port
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._paused = False
        self.starts = 0

    # ---- addresses ----

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("ZooKeeper has not been started")
        return self._port

    @property
    def connect_string(self) -> str:
        """``"127.0.0.1:PORT"``: Kafka's ``zookeeper.connect`` (append ``/chroot`` for a chroot) or kazoo's hosts."""
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        """ZooKeeper's output (appended across restarts)."""
        return self._run_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def is_paused(self) -> bool:
        return self._paused and self.is_running

    def command(self) -> list[str]:
        return [*self.command_prefix, *zookeeper_command(self.config_path, log_level="info")]

    # ---- lifecycle ----

    def start(self) -> ZooKeeper:
        """Start ZooKeeper and wait until it serves clients; raises :class:`ZooKeeperError` if it does not come up."""
        if self.is_running:
            raise RuntimeError("ZooKeeper is already running")
        if self._requested_port:
            self._launch(self._requested_port)
            return self
        for _attempt in range(5):  # a free port can be taken between our probe and java's bind
            try:
                self._launch(free_port(self.host))
                return self
            except ZooKeeperError:
                if "Address already in use" not in self.log_tail():
                    raise
        raise ZooKeeperError(f"no free port found for ZooKeeper\n{self.log_tail()}")

    def restart(self) -> ZooKeeper:
        """Stop (gracefully) if running, then start on the same data directory and port.

        ZooKeeper's old socket may linger a moment after a kill: the start is retried on that port for a
        few seconds; the port never changes, since clients (and brokers' ``zookeeper.connect``) name it.
        """
        self.stop()
        if self._port is None:
            return self.start()
        deadline = time.monotonic() + _RESTART_SAME_PORT_SECONDS
        while True:
            try:
                self._launch(self._port)
                return self
            except ZooKeeperError:
                if "Address already in use" not in self.log_tail(10) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def kill(self) -> int | None:
        """SIGKILL now (a crash) and reap the process; returns its exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        return self._reap(process)

    def pause(self) -> None:
        """SIGSTOP: ZooKeeper freezes with its sockets open; clients' requests and pings go unanswered."""
        self._signal(signal.SIGSTOP)
        self._paused = True
        assert self._process is not None
        wait_stopped(self._process.pid, True, self.stop_timeout)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self._signal(signal.SIGCONT)
        self._paused = False
        assert self._process is not None
        wait_stopped(self._process.pid, False, self.stop_timeout)

    @contextlib.contextmanager
    def paused(self, seconds: float = 0.0) -> Iterator[ZooKeeper]:
        """Pause for the ``with`` block and at least ``seconds``; resumed at the end, also when it raises."""
        self.pause()
        resume_at = time.monotonic() + seconds
        try:
            yield self
            time.sleep(max(0.0, resume_at - time.monotonic()))  # the pause itself is the fault
        finally:
            if self.is_running:
                self.resume()

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM, wait up to ``timeout`` (default ``stop_timeout``), then SIGKILL; returns the exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            self._paused = False
            process.terminate()
            try:
                process.wait(timeout=self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                process.kill()
        return self._reap(process)

    def close(self) -> None:
        """Stop and remove the temporary directories this object created."""
        self.stop()
        if self._owns_run_dir:
            shutil.rmtree(self._run_dir, ignore_errors=True)
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeper:
        if not self.is_running:
            try:
                self.start()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- probes and faults ----

    def is_ok(self) -> bool:
        """``ruok`` answers ``imok`` now."""
        return self._port is not None and is_ok(self.host, self._port)

    def four_letter_word(self, word: str) -> str:
        """The answer to ``ruok``, ``stat``, ``srvr`` or ``mntr``."""
        return four_letter_word(self.host, self.port, word)

    def expire_session(self, session_id: int, password: bytes, *, timeout: float = 10.0) -> None:
        """Expire another client's session now, as a network partition longer than its timeout would.

        Connects a second client with the victim's session id and password (ZooKeeper moves the session to
        it and drops the victim's connection), then closes that session: its ephemeral znodes are deleted
        and their watchers fire; the victim's next reconnect is told the session expired.
        """
        from kazoo.client import KazooClient

        thief = KazooClient(hosts=self.connect_string, client_id=(session_id, password), timeout=timeout)
        try:
            thief.start(timeout=timeout)
            thief.stop()  # sends closeSession for the stolen session
        finally:
            thief.close()

    def log_tail(self, max_lines: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])

    def __repr__(self) -> str:
        state = f"pid={self.pid} running" if self.is_running else "stopped"
        where = f"{self.host}:{self._port}" if self._port is not None else "not started"
        return f"<tidelog ZooKeeper {where} data_dir={self.data_dir} {state}>"

    # ---- internals ----

    def _launch(self, port: int) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_zoo_cfg(
            self.config_path,
            zoo_cfg_text(
                data_dir=self.data_dir,
                port=port,
                host=self.host,
                tick_time_ms=self.tick_time_ms,
                max_session_timeout_ms=self.max_session_timeout_ms,
                extra=self.extra_config,
            ),
        )
        command = self.command()
        log = self.log_path.open("ab")
        log.write(f"---- tidelog.testing: start #{self.starts + 1}: {' '.join(command)}\n".encode())
        log.flush()
        self._log = log
        self._port = port
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the test runner, not ZooKeeper
        )
        self.starts += 1
        _LIVE.add(self)
        self._wait_ready(self._process)

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = process.poll()
            if code is not None:
                self._reap(process)
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {code} before it was ready; its log:\n{self.log_tail()}"
                )
            if is_serving(self.host, self.port, data_dir=self.data_dir, timeout=0.5):
                return
            if time.monotonic() >= deadline:
                self.kill()
                raise ZooKeeperError(
                    f"ZooKeeper did not serve clients within {self.startup_timeout:g} s; its log:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def _reap(self, process: subprocess.Popen[bytes]) -> int | None:
        try:
            code = process.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL always ends a process
            code = None
        if self._log is not None:
            self._log.close()
            self._log = None
        self._paused = False
        _LIVE.discard(self)
        return code

    def _signal(self, signum: signal.Signals) -> None:
        if not self.is_running:
            raise RuntimeError("ZooKeeper is not running")
        assert self._process is not None
        os.kill(self._process.pid, signum)


@contextlib.contextmanager
def zookeeper(
    *,
    data_dir: Path | str | None = None,
    port: int = 0,
    tick_time_ms: int = DEFAULT_TICK_TIME_MS,
    startup_timeout: float = 60.0,
) -> Iterator[ZooKeeper]:
    """Run a real ZooKeeper for the ``with`` block::

    with tidelog.testing.zookeeper() as zk:
        broker_config = {"zookeeper.connect": zk.connect_string + "/tidelog"}
    """
    with ZooKeeper(
        data_dir=data_dir, port=port, tick_time_ms=tick_time_ms, startup_timeout=startup_timeout
    ) as running:
        yield running


@atexit.register
def _kill_leftovers() -> None:
    for leftover in list(_LIVE):
        with contextlib.suppress(Exception):
            leftover.kill()
