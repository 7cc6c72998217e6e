"""TLS and SASL for tidelog's own wire client (:mod:`tidelog.client.wire`), from librdkafka's properties.

The CLI and the console speak a few APIs confluent-kafka lacks over their own sockets; those sockets must be
as secure as their librdkafka clients, configured by the same properties. Invariants:

- ``security.protocol`` is honoured exactly: PLAINTEXT connects plainly, SSL wraps the socket in TLS,
  SASL_PLAINTEXT logs in, SASL_SSL does both; anything else (or a SASL mechanism tidelog cannot speak,
  such as GSSAPI or OAUTHBEARER) is a :class:`~tidelog.client.wire.WireError` before any connection.
- TLS takes librdkafka's keys: ``ssl.ca.location`` (else the system's CAs), ``ssl.certificate.location``
  with ``ssl.key.location`` (and ``ssl.key.password``) for a client certificate,
  ``enable.ssl.certificate.verification=false`` to skip verification, and
  ``ssl.endpoint.identification.algorithm=none`` to skip the host name check (librdkafka's default,
  ``https``, checks it).
- The SASL login is :mod:`tidelog.protocol.sasl_client` (PLAIN, SCRAM-SHA-256/512, the server's
  signature verified), done by the wire client after ApiVersions.
- Properties it does not read are ignored here (callers that must refuse them do so by name).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tidelog.client.wire import WireError
from tidelog.protocol.scram import SCRAM_MECHANISMS

__all__ = ["WireSecurity"]

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class WireSecurity:
    """What ``security.protocol`` and the ``sasl.*`` / ``ssl.*`` properties ask of a wire connection."""

    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    sasl: tuple[str, str, str] | None = None  # (mechanism, username, password)

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> WireSecurity:
        """Raises :class:`WireError` for a setting tidelog's wire client cannot honour."""

        def get(key: str, default: str = "") -> str:
            value = settings.get(key)
            return default if value is None else str(value)

        protocol = get("security.protocol", "PLAINTEXT").upper()
        if protocol not in _PROTOCOLS:
            raise WireError(f"security.protocol={protocol} is not one of {', '.join(_PROTOCOLS)}")
        tls = _tls_context(get) if protocol in ("SSL", "SASL_SSL") else None
        sasl = None
        if protocol.startswith("SASL_"):
            mechanism = get("sasl.mechanism", get("sasl.mechanisms", "GSSAPI")).upper()
            if mechanism != "PLAIN" and mechanism not in SCRAM_MECHANISMS:
                raise WireError(
                    f"tidelog's own wire connections log in with PLAIN or SCRAM, not sasl.mechanism={mechanism}"
                )
            sasl = (mechanism, get("sasl.username"), get("sasl.password"))
        return cls(protocol, tls, sasl)


def _tls_context(get: Callable[..., str]) -> ssl.SSLContext:
    ca = get("ssl.ca.location") or None
    try:
        context = ssl.create_default_context(cafile=ca)
        certificate, key = get("ssl.certificate.location"), get("ssl.key.location")
        if certificate:
            context.load_cert_chain(certificate, key or None, password=get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise WireError(f"cannot load the TLS settings (ssl.*.location): {exc}") from None
    if get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    if get("enable.ssl.certificate.verification", "true").lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
