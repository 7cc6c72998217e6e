"""What an inter-broker request can fail with (:class:`~tidelog.server.cluster.broker_client.BrokerClient`).

Invariants: every error names the destination node (and its address, when one was known); none of them
says whether the destination acted on the request. A :class:`DisconnectedError` or
:class:`RequestTimeoutError` may come after the peer applied it (the answer was lost), so only idempotent
requests, or requests the peer fences by epoch, are simply sent again.
"""

from __future__ import annotations

__all__ = [
    "BrokerClientError",
    "BrokerNotAvailableError",
    "DisconnectedError",
    "RequestTimeoutError",
    "UnsupportedApiVersionError",
]


def _where(node_id: int, address: tuple[str, int] | None) -> str:
    return f"node {node_id}" if address is None else f"node {node_id} at {address[0]}:{address[1]}"


class BrokerClientError(Exception):
    """A request to another broker did not get its response."""

    def __init__(self, node_id: int, address: tuple[str, int] | None, reason: str) -> None:
        super().__init__(f"{_where(node_id, address)}: {reason}")
        self.node_id = node_id
        self.address = address
        self.reason = reason


class BrokerNotAvailableError(BrokerClientError):
    """The node has no endpoint, cannot be connected to (refused, unreachable, no ApiVersions answer within
    the connect timeout), or is in its reconnect backoff until the request's deadline. Nothing was sent."""


class DisconnectedError(BrokerClientError):
    """The connection ended (closed by the peer or by this side, or broken by a bad response) while the
    request was in flight: it may or may not have been acted on."""


class RequestTimeoutError(BrokerClientError):
    """No response came before the request's deadline. The connection it was sent on is closed (responses
    come in order, so every request behind it on that connection is stuck as well)."""


class UnsupportedApiVersionError(BrokerClientError):
    """The node does not speak the request at that version (per its ApiVersions answer); nothing was sent."""

    def __init__(
        self, node_id: int, address: tuple[str, int] | None, api_key: int, version: int, supported: str
    ) -> None:
        super().__init__(
            node_id, address, f"api key {api_key} version {version} is not supported ({supported})"
        )
        self.api_key = api_key
        self.version = version
