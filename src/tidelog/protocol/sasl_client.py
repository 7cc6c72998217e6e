"""The client side of a SASL login (PLAIN, SCRAM-SHA-256/512) over SaslHandshake v1 + SaslAuthenticate.

Used where tidelog itself is the client: a broker's connections to other brokers, the CLI's own wire
client and the console's. Pure (no sockets, no server state), so every layer above the protocol may use it. :class:`SaslClientExchange` is I/O-free; :func:`authenticate` and :func:`authenticate_async` drive
it over any ``send(request) -> response``.

Invariants: a SCRAM login succeeds only when the server proved it knows the credential (its server-final
signature checks out); every failure raises :class:`~.scram.SaslAuthenticationError` with the broker's
message (or ours), never the password.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from tidelog.protocol.scram import SCRAM_MECHANISMS, SaslAuthenticationError, ScramClient

from .errors import ErrorCode
from .messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from .schema import Request, Response

__all__ = ["SaslClientExchange", "authenticate", "authenticate_async", "plain_message"]


def plain_message(username: str, password: str) -> bytes:
    """The client's PLAIN token (RFC 4616, empty authzid): ``NUL username NUL password``."""
    return f"\0{username}\0{password}".encode()


class SaslClientExchange:
    """One client login: :meth:`handshake`, then :meth:`first_token`, then :meth:`next_token` per reply."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism != "PLAIN" and mechanism not in SCRAM_MECHANISMS:
            raise SaslAuthenticationError(f"tidelog cannot log in with SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._scram = (
            ScramClient(SCRAM_MECHANISMS[mechanism], username, password)
            if mechanism in SCRAM_MECHANISMS
            else None
        )
        self._step = 0

    def handshake(self) -> SaslHandshakeRequest:
        return SaslHandshakeRequest(mechanism=self.mechanism)

    def check_handshake(self, response: SaslHandshakeResponse) -> None:
        if response.error_code != ErrorCode.NONE:
            enabled = ", ".join(response.mechanisms or [])
            raise SaslAuthenticationError(
                f"the broker refused SASL mechanism {self.mechanism} (error {ErrorCode(response.error_code).name}"
                f"; enabled: {enabled or 'none'})"
            )

    def first_token(self) -> bytes:
        return (
            plain_message(self._username, self._password)
            if self._scram is None
            else self._scram.first_message()
        )

    def next_token(self, response: SaslAuthenticateResponse) -> bytes | None:
        """The token to send after ``response``, or ``None`` when the login is complete."""
        if response.error_code != ErrorCode.NONE:
            raise SaslAuthenticationError(response.error_message or ErrorCode(response.error_code).name)
        self._step += 1
        if self._scram is None:
            return None
        if self._step == 1:
            return self._scram.final_message(response.auth_bytes or b"")
        self._scram.verify_server_final(response.auth_bytes or b"")
        return None


def authenticate(send: Callable[[Request], Response], mechanism: str, username: str, password: str) -> None:
    """Log in over a blocking ``send``; raises :class:`SaslAuthenticationError`."""
    exchange = SaslClientExchange(mechanism, username, password)
    handshake = send(exchange.handshake())
    assert isinstance(handshake, SaslHandshakeResponse)
    exchange.check_handshake(handshake)
    token: bytes | None = exchange.first_token()
    while token is not None:
        reply = send(SaslAuthenticateRequest(auth_bytes=token))
        assert isinstance(reply, SaslAuthenticateResponse)
        token = exchange.next_token(reply)


async def authenticate_async(
    send: Callable[[Request], Awaitable[Response]], mechanism: str, username: str, password: str
) -> None:
    """:func:`authenticate` over an asyncio ``send`` (a broker's connection to another broker)."""
    exchange = SaslClientExchange(mechanism, username, password)
    handshake = await send(exchange.handshake())
    assert isinstance(handshake, SaslHandshakeResponse)
    exchange.check_handshake(handshake)
    token: bytes | None = exchange.first_token()
    while token is not None:
        reply = await send(SaslAuthenticateRequest(auth_bytes=token))
        assert isinstance(reply, SaslAuthenticateResponse)
        token = exchange.next_token(reply)
