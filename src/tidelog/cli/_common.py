"""Shared pieces of the ``tidelog`` commands: client options, Kafka clients with short timeouts, errors.

Invariants: a user mistake (unreachable broker, unknown topic, bad option) ends in a one-line message on
stderr and a non-zero exit code, never a Python traceback. Exit codes: 0 success, 1 the operation failed,
2 bad usage or configuration, 130 interrupted. librdkafka's own log lines are silenced unless ``--verbose``.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import click
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigEntry, ConfigSource

    from tidelog.client.security import WireSecurity

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "CliError",
    "ClientOptions",
    "alter_configs",
    "client_options",
    "config_source",
    "err_console",
    "fail",
    "kafka_error_text",
    "out_console",
    "parse_key_values",
    "print_error",
    "print_warning",
    "table",
]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

# Piped output is not cut at 80 columns: tables get room, and cells fold instead of being ellipsized.
out_console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def table(*columns: str, title: str, title_justify: JustifyMethod = "center") -> Table:
    """A rich table whose cells wrap (fold) rather than lose text."""
    result = Table(title=title, title_justify=title_justify)
    for column in columns:
        result.add_column(column, overflow="fold")
    return result


def print_error(message: str) -> None:
    err_console.print(f"[bold red]Error:[/] {escape(message)}")


def print_warning(message: str) -> None:
    err_console.print(f"[yellow]warning:[/] {escape(message)}")


class CliError(click.ClickException):
    """A user-facing failure: printed as ``Error: <message>``, exit code 1."""

    def show(self, file: IO[Any] | None = None) -> None:  # noqa: ARG002 - click passes a stream; we use rich
        print_error(self.format_message())


def fail(message: str) -> NoReturn:
    raise CliError(message)


def kafka_error_text(error: object) -> str:
    """librdkafka's message for a ``KafkaError`` or a ``KafkaException`` carrying one."""
    if isinstance(error, Exception) and error.args:
        error = error.args[0]
    text = getattr(error, "str", None)
    return str(text()) if callable(text) else str(error)


class ClientOptions:
    """``--bootstrap-server``, ``--timeout``, ``-X key=value`` and ``--verbose``, shared by client commands."""

    def __init__(
        self, bootstrap_server: str, timeout: float, properties: Mapping[str, str], verbose: bool
    ) -> None:
        self.bootstrap_server = bootstrap_server
        self.timeout = timeout
        self.properties = dict(properties)
        self.verbose = verbose
        self.transport_errors: list[str] = []

    def base_config(self) -> dict[str, object]:
        """librdkafka settings: the bootstrap server, timeouts, error and log callbacks, ``-X`` properties."""
        config: dict[str, object] = {
            "bootstrap.servers": self.bootstrap_server,
            "socket.connection.setup.timeout.ms": max(1000, int(self.timeout * 1000)),
            "error_cb": self._on_error,
            "logger": _rdkafka_logger(self.verbose),
        }
        config.update(self.properties)
        return config

    def wire_security(self) -> WireSecurity:
        """TLS and SASL for tidelog's own wire client from the properties' librdkafka keys
        (``security.protocol``, ``sasl.*``, ``ssl.*``); a setting it cannot honour ends the command."""
        from tidelog.client.security import WireSecurity
        from tidelog.client.wire import WireError

        try:
            return WireSecurity.from_settings(self.properties)
        except WireError as exc:
            fail(str(exc))

    def _on_error(self, error: KafkaError) -> None:
        self.transport_errors.append(kafka_error_text(error))

    def admin(self) -> AdminClient:
        from tidelog.cli._kafka import AdminClient

        config = self.base_config()
        # librdkafka takes settings and callbacks alike; confluent-kafka types the dict for settings only
        settings = {
            key: value for key, value in config.items() if isinstance(value, str | int | float | bool)
        }
        callbacks = {key: value for key, value in config.items() if key not in settings}
        return AdminClient(settings, **callbacks)

    def unreachable(
        self, reason: str | None = None, handle: AdminClient | Producer | Consumer | None = None
    ) -> NoReturn:
        """Fail with "cannot reach broker"; ``handle`` (a client) is polled first to collect its errors."""
        if handle is not None:
            handle.poll(0)  # error callbacks are served by poll()
        detail = self._last_transport_error() or reason
        suffix = f": {detail}" if detail else ""
        fail(f"cannot reach broker at {self.bootstrap_server} within {self.timeout:g} s{suffix}")

    def _last_transport_error(self) -> str | None:
        for text in reversed(self.transport_errors):
            if "brokers are down" not in text:
                return text.split(": ", 1)[-1] if "/bootstrap: " in text else text
        return None

    def cluster_metadata(self, admin: AdminClient, topic: str | None = None) -> ClusterMetadata:
        """Metadata (``list_topics``), turning a connection failure into "cannot reach broker"."""
        from confluent_kafka import KafkaException

        try:
            return admin.list_topics(topic=topic, timeout=self.timeout)
        except KafkaException as exc:
            self.unreachable(kafka_error_text(exc), admin)


def _rdkafka_logger(verbose: bool) -> logging.Logger:
    logger = logging.getLogger("tidelog.cli.rdkafka")
    logger.propagate = False
    if not logger.handlers:
        handler: logging.Handler = logging.StreamHandler(sys.stderr) if verbose else logging.NullHandler()
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    return logger


F = TypeVar("F", bound=Callable[..., object])
T = TypeVar("T")


def client_options(func: F) -> F:
    """Add the shared client options; the command receives a ``client: ClientOptions`` argument."""

    @click.option(
        "--bootstrap-server",
        "-b",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        envvar="TIDELOG_BOOTSTRAP_SERVER",
        metavar="HOST:PORT",
        help="Broker to connect to (env TIDELOG_BOOTSTRAP_SERVER).",
    )
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        help="Seconds to wait for the broker before giving up.",
    )
    @click.option(
        "--property",
        "-X",
        "properties",
        multiple=True,
        metavar="KEY=VALUE",
        help="Extra librdkafka client property (repeatable).",
    )
    @click.option(
        "--command-config",
        type=click.Path(exists=True, dir_okay=False),
        help="Client properties file, as kafka-*.sh take it (security.protocol, sasl.mechanism, "
        "sasl.jaas.config or sasl.username/sasl.password, ...); -X wins over it.",
    )
    @click.option("--verbose", "-v", is_flag=True, help="Show the Kafka client's own log lines.")
    @functools.wraps(func)
    def wrapper(
        bootstrap_server: str,
        timeout: float,
        properties: tuple[str, ...],
        command_config: str | None,
        verbose: bool,
        **kwargs: object,
    ) -> object:
        settings = {} if command_config is None else command_config_properties(command_config)
        settings.update(parse_key_values(properties, "--property"))
        client = ClientOptions(bootstrap_server, timeout, settings, verbose)
        return func(client=client, **kwargs)

    return cast("F", wrapper)


def command_config_properties(path: str) -> dict[str, str]:
    """A ``--command-config`` file as librdkafka properties: a Java ``sasl.jaas.config`` login line becomes
    ``sasl.username`` / ``sasl.password`` (librdkafka has no JAAS)."""
    from tidelog.cli._client_security import librdkafka_properties

    try:
        return librdkafka_properties(path)
    except ValueError as exc:
        raise click.UsageError(f"--command-config {path}: {exc}") from None


def parse_key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a malformed item is a usage error naming ``option``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


_UNREACHABLE_CODES = ("_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE")


def wait_result(client: ClientOptions, future: Future[T], what: str) -> T:
    """The result of an AdminClient future; a Kafka error becomes ``Error: <what>: <reason>``."""
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout=client.timeout + 5)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        name = str(error.name()) if error is not None and hasattr(error, "name") else ""
        if name in _UNREACHABLE_CODES:
            client.unreachable(kafka_error_text(exc))
        fail(f"{what}: {kafka_error_text(exc)}")
    except TimeoutError:
        client.unreachable("request timed out")


def config_source(entry: ConfigEntry) -> ConfigSource:
    """A described ``ConfigEntry``'s source as confluent-kafka's ``ConfigSource`` enum."""
    from tidelog.cli._kafka import ConfigSource

    source = entry.source
    return source if isinstance(source, ConfigSource) else ConfigSource(int(source))


def alter_configs(
    client: ClientOptions,
    admin: AdminClient,
    kind: str,
    name: str,
    sets: dict[str, str],
    deletes: tuple[str, ...],
) -> None:
    from tidelog.cli._kafka import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deletes]
    restype = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}.get(kind, ResourceType.BROKER)
    resource = ConfigResource(restype, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=client.timeout)
    wait_result(client, futures[resource], f"cannot alter configs of {kind} {name!r}")
    err_console.print(f"Updated configs of {kind} {name}.")
