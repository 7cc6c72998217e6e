"""Progress bars on long work: drawn on stderr when it is a terminal (a pty here), never otherwise, and
stdout is the same either way."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import uuid
from pathlib import Path

from tests.cli.cli_support import TIDELOG, ok, tidelog_cli

from tidelog.testing import Broker

MESSAGES = 40_000


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    return env


def _with_stderr_on_a_pty(args: list[str], stdout_path: Path) -> tuple[int, str]:
    """Run ``tidelog args`` with stdout into ``stdout_path`` and stderr on a pty; (exit code, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    with stdout_path.open("wb") as out:
        process = subprocess.Popen(
            [TIDELOG, *args], stdout=out, stderr=slave, stdin=subprocess.DEVNULL, env=_env()
        )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return process.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_produce_and_consume_show_progress_only_on_a_terminal(
    tidelog_broker_session: Broker, tmp_path: Path
) -> None:
    topic = f"progress-{uuid.uuid4().hex[:8]}"
    bootstrap = tidelog_broker_session.bootstrap_servers
    ok(tidelog_cli("topics", "create", topic, "--bootstrap-server", bootstrap))
    lines = tmp_path / "in.txt"
    lines.write_text("".join(f"message number {i}\n" for i in range(MESSAGES)))

    code, stderr = _with_stderr_on_a_pty(
        ["produce", topic, "--file", str(lines), "--bootstrap-server", bootstrap], tmp_path / "produce.out"
    )
    assert code == 0, stderr
    assert "ETA" in stderr
    assert f"Produced {MESSAGES} message(s)" in stderr
    assert (tmp_path / "produce.out").read_bytes() == b""

    consume = [
        "consume",
        topic,
        "--from-beginning",
        "--max-messages",
        str(MESSAGES),
        "--bootstrap-server",
        bootstrap,
    ]
    code, stderr = _with_stderr_on_a_pty(consume, tmp_path / "tty.out")
    assert code == 0, stderr
    assert f"consuming {topic}" in stderr
    assert "msg/s" in stderr
    piped = tidelog_cli(*consume, timeout=120)
    assert piped.returncode == 0
    assert b"ETA" not in piped.stderr
    assert b"msg/s" not in piped.stderr
    assert piped.stdout == (tmp_path / "tty.out").read_bytes() == lines.read_bytes()
