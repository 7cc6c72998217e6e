"""``tidelog doctor``: OK on a good config and data dir; FAIL lines naming the problem (a bad value, a
missing dir that cannot be created, an unwritable dir, a port in use) and exit code 1."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.cli_support import ok, tidelog_cli


def _lines(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return result.stdout.decode().splitlines()


def _fails(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert b"Traceback" not in result.stderr
    return [line for line in _lines(result) if line.startswith("FAIL")]


def test_good_config_and_data_dir(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    (tmp_path / "data").mkdir()
    out = ok(tidelog_cli("doctor", "--config", str(config), "--min-free-gb", "0"))
    assert f"OK   config: parses ({config})" in out
    assert f"OK   log dir {tmp_path / 'data'}: writable" in out
    assert "FAIL" not in out
    assert out.splitlines()[-1].startswith(f"{len(out.splitlines()) - 1} checks: 0 failed")


def test_a_bad_value_fails_naming_the_key(tmp_path: Path) -> None:
    result = tidelog_cli("doctor", "--set", f"log.dirs={tmp_path}", "--set", "num.partitions=zero")
    (line,) = _fails(result)
    assert line.startswith("FAIL config:")
    assert "num.partitions" in line


def test_an_unknown_key_warns(tmp_path: Path) -> None:
    out = ok(
        tidelog_cli("doctor", "--set", f"log.dirs={tmp_path}", "--set", "no.such.key=1", "--min-free-gb", "0")
    )
    assert any(line.startswith("WARN config:") and "no.such.key" in line for line in out.splitlines())


def test_a_missing_dir_that_cannot_be_created_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = tidelog_cli(
        "doctor", "--set", f"log.dirs={blocker / 'data'}", "--set", "listeners=PLAINTEXT://127.0.0.1:0"
    )
    (line,) = _fails(result)
    assert line.startswith(f"FAIL log dir {blocker / 'data'}: missing, and cannot be created")


@pytest.fixture
def immutable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody can write, root included (chattr +i), or a skip where that is not possible."""
    path = tmp_path / "frozen"
    path.mkdir()
    path.chmod(0o555)
    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", "+i", str(path)], check=False).returncode != 0
    ):
        pytest.skip("chattr +i is not available here")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_an_unwritable_dir_fails(immutable_dir: Path) -> None:
    result = tidelog_cli(
        "doctor", "--set", f"log.dirs={immutable_dir}", "--set", "listeners=PLAINTEXT://127.0.0.1:0"
    )
    (line,) = _fails(result)
    assert line.startswith(f"FAIL log dir {immutable_dir}: not writable by this user")


def test_a_port_in_use_fails(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = tidelog_cli(
            "doctor", "--set", f"log.dirs={tmp_path}", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}"
        )
    (line,) = _fails(result)
    assert line.startswith(f"FAIL port PLAINTEXT://127.0.0.1:{port}: cannot bind")
