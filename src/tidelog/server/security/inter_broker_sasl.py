"""The SASL login a broker performs on its own connections to other brokers (cluster mode).

:func:`inter_broker_authenticate` returns the ``authenticate`` hook of
:class:`~tidelog.server.cluster.broker_client.BrokerClient` (``(connection, exchange) -> awaitable``, run on
every new connection after ApiVersions) when the inter-broker listener's security protocol is SASL_*, and
``None`` otherwise.

Invariants: the mechanism is ``sasl.mechanism.inter.broker.protocol`` and the credentials come from
``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (else ``sasl.jaas.config``), read once at start-up
so a missing or malformed login is a ConfigError then, not a replication failure later; a refused login
fails that connect with ``ConnectionRefusedError`` (an ``OSError``, which BrokerClient turns into a
back-off and retry), its message naming the peer and the broker's answer, never the password.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.protocol.messages import ApiKey
from tidelog.protocol.sasl_client import authenticate_async
from tidelog.protocol.schema import Request, Response
from tidelog.protocol.scram import SaslAuthenticationError
from tidelog.server.cluster.inter_broker import inter_broker_listener_name
from tidelog.server.config import BrokerConfig

from .sasl_config import inter_broker_login

__all__ = ["Exchange", "inter_broker_authenticate"]

Exchange = Callable[[Request, int], Awaitable[Response]]
"""``exchange(request, version)``: one request on the connection being set up."""

_HIGHEST: dict[int, int] = {ApiKey.SASL_HANDSHAKE: 1, ApiKey.SASL_AUTHENTICATE: 2}


def inter_broker_authenticate(config: BrokerConfig) -> Callable[[Any, Exchange], Awaitable[None]] | None:
    """The BrokerClient ``authenticate`` hook for this broker's config, or ``None`` without SASL."""
    listener_name = inter_broker_listener_name(config)
    protocol = next(
        (listener.security_protocol for listener in config.listeners if listener.name == listener_name),
        config.security_inter_broker_protocol,
    )
    if not protocol.upper().startswith("SASL_"):
        return None
    mechanism, username, password = inter_broker_login(config, listener_name)

    async def authenticate(connection: Any, exchange: Exchange) -> None:
        versions: dict[int, tuple[int, int]] = getattr(connection, "api_versions", None) or {}

        async def send(request: Request) -> Response:
            low, high = versions.get(request.API_KEY, (1, _HIGHEST[request.API_KEY]))
            return await exchange(request, max(low, min(high, _HIGHEST[request.API_KEY])))

        try:
            await authenticate_async(send, mechanism, username, password)
        except SaslAuthenticationError as exc:
            peer = getattr(connection, "address", "the broker")
            raise ConnectionRefusedError(
                f"SASL {mechanism} login as {username} to {peer} failed: {exc}"
            ) from None

    return authenticate
