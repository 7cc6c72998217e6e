"""``tidelog zookeeper``: run a standalone ZooKeeper (Debian's jar, a generated ``zoo.cfg``) in the foreground.

Invariants: no system service is used or started; the data directory holds ``zoo.cfg`` and ZooKeeper's
``version-2`` files, so a restart on the same directory keeps every znode. Ctrl-C or SIGTERM stops it
cleanly (exit 0); a missing java or jar ends in one line naming the fix (exit 2); a ZooKeeper that does not
come up or dies exits 1.
"""

from __future__ import annotations

from pathlib import Path

import click

from tidelog.cli._common import err_console, print_error


@click.command("zookeeper")
@click.option(
    "--data",
    "data_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="ZooKeeper's data directory (created if missing; zoo.cfg is written there).",
)
@click.option("--port", default=2181, show_default=True, type=click.IntRange(1, 65535), help="Client port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--tick-time-ms",
    default=500,
    show_default=True,
    type=click.IntRange(1),
    help="ZooKeeper's tickTime; the shortest session timeout it grants is two ticks.",
)
@click.option(
    "--max-session-timeout-ms",
    default=120_000,
    show_default=True,
    type=click.IntRange(1),
    help="The longest session timeout ZooKeeper grants (Kafka's zookeeper.session.timeout.ms is capped to it).",
)
@click.option(
    "--log-level",
    default="warn",
    show_default=True,
    type=click.Choice(["trace", "debug", "info", "warn", "error", "off"]),
    help="ZooKeeper's own log level (its log goes to stderr).",
)
def zookeeper_command(
    data_dir: Path, port: int, host: str, tick_time_ms: int, max_session_timeout_ms: int, log_level: str
) -> None:
    """Run a ZooKeeper for a tidelog cluster until SIGTERM or Ctrl-C (brokers: zookeeper.connect=HOST:PORT)."""
    from tidelog.server.zookeeper_process import ZooKeeperNotInstalledError, run_zookeeper

    def ready(address: str) -> None:
        err_console.print(f"ZooKeeper ready on {address} (data in {data_dir}); Ctrl-C stops it")

    try:
        code = run_zookeeper(
            data_dir=data_dir,
            port=port,
            host=host,
            tick_time_ms=tick_time_ms,
            max_session_timeout_ms=max_session_timeout_ms,
            log_level=log_level,
            on_ready=ready,
        )
    except ZooKeeperNotInstalledError as exc:
        print_error(str(exc))
        raise SystemExit(2) from None
    if code != 0:
        print_error(f"ZooKeeper on {host}:{port} stopped with a failure (see its output above)")
    raise SystemExit(code)
