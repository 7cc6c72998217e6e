"""``tidelog console``: serve the web console (:mod:`tidelog.console`), a Kafka client in a browser.

Invariants: the console takes the same client options as every other client command (``-b``,
``--timeout``, ``--command-config FILE``, ``-X key=value`` for SASL/TLS and any librdkafka property); it
binds loopback unless ``--listen`` names another address, and changes nothing on the cluster unless
``--allow-writes``.
"""

from __future__ import annotations

import click

from tidelog.cli._common import ClientOptions, client_options, err_console, fail

__all__ = ["console_command"]


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise click.BadParameter(f"{value!r} is not HOST:PORT", param_hint="--listen")
    return host.strip("[]"), int(port)


@click.command("console")
@client_options
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Address the web console serves on (loopback by default; port 0 picks a free one).",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Allow changes: create/delete topics, alter configs, produce, reset offsets, add/delete SCRAM "
    "users, create/delete ACLs (refused otherwise).",
)
@click.option(
    "--metrics-url",
    "metrics_urls",
    multiple=True,
    metavar="URL",
    help="A broker's metrics endpoint (metrics.listener, e.g. http://127.0.0.1:9404), repeatable: "
    "throughput and topic sizes come from it when it answers, else from offsets.",
)
@click.option(
    "--sample-interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between the console's throughput and lag samples.",
)
@click.option(
    "--hanging-after",
    type=click.FloatRange(min=0),
    default=900.0,
    show_default=True,
    help="Seconds after which an open transaction is shown as hanging.",
)
def console_command(
    client: ClientOptions,
    listen: str,
    allow_writes: bool,
    metrics_urls: tuple[str, ...],
    sample_interval: float,
    hanging_after: float,
) -> None:
    """Serve the web console: cluster, topics, messages, consumer groups (a Kafka client; works with Kafka too)."""
    from tidelog.console.app import serve
    from tidelog.console.kafka import ConsoleError

    host, port = _listen(listen)
    mode = "read-write" if allow_writes else "read-only"
    err_console.print(f"tidelog console ({mode}) for {client.bootstrap_server}")
    try:
        serve(
            client.base_config(),
            host=host,
            port=port,
            timeout=client.timeout,
            allow_writes=allow_writes,
            metrics_urls=list(metrics_urls),
            sample_interval=sample_interval,
            hanging_after_s=hanging_after,
        )
    except ConsoleError as exc:
        fail(str(exc))
