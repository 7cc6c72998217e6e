"""A real tidelog broker in a subprocess, for tests: start, wait until ready, kill, restart, stop.

Invariants:

- The broker is ``<python> -m tidelog broker`` listening on ``127.0.0.1`` (port 0 unless told otherwise)
  with ``log.dirs`` = :attr:`Broker.data_dir`; its real port comes from the ready file the broker writes
  after binding, so :attr:`Broker.bootstrap_servers` is only read after :meth:`Broker.start` returned.
- :meth:`Broker.start` returns only once the broker is ready, or raises :class:`BrokerError` carrying the
  tail of the broker's output (a broker that dies during startup is reported at once, not at the timeout).
- A restart reuses the data directory and, if it can be bound again, the port.
- :meth:`Broker.stop` always leaves no process behind: SIGTERM, then SIGKILL after ``stop_timeout``.
  Brokers still running when the interpreter exits are killed.
- A paused broker (SIGSTOP: :meth:`Broker.pause`, :meth:`Broker.paused`) is continued (SIGCONT) before it
  is sent SIGTERM, so :meth:`Broker.stop`, :meth:`Broker.restart` and :meth:`Broker.close` never wait on a
  frozen process; :meth:`Broker.paused` resumes it when its block ends, also when the block raises.
- Temporary directories this object created (data, and the run directory with the ready file and
  ``broker.log``) are removed by :meth:`Broker.close`; directories passed in are kept.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["Broker", "BrokerError", "broker"]

ConfigValue = str | int | float | bool
_RESERVED_KEYS = ("listeners", "log.dirs", "log.dir")
_RESTART_SAME_PORT_SECONDS = 5.0
_LIVE: weakref.WeakSet[Broker] = weakref.WeakSet()


class BrokerError(RuntimeError):
    """The broker did not start (it exited or timed out); the message ends with its output."""


def _config_text(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Broker:
    """One tidelog broker process. Use as a context manager, or call :meth:`start` and :meth:`close`."""

    def __init__(
        self,
        config: Mapping[str, ConfigValue] | None = None,
        *,
        data_dir: Path | str | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        run_dir: Path | str | None = None,
        command_prefix: Sequence[str] = (),
        extra_log_dirs: Sequence[Path | str] = (),
    ) -> None:
        self.config = {key: _config_text(value) for key, value in (config or {}).items()}
        for key in _RESERVED_KEYS:
            if key in self.config:
                raise ValueError(f"pass {key} through Broker(port=..., data_dir=...), not config")
        self._owns_data_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="tidelog-data-"))
        )
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.python = python or sys.executable
        self.command_prefix = list(command_prefix)
        self.extra_log_dirs = [Path(d) for d in extra_log_dirs]
        """More ``log.dirs`` after :attr:`data_dir` (kept: never removed by :meth:`close`)."""
        self.env = dict(env) if env is not None else None
        self._owns_run_dir = run_dir is None
        self._run_dir = (
            Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="tidelog-run-"))
        )
        self._run_dir.mkdir(parents=True, exist_ok=True)
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
            raise RuntimeError("the broker has not been started")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:PORT"``, for any Kafka client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The broker's combined stdout and stderr (appended across restarts)."""
        return self._run_dir / "broker.log"

    @property
    def ready_file(self) -> Path:
        return self._run_dir / "ready"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    def command(self, port: int) -> list[str]:
        args = [*self.command_prefix, self.python, "-m", "tidelog", "broker"]
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{port}",
            "log.dirs": ",".join(str(d) for d in [self.data_dir, *self.extra_log_dirs]),
            **self.config,
        }
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        return [*args, "--ready-file", str(self.ready_file)]

    # ---- lifecycle ----

    def start(self) -> Broker:
        """Start the broker and wait until it is ready; raises :class:`BrokerError` if it is not."""
        if self.is_running:
            raise RuntimeError("the broker is already running")
        self._launch(self._requested_port)
        return self

    def restart(self) -> Broker:
        """Stop (gracefully) if running, then start again on the same data directory and the same port.

        If another process took the port meanwhile, the broker gets a fresh one after a few seconds (check
        :attr:`bootstrap_servers`).
        """
        self.stop()
        previous = self._port
        if previous is None:
            return self.start()
        deadline = time.monotonic() + _RESTART_SAME_PORT_SECONDS
        while True:
            try:
                self._launch(previous)
                return self
            except BrokerError:
                if self.is_running or not self._port_in_use(previous):
                    raise  # it failed for another reason than the port
                if time.monotonic() >= deadline:
                    self._launch(0)  # someone else holds the old port now: take a fresh one
                    return self
                time.sleep(0.2)

    def terminate(self) -> int | None:
        """SIGTERM and wait for the graceful shutdown (SIGKILL after ``stop_timeout``); returns the exit code."""
        return self.stop()

    def kill(self) -> int | None:
        """SIGKILL now (a crash: no clean shutdown) and reap the process; returns the exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        return self._reap(process)

    def pause(self) -> None:
        """SIGSTOP: the broker freezes with its sockets open (a hung process, a long GC or VM pause).

        The kernel still accepts connections into the listen backlog and buffers what clients send, so
        clients see requests time out rather than connections refused; on :meth:`resume` the broker finds
        its timers overdue (sessions, transaction timeouts) and the buffered requests waiting. Returns once
        the process is stopped (signals arrive asynchronously).
        """
        self._signal(signal.SIGSTOP)
        self._paused = True
        self._wait_stopped(True)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause` (harmless when the broker is not paused)."""
        self._signal(signal.SIGCONT)
        self._paused = False
        self._wait_stopped(False)

    @property
    def is_paused(self) -> bool:
        """Stopped by :meth:`pause` and not resumed yet."""
        return self._paused and self.is_running

    @contextlib.contextmanager
    def paused(self, seconds: float = 0.0) -> Iterator[Broker]:
        """Pause the broker for the ``with`` block, and at least ``seconds`` from its start::

            with broker.paused(seconds=3):   # longer than the clients' request timeout
                producer.produce(...)        # queued; its request waits in the socket

        The broker is resumed when the block ends; at once if the block raises.
        """
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
                os.kill(process.pid, signal.SIGCONT)  # a paused broker cannot act on SIGTERM
            self._paused = False
            process.terminate()
            try:
                process.wait(timeout=self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                process.kill()
        return self._reap(process)

    def close(self) -> None:
        """Stop the broker and remove the temporary directories this object created."""
        self.stop()
        if self._owns_run_dir:
            shutil.rmtree(self._run_dir, ignore_errors=True)
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Broker:
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

    def log_tail(self, max_lines: int = 60) -> str:
        """The last lines of the broker's output."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])

    def __repr__(self) -> str:
        state = f"pid={self.pid} running" if self.is_running else "stopped"
        where = f"{self.host}:{self._port}" if self._port is not None else "not started"
        return f"<tidelog Broker {where} data_dir={self.data_dir} {state}>"

    # ---- internals ----

    def _launch(self, port: int) -> None:
        self.ready_file.unlink(missing_ok=True)
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        log = self.log_path.open("ab")
        log.write(
            f"---- tidelog.testing: start #{self.starts + 1}: {' '.join(self.command(port))}\n".encode()
        )
        log.flush()
        self._log = log
        self._process = subprocess.Popen(
            self.command(port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the test runner, not the broker
        )
        self.starts += 1
        _LIVE.add(self)
        self._port = self._wait_ready(self._process)

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> int:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            text = self._read_ready()
            if text is not None:
                _host, _, port = text.rpartition(":")
                if not port.isdigit():
                    self.kill()
                    raise BrokerError(f"unexpected ready file content {text!r}\n{self.log_tail()}")
                return int(port)
            code = process.poll()
            if code is not None:
                self._reap(process)
                raise BrokerError(
                    f"tidelog broker exited with code {code} before it was ready; its output:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise BrokerError(
                    f"tidelog broker was not ready within {self.startup_timeout:g} s; its output:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def _read_ready(self) -> str | None:
        try:
            text = self.ready_file.read_text()
        except FileNotFoundError:
            return None
        return text.strip() if text.endswith("\n") else None  # written atomically, newline-terminated

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
            raise RuntimeError("the broker is not running")
        assert self._process is not None
        os.kill(self._process.pid, signum)

    def _wait_stopped(self, stopped: bool) -> None:
        """Until the kernel shows the process stopped (or running again): a signal is delivered
        asynchronously. Linux's /proc only; elsewhere this returns at once."""
        assert self._process is not None
        stat = Path(f"/proc/{self._process.pid}/stat")
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline:
            try:
                text = stat.read_text()
            except OSError:
                return  # no /proc, or the process is gone
            state = text[text.rindex(")") + 2]
            if state == "Z" or (state == "T") == stopped:
                return
            time.sleep(0.005)
        raise RuntimeError(f"the broker was not {'stopped' if stopped else 'running'} after the signal")

    def _port_in_use(self, port: int) -> bool:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, port))
            except OSError:
                return True
        return False


@contextlib.contextmanager
def broker(
    config: Mapping[str, ConfigValue] | None = None,
    *,
    data_dir: Path | str | None = None,
    port: int = 0,
    startup_timeout: float = 30.0,
    stop_timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[Broker]:
    """Run a real tidelog broker for the ``with`` block::

        with tidelog.testing.broker({"num.partitions": 3}) as b:
            producer = Producer({"bootstrap.servers": b.bootstrap_servers})

    ``config`` holds broker configs by Kafka name; ``data_dir`` defaults to a fresh temporary directory
    (removed afterwards); ``port`` 0 picks a free one.
    """
    with Broker(
        config,
        data_dir=data_dir,
        port=port,
        startup_timeout=startup_timeout,
        stop_timeout=stop_timeout,
        env=env,
    ) as running:
        yield running


@atexit.register
def _kill_leftovers() -> None:
    for leftover in list(_LIVE):
        with contextlib.suppress(Exception):
            leftover.kill()
