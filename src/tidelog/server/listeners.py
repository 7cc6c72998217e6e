"""Client listeners bound to sockets, each with the endpoint it advertises (Kafka's ``SocketServer``
acceptors, one per listener).

Invariants:

- Every client listener (``listeners`` minus ``controller.listener.names``) gets its own listening socket,
  in config order; a controller listener is never bound. Port 0 binds a free port, chosen per listener.
- Either every client listener is bound or none is: a failed bind closes the sockets already bound and
  raises :class:`ListenerBindError` naming the listener.
- Each :class:`BoundListener` carries the endpoint clients are told for it (``config.listeners``'
  ``advertised_endpoint``), computed once at bind time from the port actually bound: never a wildcard
  host, never port 0. A wildcard or empty host is advertised as :func:`canonical_hostname`.
- A connection knows the listener it came in on (``RequestContext.listener_name``); Metadata,
  DescribeCluster and FindCoordinator describe this broker by its endpoint on that listener, as Kafka does.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.server.config import BrokerConfig, Listener
from tidelog.server.config.listeners import advertised_endpoint

__all__ = ["BoundListener", "ListenerBindError", "bind_client_listeners", "canonical_hostname"]


class ListenerBindError(OSError):
    """A client listener's socket could not be bound; the message names the listener and the reason."""

    def __init__(self, listener: Listener, reason: str) -> None:
        super().__init__(f"cannot listen on {listener}: {reason}")
        self.listener = listener


@dataclass(frozen=True, slots=True)
class BoundListener:
    """A client listener with its listening socket, the address it got and the endpoint it advertises."""

    listener: Listener
    sock: socket.socket
    host: str
    """The bound host as the socket reports it (``0.0.0.0`` for an empty or wildcard listener host)."""
    port: int
    """The bound port (a free port when the listener asked for 0)."""
    advertised: tuple[str, int]
    """``(host, port)`` clients are told to connect to for this listener."""

    @property
    def name(self) -> str:
        return self.listener.name


def canonical_hostname() -> str:
    """Kafka's ``InetAddress.getLocalHost().getCanonicalHostName()``: this machine's host name resolved to
    an address, then that address's name by reverse lookup; the address when the reverse lookup fails, the
    host name when it does not resolve at all."""
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        return name
    try:
        return socket.gethostbyaddr(address)[0]
    except OSError:
        return address


def bind_client_listeners(
    config: BrokerConfig, *, local_host: Callable[[], str] = canonical_hostname
) -> list[BoundListener]:
    """Bind every client listener of ``config``, in order; all of them or none (see the module invariants).

    ``local_host`` names this machine for wildcard hosts; it is asked at most once.
    """
    ask_once = functools.cache(local_host)
    bound: list[BoundListener] = []
    try:
        for listener in config.broker_listeners:
            sock = _listen(listener, config.socket_listen_backlog_size)
            host, port = sock.getsockname()[:2]
            advertised = advertised_endpoint(config.advertised_listener(listener.name), port, ask_once)
            bound.append(BoundListener(listener, sock, host, port, advertised))
    except BaseException:
        for done in bound:
            done.sock.close()
        raise
    return bound


def _listen(listener: Listener, backlog: int) -> socket.socket:
    host, port = listener.bind_address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ListenerBindError(listener, exc.strerror or str(exc)) from exc
    return sock
