"""``tidelog broker``: load ``server.properties`` plus ``--set`` overrides, then run the broker.

Invariants: configuration problems never reach the server; they end in ``Error: <message naming the key>``
and exit code 2. Config warnings (unknown keys ...) go to stderr before the broker starts.
"""

from __future__ import annotations

from pathlib import Path

import click

from tidelog.cli._common import print_error, print_warning
from tidelog.server.config import BrokerConfig, ConfigError, load_broker_config, parse_set_option


@click.command("broker")
@click.option(
    "--config",
    "-c",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A Kafka-style server.properties file.",
)
@click.option(
    "--set",
    "-s",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one config key (repeatable), e.g. --set log.dirs=/var/lib/tidelog.",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Once listening, write HOST:PORT into this file (for scripts and tests).",
)
def broker_command(config_file: Path | None, overrides: tuple[str, ...], ready_file: Path | None) -> None:
    """Run a tidelog broker (Kafka protocol) until SIGTERM or Ctrl-C."""
    try:
        pairs = [parse_set_option(item) for item in overrides]
        config, warnings = load_broker_config(config_file, pairs)
        _check_tls(config)
    except ConfigError as exc:
        print_error(f"invalid configuration: {exc}")
        raise SystemExit(2) from None
    for warning in warnings:
        print_warning(warning)

    from tidelog.server.main import run_broker

    raise SystemExit(run_broker(config, ready_file=ready_file))


def _check_tls(config: BrokerConfig) -> None:
    """Refuse a bad TLS setting (keystore, truststore, protocols) before the broker starts."""
    from tidelog.server.cluster.inter_broker import inter_broker_listener_name
    from tidelog.server.security.tls_config import check_tls

    check_tls(config, inter_broker_listener_name(config) if config.zookeeper_connect else None)
