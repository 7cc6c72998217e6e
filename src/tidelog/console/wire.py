"""The console's own Kafka connections, for the few APIs confluent-kafka's AdminClient lacks.

Invariants: the connection is tidelog's blocking wire client (:mod:`tidelog.client.wire`), secured by the
console's librdkafka settings as its librdkafka clients are (:mod:`tidelog.client.security`: a setting it
cannot honour is refused before any connection); it identifies itself as ``tidelog-console``; every
failure, from the settings to the last response, is a :class:`~tidelog.console.kafka.ConsoleError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tidelog.client.security import WireSecurity
from tidelog.client.wire import WireClient, WireError
from tidelog.console.kafka import ConsoleError

__all__ = ["wire_connection", "wire_security"]


def wire_security(settings: Mapping[str, object]) -> WireSecurity:
    """The TLS and SASL of ``settings``; raises ConsoleError for one the console cannot honour."""
    try:
        return WireSecurity.from_settings(settings)
    except WireError as exc:
        raise ConsoleError(str(exc)) from None


@contextmanager
def wire_connection(host: str, port: int, timeout: float, security: WireSecurity) -> Iterator[WireClient]:
    """A connection to one broker, logged in when ``security`` asks for it, closed on leaving; a
    :class:`WireError` inside is a ConsoleError."""
    try:
        with WireClient(
            host, port, timeout=timeout, client_id="tidelog-console", sasl=security.sasl, tls=security.tls
        ) as connection:
            yield connection
    except WireError as exc:
        raise ConsoleError(str(exc)) from None
