"""``metrics.listener``: where the Prometheus endpoint listens, parsed from ``http://HOST:PORT``.

Invariants: unset or empty means no endpoint (nothing is bound); only the ``http`` scheme is accepted,
with a host and a port (0 = any free port) and no path beyond ``/``; anything else is a
:class:`ConfigError` naming the key. The host is bound exactly as given (``127.0.0.1``, ``::1``,
``0.0.0.0`` for every interface).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from .errors import ConfigError
from .validators import Validator
from .values import ConfigValue

__all__ = ["METRICS_LISTENER_KEY", "HttpListenerUrl", "MetricsListener", "parse_metrics_listener"]

METRICS_LISTENER_KEY: Final = "metrics.listener"


@dataclass(frozen=True, slots=True)
class MetricsListener:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_metrics_listener(value: str | None) -> MetricsListener | None:
    """The endpoint ``value`` names, or None when it is unset or empty."""
    if value is None or not value.strip():
        return None
    text = value.strip()

    def bad(why: str) -> ConfigError:
        return ConfigError(
            f"{METRICS_LISTENER_KEY} {text!r}: {why} (expected http://HOST:PORT, e.g. http://127.0.0.1:9404)",
            key=METRICS_LISTENER_KEY,
        )

    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise bad(str(exc)) from None
    if parts.scheme.lower() != "http":
        raise bad(f"scheme {parts.scheme or '(none)'!r} is not supported, only http")
    if not parts.hostname:
        raise bad("no host")
    if port is None:
        raise bad("no port")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise bad("only scheme, host and port may be given")
    return MetricsListener(parts.hostname, port)


class HttpListenerUrl(Validator):
    """The config validator: the value parses with :func:`parse_metrics_listener`."""

    def __call__(self, name: str, value: ConfigValue) -> None:  # noqa: ARG002 - the message names the key
        if isinstance(value, str):
            parse_metrics_listener(value)

    def describe(self) -> str:
        return "http://HOST:PORT"
