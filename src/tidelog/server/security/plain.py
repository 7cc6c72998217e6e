"""SASL/PLAIN (RFC 4616) checked against the user's SCRAM credential: no plaintext password is stored.

Invariants:

- The one client message is ``authzid NUL authcid NUL passwd``; a non-empty authzid must equal authcid
  (Kafka's ``PlainSaslServer``).
- The password is checked by deriving the user's stored SCRAM key with its salt and iterations (the
  strongest mechanism the user has, SCRAM-SHA-512 first) and comparing in constant time. An unknown user
  costs the same key derivation as a known one and fails with the same message.
"""

from __future__ import annotations

from tidelog.protocol.scram import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialLookup,
    SaslAuthenticationError,
    ScramCredential,
    failure_message,
)

__all__ = ["PlainServer"]

_PREFERENCE = ("SCRAM-SHA-512", "SCRAM-SHA-256")
_NOBODY = ScramCredential(b"\0" * 32, b"", b"", MIN_ITERATIONS)


class PlainServer:
    """The server side of one PLAIN exchange: one :meth:`evaluate`."""

    mechanism_name = "PLAIN"

    def __init__(self, credentials: CredentialLookup) -> None:
        self._credentials = credentials
        self.username: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self.username is not None

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise SaslAuthenticationError(failure_message("PLAIN"))
        self._done = True
        try:
            authzid, authcid, password = token.decode().split("\0")
        except (ValueError, UnicodeDecodeError):
            raise SaslAuthenticationError(failure_message("PLAIN")) from None
        ok = False
        if authcid and password and (not authzid or authzid == authcid):
            for name in _PREFERENCE:
                credential = self._credentials(authcid, name)
                if credential is not None:
                    ok = credential.verify_password(SCRAM_MECHANISMS[name], password)
                    break
            else:
                _NOBODY.verify_password(
                    SCRAM_MECHANISMS[_PREFERENCE[0]], password
                )  # same cost as a real user
        if not ok:
            raise SaslAuthenticationError(failure_message("PLAIN"))
        self.username = authcid
        return b""
