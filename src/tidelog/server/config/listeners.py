"""Listeners: ``listeners`` and ``advertised.listeners`` parsed against ``listener.security.protocol.map``,
and the endpoint a client is told for each listener.

Invariants:

- A listener is ``NAME://host:port``: the name upper-cased, the host bare (IPv6 without brackets; empty
  means every interface), the port in [0, 65535] (0: any free port). Its security protocol comes from
  ``listener.security.protocol.map`` by name (Kafka's default maps PLAINTEXT, SSL, SASL_PLAINTEXT and
  SASL_SSL to themselves); a name missing from the map is refused.
- ``listeners``: names are unique, ports other than 0 are unique, at least one is a client listener (one
  not named in ``controller.listener.names``), and every client listener's protocol is one tidelog serves
  (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). Controller listeners are parsed and checked but never bound.
- ``advertised.listeners``: names are unique, each names a listener, and none uses a non-routable
  meta-address (``0.0.0.0``, ``::``), as in Kafka.
- The endpoint advertised for a client listener (:func:`advertised_endpoint`) is its
  ``advertised.listeners`` entry by name, else the listener itself; an empty or wildcard host becomes the
  machine's canonical host name and port 0 the port the listener was bound to, so a client is never told
  a wildcard address or port 0.
- Every refusal is a :class:`~tidelog.server.config.errors.ConfigError` naming the key and where it was
  set. Pure parsing: no sockets (server/listeners.py binds them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from .errors import ConfigError, invalid_value, located
from .values import ConfigValue

__all__ = [
    "LISTENER_OVERRIDE_PREFIXES",
    "SUPPORTED_PROTOCOLS",
    "TLS_PROTOCOLS",
    "WILDCARD_HOSTS",
    "Listener",
    "advertised_endpoint",
    "client_listeners",
    "parse_listeners",
    "parse_protocol_map",
    "resolve_listeners",
    "split_listener_override",
]

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[0-9A-Za-z\-._]*):(-?[0-9]+)$")
SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Security protocols a client listener may use (SSL / SASL_SSL: TLS transport, security/tls_config.py)."""
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
"""Security protocols whose transport is TLS."""
LISTENER_OVERRIDE_PREFIXES = ("ssl.", "sasl.", "connections.max.reauth.ms")
"""Broker keys that ``listener.name.<name>.<key>`` may override per listener, as in Kafka."""
_OVERRIDE_RE = re.compile(r"^listener\.name\.([A-Za-z0-9_]+)\.(.+)$")
_MECHANISM_JAAS_RE = re.compile(
    r"^(?:plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.(sasl\.jaas\.config)$", re.I
)
"""``listener.name.<name>.<mechanism>.sasl.jaas.config``: Kafka's per-mechanism login of a listener."""
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
"""Hosts that mean "every interface": bindable, never advertised."""


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint. ``host`` is bare (no IPv6 brackets); ``""`` means all interfaces."""

    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"

    @property
    def bind_address(self) -> tuple[str, int]:
        """``(host, port)`` to bind: an empty host binds every IPv4 interface (``0.0.0.0``)."""
        return (self.host or "0.0.0.0", self.port)


def parse_protocol_map(raw: str) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL`` pairs) -> {NAME: PROTOCOL}, upper-cased."""
    name = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        listener, sep, protocol = item.partition(":")
        if not sep or not listener.strip() or not protocol.strip():
            raise invalid_value(name, raw, f"Expected NAME:PROTOCOL pairs, got {item!r}")
        out[listener.strip().upper()] = protocol.strip().upper()
    return out


def parse_listeners(name: str, raw: str, protocol_map: Mapping[str, str]) -> tuple[Listener, ...]:
    """The listeners of config ``name`` (``listeners`` or ``advertised.listeners``), in order; names unique."""
    listeners: list[Listener] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        match = _LISTENER_RE.match(item)
        if match is None:
            raise invalid_value(name, raw, f"Unable to parse {item!r} as NAME://host:port")
        listener_name, host, port_text = match.group(1).upper(), match.group(2), match.group(3)
        host = host[1:-1] if host.startswith("[") else host
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise invalid_value(name, raw, f"Port {port} of {item!r} is not in [0, 65535]")
        protocol = protocol_map.get(listener_name)
        if protocol is None:
            raise invalid_value(
                name,
                raw,
                f"No security protocol defined for listener {listener_name} (see listener.security.protocol.map)",
            )
        if any(existing.name == listener_name for existing in listeners):
            raise invalid_value(
                name, raw, f"Each listener must have a different name, {listener_name} is repeated"
            )
        listeners.append(Listener(listener_name, host, port, protocol))
    return tuple(listeners)


def split_listener_override(key: str) -> tuple[str, str] | None:
    """``listener.name.<name>.<key>`` -> (NAME upper-cased, key) when ``key`` is one a listener may
    override (``ssl.*``, ``sasl.*``, ``connections.max.reauth.ms``; ``<mechanism>.sasl.jaas.config`` gives
    ``sasl.jaas.config``); None for any other key."""
    match = _OVERRIDE_RE.match(key)
    if match is None:
        return None
    jaas = _MECHANISM_JAAS_RE.match(match.group(2))
    if jaas is not None:
        return match.group(1).upper(), jaas.group(1)
    if not match.group(2).startswith(LISTENER_OVERRIDE_PREFIXES):
        return None
    return match.group(1).upper(), match.group(2)


def client_listeners(
    listeners: tuple[Listener, ...], controller_listener_names: Collection[str]
) -> tuple[Listener, ...]:
    """The listeners clients connect to: all but those named in ``controller.listener.names``."""
    controllers = {name.upper() for name in controller_listener_names}
    return tuple(listener for listener in listeners if listener.name not in controllers)


def advertised_endpoint(
    advertised: Listener, bound_port: int, local_host: Callable[[], str]
) -> tuple[str, int]:
    """``(host, port)`` clients are told for a listener bound to ``bound_port`` whose advertised form is
    ``advertised`` (its ``advertised.listeners`` entry, else the listener itself).

    An empty or wildcard host becomes ``local_host()`` (the machine's canonical host name, asked only
    then); a port of 0 becomes ``bound_port``.
    """
    host = local_host() if advertised.host in WILDCARD_HOSTS else advertised.host
    return (host, advertised.port or bound_port)


def resolve_listeners(
    values: Mapping[str, ConfigValue], controller_listener_names: Collection[str], where: Callable[[str], str]
) -> dict[str, object]:
    """Parse and check the listener configs; returns the :class:`BrokerConfig` attributes they set
    (``listener_security_protocol_map``, ``listeners``, ``advertised_listeners``)."""
    try:
        protocol_map = parse_protocol_map(str(values["listener.security.protocol.map"]))
    except ConfigError as exc:
        raise located(exc, where("listener.security.protocol.map")) from None
    try:
        listeners = parse_listeners("listeners", str(values["listeners"]), protocol_map)
    except ConfigError as exc:
        raise located(exc, where("listeners")) from None
    served = client_listeners(listeners, controller_listener_names)
    if not served:
        raise ConfigError(
            f"listeners must contain at least one broker (non-controller) listener ({where('listeners')})",
            key="listeners",
        )
    ports = [listener.port for listener in listeners if listener.port != 0]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"listeners use the same port twice ({where('listeners')})", key="listeners")
    for listener in served:
        if listener.security_protocol not in SUPPORTED_PROTOCOLS:
            raise ConfigError(
                f"listeners: listener {listener.name} uses security protocol {listener.security_protocol}, "
                f"which tidelog does not support yet (only {', '.join(SUPPORTED_PROTOCOLS)}) ({where('listeners')})",
                key="listeners",
            )

    advertised_raw = values["advertised.listeners"]
    advertised: tuple[Listener, ...] = ()
    if advertised_raw is not None:
        try:
            advertised = parse_listeners("advertised.listeners", str(advertised_raw), protocol_map)
        except ConfigError as exc:
            raise located(exc, where("advertised.listeners")) from None
        names = {listener.name for listener in listeners}
        for listener in advertised:
            if listener.name not in names:
                raise ConfigError(
                    f"advertised.listeners: listener {listener.name} is not one of listeners "
                    f"({', '.join(sorted(names))}) ({where('advertised.listeners')})",
                    key="advertised.listeners",
                )
            if listener.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"advertised.listeners cannot use the nonroutable meta-address {listener.host}; use a "
                    f"routable IP address or host name ({where('advertised.listeners')})",
                    key="advertised.listeners",
                )

    inter_broker = values["inter.broker.listener.name"]
    if inter_broker is not None and str(inter_broker).upper() not in {
        listener.name for listener in listeners
    }:
        raise ConfigError(
            f"inter.broker.listener.name {inter_broker} must be one of the listener names "
            f"({where('inter.broker.listener.name')})",
            key="inter.broker.listener.name",
        )
    return {
        "listener_security_protocol_map": protocol_map,
        "listeners": listeners,
        "advertised_listeners": advertised,
    }
