"""TLS and SASL for the console's own Kafka wire connections, from the console's librdkafka settings.

The console speaks a few APIs confluent-kafka lacks over its own sockets; those sockets must be as secure
as its librdkafka clients. Invariants:

- ``security.protocol`` is honoured exactly: PLAINTEXT connects plainly, SSL wraps the socket in TLS,
  SASL_PLAINTEXT logs in, SASL_SSL does both; anything else (or a SASL mechanism tidelog cannot speak,
  such as GSSAPI or OAUTHBEARER) is a :class:`~tidelog.console.kafka.ConsoleError` before any connection.
- TLS takes librdkafka's keys: ``ssl.ca.location`` (else the system's CAs), ``ssl.certificate.location``
  with ``ssl.key.location`` (and ``ssl.key.password``) for a client certificate,
  ``enable.ssl.certificate.verification=false`` to skip verification, and
  ``ssl.endpoint.identification.algorithm=none`` to skip the host name check (librdkafka's default,
  ``https``, checks it).
- The SASL login is :mod:`tidelog.protocol.sasl_client` (PLAIN, SCRAM-SHA-256/512, the server's
  signature verified) after ApiVersions; a failed login is a ConsoleError that never shows the password.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidelog.console.kafka import ConsoleError
from tidelog.protocol.sasl_client import authenticate
from tidelog.protocol.schema import Request, Response
from tidelog.protocol.scram import SCRAM_MECHANISMS, SaslAuthenticationError

__all__ = ["WireSecurity"]

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class WireSecurity:
    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    sasl: tuple[str, str, str] | None = None  # (mechanism, username, password)

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> WireSecurity:
        def get(key: str, default: str = "") -> str:
            value = settings.get(key)
            return default if value is None else str(value)

        protocol = get("security.protocol", "PLAINTEXT").upper()
        if protocol not in _PROTOCOLS:
            raise ConsoleError(f"security.protocol={protocol} is not one of {', '.join(_PROTOCOLS)}")
        tls = _tls_context(get) if protocol in ("SSL", "SASL_SSL") else None
        sasl = None
        if protocol.startswith("SASL_"):
            mechanism = get("sasl.mechanism", get("sasl.mechanisms", "GSSAPI")).upper()
            if mechanism != "PLAIN" and mechanism not in SCRAM_MECHANISMS:
                raise ConsoleError(
                    f"the console's own connections (transactions, the ACL check) log in with PLAIN or SCRAM, "
                    f"not sasl.mechanism={mechanism}"
                )
            sasl = (mechanism, get("sasl.username"), get("sasl.password"))
        return cls(protocol, tls, sasl)

    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """``sock`` in TLS when the protocol asks for it (the handshake done), else ``sock``."""
        if self.tls is None:
            return sock
        wrapped = self.tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        try:
            wrapped.do_handshake()
        except OSError as exc:  # ssl.SSLError included
            wrapped.close()
            raise ConsoleError(f"TLS handshake with {host} failed: {exc}") from None
        return wrapped

    def login(self, send: Callable[[Request], Response]) -> None:
        """Log in over ``send`` when the protocol is SASL_*; raises ConsoleError on failure."""
        if self.sasl is None:
            return
        mechanism, username, password = self.sasl
        try:
            authenticate(send, mechanism, username, password)
        except SaslAuthenticationError as exc:
            raise ConsoleError(f"SASL {mechanism} login as {username!r} failed: {exc}") from None


def _tls_context(get: Callable[..., str]) -> ssl.SSLContext:
    ca = get("ssl.ca.location") or None
    try:
        context = ssl.create_default_context(cafile=ca)
        certificate, key = get("ssl.certificate.location"), get("ssl.key.location")
        if certificate:
            context.load_cert_chain(certificate, key or None, password=get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConsoleError(f"cannot load the TLS settings (ssl.*.location): {exc}") from None
    if get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    if get("enable.ssl.certificate.verification", "true").lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
