"""``tidelog doctor``: check a config and its data dirs before starting a broker, and say what to fix.

Invariants: one line per check, ``OK`` / ``WARN`` / ``FAIL`` then what was checked and, unless OK, the fix;
exit code 1 when any check FAILs (0 otherwise, warnings included); nothing is changed on disk.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from tidelog.cli._common import out_console, print_error

__all__ = ["doctor_command"]

_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}


@click.command("doctor")
@click.option(
    "--config",
    "-c",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A server.properties file.",
)
@click.option(
    "--set",
    "-s",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one config key (repeatable).",
)
@click.option(
    "--min-free-gb",
    type=float,
    default=1.0,
    show_default=True,
    help="Warn below this much free disk per log dir.",
)
def doctor_command(config_file: Path | None, overrides: tuple[str, ...], min_free_gb: float) -> None:
    """Check a broker config, its log dirs, limits, clock, ZooKeeper and ports; say what to fix."""
    from tidelog.cli._doctor_checks import Check, Status, run_checks
    from tidelog.server.config import ConfigError, parse_set_option

    try:
        pairs = [parse_set_option(item) for item in overrides]
    except ConfigError as exc:
        print_error(str(exc))
        raise SystemExit(2) from None
    checks: list[Check] = run_checks(config_file, pairs, min_free_bytes=int(min_free_gb * (1 << 30)))
    for check in checks:
        status = check.status.value
        line = f"[{_STYLE[status]}]{status:<4}[/] {escape(check.name)}: {escape(check.detail)}"
        if check.fix:
            line += f" [dim]-> {escape(check.fix)}[/]"
        out_console.print(line)
    failed = sum(1 for c in checks if c.status is Status.FAIL)
    warned = sum(1 for c in checks if c.status is Status.WARN)
    out_console.print(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    if failed:
        raise SystemExit(1)
