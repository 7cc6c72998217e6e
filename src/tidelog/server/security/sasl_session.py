"""One connection's SASL state on a SASL_* listener (Kafka's ``SaslServerAuthenticator``), without I/O.

States and what each accepts (anything else closes the connection without an answer):

========================  ==========================================================================
``initial``               ApiVersions (served as usual); SaslHandshake (v1) choosing an enabled mechanism
``handshaken``            SaslAuthenticate carrying the mechanism's next token
``authenticated``         every request while the session lasts; SaslHandshake starts a re-authentication
                          when ``connections.max.reauth.ms`` > 0 (KIP-368), else it and SaslAuthenticate
                          reach their ordinary handlers (ILLEGAL_SASL_STATE); after the session has
                          expired, only a SaslHandshake (a re-authentication) keeps the connection
``reauthenticating``      SaslAuthenticate for the new exchange; other requests are served until expiry
``failed``                nothing (the failure's answer is the connection's last)
========================  ==========================================================================

Invariants:

- A failed step answers SASL_AUTHENTICATION_FAILED with :func:`~.scram.failure_message` (never saying why,
  never whether the user exists), an unknown mechanism UNSUPPORTED_SASL_MECHANISM with the enabled list;
  both then close the connection (:attr:`SaslReply.close`).
- State per connection is bounded: one mechanism exchange of at most a few steps, tokens of at most
  ``max_token_bytes`` (``sasl.server.max.receive.size``), nothing kept after the exchange but the
  principal, the mechanism and the session's expiry.
- A re-authentication must use the same mechanism and end as the same user (Kafka refuses to change
  principals); it then extends the session by ``max_reauth_ms``.
- Time comes in as ``now_ms`` (a monotonic clock in milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ApiKey,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from tidelog.protocol.schema import Response
from tidelog.protocol.scram import (
    SCRAM_MECHANISMS,
    CredentialLookup,
    SaslAuthenticationError,
    ScramServer,
    failure_message,
)
from tidelog.server.dispatch import KafkaPrincipal

from .plain import PlainServer

__all__ = ["SaslStateError", "SaslListenerSettings", "SaslReply", "SaslSession", "mechanism_server"]


class MechanismServer(Protocol):
    username: str | None

    @property
    def complete(self) -> bool: ...

    def evaluate(self, token: bytes) -> bytes: ...


def mechanism_server(mechanism: str, credentials: CredentialLookup) -> MechanismServer:
    """A fresh server exchange for ``mechanism`` (one of :data:`SUPPORTED_MECHANISMS`)."""
    if mechanism == "PLAIN":
        return PlainServer(credentials)
    return ScramServer(SCRAM_MECHANISMS[mechanism], credentials)


@dataclass(frozen=True, slots=True)
class SaslListenerSettings:
    """What a SASL listener allows: enabled mechanisms, the token bound, the session lifetime (0: none)."""

    mechanisms: tuple[str, ...]
    max_token_bytes: int = 524288
    max_reauth_ms: int = 0


class SaslStateError(Exception):
    """The request is not allowed in this state: close the connection without answering it."""


@dataclass(frozen=True, slots=True)
class SaslReply:
    """The answer to a SASL request handled by the session; ``close`` once it has been sent."""

    response: Response
    close: bool = False


class SaslSession:
    """Gate and SASL server for one connection; see the module docstring for the states."""

    def __init__(self, settings: SaslListenerSettings, credentials: CredentialLookup) -> None:
        self._settings = settings
        self._credentials = credentials
        self._state = "initial"
        self._exchange: MechanismServer | None = None
        self._mechanism = ""
        self.principal: KafkaPrincipal | None = None
        self._expires_at_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    @property
    def max_frame_bytes(self) -> int:
        """The largest request frame accepted before authentication."""
        return self._settings.max_token_bytes

    def receive(self, api_key: int, body: Any, now_ms: int) -> SaslReply | None:
        """Decide about one request: a :class:`SaslReply` to send, ``None`` to serve it as usual, or raise
        :class:`SaslStateError` to drop the connection."""
        state = self._state
        if state == "initial":
            if api_key == ApiKey.API_VERSIONS:
                return None
            if api_key == ApiKey.SASL_HANDSHAKE:
                return self._handshake(body)
            raise SaslStateError(f"api key {api_key} before SASL authentication")
        if state == "handshaken":
            if api_key == ApiKey.SASL_AUTHENTICATE:
                return self._authenticate(body, now_ms)
            raise SaslStateError(f"api key {api_key} during the SASL exchange, SaslAuthenticate expected")
        if state == "failed":
            raise SaslStateError("request after a failed SASL authentication")
        expired = self._expires_at_ms is not None and now_ms >= self._expires_at_ms
        if state == "reauthenticating" and api_key == ApiKey.SASL_AUTHENTICATE:
            return self._authenticate(body, now_ms)
        if api_key == ApiKey.SASL_HANDSHAKE and state == "authenticated" and self._settings.max_reauth_ms > 0:
            return self._handshake(body, reauthenticating=True)
        if expired:
            raise SaslStateError(
                "the SASL session has expired without re-authentication (connections.max.reauth.ms)"
            )
        return None

    def _handshake(self, body: SaslHandshakeRequest, *, reauthenticating: bool = False) -> SaslReply:
        enabled = list(self._settings.mechanisms)
        mechanism = body.mechanism
        if mechanism not in enabled or (reauthenticating and mechanism != self._mechanism):
            self._state = "failed"
            return SaslReply(
                SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled),
                close=True,
            )
        self._mechanism = mechanism
        self._exchange = mechanism_server(mechanism, self._credentials)
        self._state = "reauthenticating" if reauthenticating else "handshaken"
        return SaslReply(SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled))

    def _authenticate(self, body: SaslAuthenticateRequest, now_ms: int) -> SaslReply:
        exchange = self._exchange
        assert exchange is not None
        token = body.auth_bytes or b""
        try:
            if len(token) > self._settings.max_token_bytes:
                raise SaslAuthenticationError(failure_message(self._mechanism))
            challenge = exchange.evaluate(token)
            if exchange.complete:
                assert exchange.username is not None
                principal = KafkaPrincipal("User", exchange.username)
                if self.principal is not None and principal != self.principal:
                    raise SaslAuthenticationError("Cannot change principals during re-authentication")
        except SaslAuthenticationError as exc:
            self._state = "failed"
            self._exchange = None
            return SaslReply(
                SaslAuthenticateResponse(
                    error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc), auth_bytes=b""
                ),
                close=True,
            )
        lifetime = 0
        if exchange.complete:
            self._exchange = None
            self._state = "authenticated"
            self.principal = principal
            lifetime = self._settings.max_reauth_ms
            self._expires_at_ms = now_ms + lifetime if lifetime > 0 else None
        return SaslReply(
            SaslAuthenticateResponse(
                error_code=ErrorCode.NONE,
                error_message=None,
                auth_bytes=challenge,
                session_lifetime_ms=lifetime,
            )
        )
