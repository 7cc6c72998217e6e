"""SCRAM users for a broker that has not started yet: ``tidelog users add --data-dir`` (the offline
bootstrap of a first admin), run as the installed command with the password on stdin."""

from __future__ import annotations

from pathlib import Path

from tests.cli.cli_support import ok, tidelog_cli

__all__ = ["add_user_offline"]


def add_user_offline(data_dir: Path, name: str, password: str) -> str:
    """``tidelog users add NAME --data-dir DATA_DIR --password-stdin``; its output (it must succeed)."""
    return ok(
        tidelog_cli(
            "users", "add", name, "--data-dir", str(data_dir), "--password-stdin", stdin=password + "\n"
        )
    )
