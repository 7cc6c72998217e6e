"""Accepting a connection on a TLS listener (SSL, SASL_SSL): the handshake, then a stream transport and the
principal the client certificate names.

Invariants:

- The handshake runs in the connection's own task, never in the accept loop, and is bounded by
  :data:`HANDSHAKE_TIMEOUT_S`: a client that connects and says nothing holds a socket for that long at most.
- A handshake that fails (a certificate from another CA, no certificate where one is required, a
  plaintext Kafka client on the TLS port, garbage, a timeout, a peer that hangs up) closes that socket
  only, is logged on one info line, and raises nothing: no traceback, and every other connection carries on.
- The principal is ``User:<name>`` where the name is the client certificate's subject DN (Java's RFC 2253
  form) mapped by the listener's ``ssl.principal.mapping.rules``; ``User:ANONYMOUS`` when the client sent
  no certificate (``ssl.client.auth=none`` or ``requested``). A DN no rule maps fails the connection as a
  failed handshake does (Kafka fails the authentication). The principal is logged at debug level.
- After the handshake, bytes go through a :class:`~tidelog.server.transport.StreamTransport`: record data
  is copied in bounded pieces (no ``sendfile`` through TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from dataclasses import dataclass

from tidelog.server.dispatch import ANONYMOUS, KafkaPrincipal
from tidelog.server.transport import StreamTransport

from .ssl_principal import NoMatchingRuleError, subject_dn
from .tls_config import ListenerTls

__all__ = ["HANDSHAKE_TIMEOUT_S", "TlsConnection", "accept_tls", "principal_of"]

log = logging.getLogger("tidelog.security.tls")

HANDSHAKE_TIMEOUT_S = 10.0
"""How long a client has to complete the TLS handshake after connecting."""
_STREAM_LIMIT = 1 << 20


@dataclass(frozen=True, slots=True)
class TlsConnection:
    """A connection whose handshake succeeded: its transport and who the certificate says the client is."""

    transport: StreamTransport
    principal: KafkaPrincipal
    ssl_object: ssl.SSLObject | None


def principal_of(ssl_object: ssl.SSLObject | ssl.SSLSocket | None, tls: ListenerTls) -> KafkaPrincipal:
    """The principal of a connection after its handshake (see the module invariants); raises
    :class:`~tidelog.server.security.ssl_principal.NoMatchingRuleError` when no rule maps the DN."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert or "subject" not in cert:
        return ANONYMOUS
    dn = subject_dn(cert["subject"])  # type: ignore[arg-type]
    return KafkaPrincipal("User", tls.principal_mapper.name(dn))


async def accept_tls(
    sock: socket.socket,
    tls: ListenerTls,
    *,
    peer: str,
    connection_id: int,
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
) -> TlsConnection | None:
    """TLS-handshake an accepted socket; None (and the socket closed) when the handshake fails."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STREAM_LIMIT)
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        async with asyncio.timeout(handshake_timeout_s + 1):
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=tls.context, ssl_handshake_timeout=handshake_timeout_s
            )
    except (OSError, TimeoutError, EOFError, ValueError) as exc:
        log.info("connection %s from %s: TLS handshake failed: %s", connection_id, peer, _reason(exc))
        with contextlib.suppress(OSError):
            sock.close()
        return None
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    ssl_object = transport.get_extra_info("ssl_object")
    try:
        principal = principal_of(ssl_object, tls)
    except NoMatchingRuleError as exc:
        log.info("connection %s from %s: TLS authentication failed: %s", connection_id, peer, exc)
        transport.abort()
        return None
    log.debug(
        "connection %s from %s: TLS %s %s, principal %s",
        connection_id,
        peer,
        ssl_object.version() if ssl_object is not None else "?",
        ssl_object.cipher()[0] if ssl_object is not None and ssl_object.cipher() else "?",
        principal,
    )
    return TlsConnection(StreamTransport(reader, writer), principal, ssl_object)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or str(exc)
    if isinstance(exc, TimeoutError):
        return "no handshake within the timeout"
    return str(exc) or type(exc).__name__
