"""Running the installed ``tidelog`` command in tests: its output on success, its one-line error on failure.

``failed`` asserts the exit code, an error message and no traceback; the message comes back with its
whitespace squashed (rich wraps long lines) unless ``squash=False``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TIDELOG = str(Path(sys.executable).parent / "tidelog")


def tidelog_cli(
    *args: str, stdin: bytes | str | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[bytes]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run([TIDELOG, *args], input=data, capture_output=True, timeout=timeout, check=False)


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout.decode()


def failed(
    result: subprocess.CompletedProcess[bytes], code: int = 1, *, marker: str = "Error:", squash: bool = True
) -> str:
    """The stderr of a run that must fail with ``code`` and a message containing ``marker``, not a
    traceback."""
    stderr = result.stderr.decode()
    assert result.returncode == code, (result.returncode, result.stdout, stderr)
    assert "Traceback" not in stderr
    assert marker in stderr
    return " ".join(stderr.split()) if squash else stderr
