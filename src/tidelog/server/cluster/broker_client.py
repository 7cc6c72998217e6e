"""Requests from this broker to other brokers over the Kafka protocol (Kafka's ``NetworkClient`` with the
request-and-wait shape of its ``InterBrokerSendThread``, much smaller): a follower's Fetch to its leader,
WriteTxnMarkers to partition leaders, ControlledShutdown to the controller.

Invariants:

- One connection per destination node id, opened by the first :meth:`BrokerClient.send` to it and reused;
  requests are pipelined on it and matched to their responses by correlation id (client_connection.py).
  A connection counts as open once the peer has answered ApiVersions (sent at v3 on connect, within
  ``connect_timeout_ms``); the answer is kept, and a request at a version the peer does not speak is refused
  here (:class:`UnsupportedApiVersionError`) instead of making the peer close the connection.
- The destination's address is asked of ``endpoint_for`` at every send. ``None`` fails the send with
  :class:`BrokerNotAvailableError`; a different address than the open (or opening) connection's closes that
  connection (its requests in flight fail with :class:`DisconnectedError`), forgets the backoff, and
  connects to the new address (a broker restarted on another port).
- Concurrent sends to a node that is not connected share one connection attempt. When it fails, or an open
  connection ends (peer close, a bad response, a request timeout), the node's failed-attempt count grows and
  the next attempt waits for Kafka's reconnect backoff: ``reconnect_backoff_ms * 2**(failures - 1)``, at most
  ``reconnect_backoff_max_ms``, times a random factor in [0.8, 1.2) (and still at most the maximum). A
  connection that opens resets the count. A send that arrives during the backoff waits it out (without
  spinning) within its own deadline, then connects: no more than one attempt per backoff, whoever retries.
- Every send has a deadline (``request_timeout_ms`` or its own ``timeout_ms``) covering the backoff wait,
  the connect, the write and the response. Past it the send raises :class:`RequestTimeoutError` and, if the
  request was on a connection, that connection is closed: responses come in order, so everything behind the
  request is stuck with it (Kafka disconnects on a request timeout too). A connect that fails or outlasts
  ``connect_timeout_ms`` raises :class:`BrokerNotAvailableError`.
- Over TLS when given ``ssl_context`` (an SSL / SASL_SSL inter-broker listener; the peer verified against it,
  its host name too when the context checks host names); ``authenticate``, when given, runs on each new
  connection after ApiVersions and before any request is sent (SASL's place), within ``connect_timeout_ms``.
- Nothing blocks the event loop and nothing polls; each node's state is its own, so a slow or dead node
  delays only the requests sent to it.
- :meth:`BrokerClient.close` and :meth:`BrokerClient.close_all` fail what is in flight at once
  (:class:`DisconnectedError`; a send waiting for a connect gets :class:`BrokerNotAvailableError`), forget
  the node's state and return once the sockets are released. The client stays usable.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, overload

from tidelog import __version__
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ProduceRequest,
    RequestHeader,
)
from tidelog.protocol.schema import Request, Response

from .client_connection import ClientConnection
from .client_errors import (
    BrokerClientError,
    BrokerNotAvailableError,
    DisconnectedError,
    RequestTimeoutError,
    UnsupportedApiVersionError,
)

__all__ = [
    "Authenticate",
    "BrokerClient",
    "BrokerClientError",
    "BrokerNotAvailableError",
    "ConnectionState",
    "DisconnectedError",
    "RequestTimeoutError",
    "UnsupportedApiVersionError",
    "reconnect_backoff_ms",
]

log = logging.getLogger("tidelog.broker_client")

R = TypeVar("R", bound=Response)
Address = tuple[str, int]
Exchange = Callable[[Request, int], Awaitable[Response]]
Authenticate = Callable[[ClientConnection, Exchange], Awaitable[None]]
"""The hook a SASL_* inter-broker listener plugs its client-side exchange into: called on every new
connection after ApiVersions, with the connection (its ``api_versions``, ``address``) and ``exchange(request,
version)`` to send on it; it raises (a :class:`BrokerClientError` or ``OSError``) to fail the connect."""

_API_VERSIONS_VERSION = 3  # flexible, names the client software; every Kafka since 2.4 and every tidelog
_BACKOFF_JITTER = 0.2  # Kafka's CommonClientConfigs.RECONNECT_BACKOFF_JITTER
_CORRELATION_IDS = 1 << 31


def reconnect_backoff_ms(failed_attempts: int, initial_ms: float, max_ms: float, random_01: float) -> float:
    """Kafka's reconnect backoff after ``failed_attempts`` (>= 1) failures in a row: ``initial_ms`` doubled
    per earlier failure, capped at ``max_ms``, times ``1 - 0.2 + 0.4 * random_01``, and at most ``max_ms``."""
    if failed_attempts <= 0:
        return 0.0
    term = min(initial_ms * 2.0 ** min(failed_attempts - 1, 62), max_ms)
    factor = 1.0 - _BACKOFF_JITTER + 2 * _BACKOFF_JITTER * random_01
    return min(term * factor, max_ms)


@dataclass(frozen=True, slots=True)
class ConnectionState:
    """What the client knows of one node, for logs, metrics and tests."""

    node_id: int
    address: Address | None
    """The endpoint last used for this node (``None`` before the first send)."""
    connected: bool
    connecting: bool
    in_flight: int
    failed_attempts: int
    """Failed connects and ended connections since the last connection that opened."""
    reconnect_backoff_ms: float
    """The backoff chosen after the last failure (0 after a connection opened)."""
    api_versions: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    """The peer's ApiVersions answer while connected: api key -> (min, max)."""


class _Node:
    """Connection state of one destination node."""

    __slots__ = (
        "address",
        "attempt",
        "attempt_task",
        "backoff_ms",
        "connection",
        "failed_attempts",
        "node_id",
        "retry_at",
    )

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.address: Address | None = None
        self.connection: ClientConnection | None = None  # only ever an open connection
        self.attempt: asyncio.Future[ClientConnection] | None = None  # outcome of the connect under way
        self.attempt_task: asyncio.Task[None] | None = None
        self.failed_attempts = 0
        self.backoff_ms = 0.0
        self.retry_at = 0.0  # loop time before which no new connect starts


def _retrieve(future: asyncio.Future[ClientConnection]) -> None:
    # An attempt nobody waits for any more must not be reported as "exception never retrieved".
    if not future.cancelled():
        future.exception()


class BrokerClient:
    """Sends requests to other brokers of the cluster, by node id."""

    def __init__(
        self,
        node_id_of_self: int,
        endpoint_for: Callable[[int], Address | None],
        *,
        client_id: str | None = None,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1_000,
        max_response_bytes: int = 104_857_600,
        ssl_context: ssl.SSLContext | None = None,
        authenticate: Authenticate | None = None,
    ) -> None:
        if request_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ValueError("request_timeout_ms and connect_timeout_ms must be positive")
        if reconnect_backoff_ms < 0 or reconnect_backoff_max_ms < reconnect_backoff_ms:
            raise ValueError("need 0 <= reconnect_backoff_ms <= reconnect_backoff_max_ms")
        self.node_id_of_self = node_id_of_self
        self.client_id = client_id if client_id is not None else f"broker-{node_id_of_self}"
        self._endpoint_for = endpoint_for
        self._request_timeout_ms = request_timeout_ms
        self._connect_timeout_ms = connect_timeout_ms
        self._backoff_initial_ms = reconnect_backoff_ms
        self._backoff_max_ms = reconnect_backoff_max_ms
        self._max_response_bytes = max_response_bytes
        self._ssl_context = ssl_context
        self._authenticate = authenticate
        self._nodes: dict[int, _Node] = {}
        self._correlation_ids = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ended: set[ClientConnection] = set()  # closed, socket not yet released

    # -- sending ------------------------------------------------------------------------------------------

    @overload
    async def send(
        self, node_id: int, request: Request, version: int, *, timeout_ms: int | None = None
    ) -> Response: ...

    @overload
    async def send(
        self, node_id: int, request: Request, version: int, *, timeout_ms: int | None = None, expect: type[R]
    ) -> R: ...

    async def send(
        self,
        node_id: int,
        request: Request,
        version: int,
        *,
        timeout_ms: int | None = None,
        expect: type[Response] = Response,
    ) -> Response:
        """Send ``request`` at ``version`` to ``node_id`` and return its response (an ``expect``).

        Raises :class:`BrokerNotAvailableError`, :class:`RequestTimeoutError`, :class:`DisconnectedError` or
        :class:`UnsupportedApiVersionError`; a request that cannot be encoded raises ``LocalProtocolError``,
        a Produce with acks=0 (it gets no response) or a ``timeout_ms`` below 1 raises ``ValueError``.
        """
        if isinstance(request, ProduceRequest) and request.acks == 0:
            raise ValueError(
                "a Produce request with acks=0 gets no response; BrokerClient waits for responses"
            )
        loop = asyncio.get_running_loop()
        timeout_ms = self._request_timeout_ms if timeout_ms is None else timeout_ms
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be positive, not {timeout_ms}")
        deadline = loop.time() + timeout_ms / 1000
        connection = await self._connection(node_id, deadline, timeout_ms)
        supported = connection.api_versions.get(request.API_KEY)
        if supported is None or not supported[0] <= version <= supported[1]:
            what = "not at all" if supported is None else f"versions {supported[0]}-{supported[1]}"
            raise UnsupportedApiVersionError(
                node_id, connection.address, request.API_KEY, version, f"the node speaks it {what}"
            )
        future = connection.submit(self._header(request, version), request)
        try:
            async with asyncio.timeout_at(deadline):
                await connection.drain()
                response = await future
        except TimeoutError:
            connection.abort(f"request (api key {request.API_KEY}) timed out after {timeout_ms} ms")
            raise RequestTimeoutError(
                node_id, connection.address, f"no response within {timeout_ms} ms (api key {request.API_KEY})"
            ) from None
        if not isinstance(response, expect):
            raise TypeError(
                f"{type(request).__name__} is answered by a {type(response).__name__}, not {expect}"
            )
        return response

    def _header(self, request: Request, version: int) -> RequestHeader:
        return RequestHeader(
            request_api_key=request.API_KEY,
            request_api_version=version,
            correlation_id=next(self._correlation_ids) % _CORRELATION_IDS,
            client_id=self.client_id,
        )

    async def _connection(self, node_id: int, deadline: float, timeout_ms: int) -> ClientConnection:
        """The node's open connection: waits out its backoff and joins or starts a connect."""
        loop = asyncio.get_running_loop()
        while True:
            node = self._nodes.get(node_id)
            if node is None:
                node = self._nodes[node_id] = _Node(node_id)
            address = self._endpoint_for(node_id)
            if address is None:
                raise BrokerNotAvailableError(node_id, None, "no endpoint is known for it")
            if address != node.address:
                self._readdress(node, address)
            if node.connection is not None:
                return node.connection
            attempt = node.attempt
            if attempt is None:
                wait = node.retry_at - loop.time()
                if wait > 0:
                    left = deadline - loop.time()
                    await asyncio.sleep(max(0.0, min(wait, left)))
                    if wait >= left:
                        raise BrokerNotAvailableError(
                            node_id,
                            address,
                            f"reconnect backoff of {node.backoff_ms:.0f} ms outlasts the request",
                        )
                    continue  # the endpoint or the node's state may have changed meanwhile
                attempt = self._start_connect(node, address)
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.shield(attempt)
            except TimeoutError:
                raise RequestTimeoutError(
                    node_id, address, f"not connected within the request timeout of {timeout_ms} ms"
                ) from None

    # -- connecting ---------------------------------------------------------------------------------------

    def _start_connect(self, node: _Node, address: Address) -> asyncio.Future[ClientConnection]:
        loop = asyncio.get_running_loop()
        attempt: asyncio.Future[ClientConnection] = loop.create_future()
        attempt.add_done_callback(_retrieve)
        node.attempt = attempt
        task = loop.create_task(self._connect(node, address, attempt))
        node.attempt_task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return attempt

    async def _connect(
        self, node: _Node, address: Address, attempt: asyncio.Future[ClientConnection]
    ) -> None:
        loop = asyncio.get_running_loop()
        connection = ClientConnection(
            node.node_id,
            address,
            max_response_bytes=self._max_response_bytes,
            on_close=self._ended_connection,
        )
        host, port = address
        try:
            async with asyncio.timeout(self._connect_timeout_ms / 1000):
                await loop.create_connection(
                    lambda: connection,
                    host,
                    port,
                    ssl=self._ssl_context,
                    server_hostname=host if self._ssl_context is not None else None,
                )
                connection.api_versions = await self._api_versions(connection)
                if self._authenticate is not None:  # SASL_* inter-broker listeners: the SASL exchange
                    await self._authenticate(connection, functools.partial(self._exchange, connection))
            if connection.closed:
                raise DisconnectedError(node.node_id, address, "connection closed right after ApiVersions")
        except asyncio.CancelledError:
            connection.abort("connect cancelled")
            raise
        except (OSError, TimeoutError, BrokerClientError) as exc:
            connection.abort("connect failed")
            if isinstance(exc, TimeoutError):
                reason = f"not connected within {self._connect_timeout_ms} ms (TCP connect and ApiVersions)"
            else:
                reason = exc.reason if isinstance(exc, BrokerClientError) else str(exc)
            error = BrokerNotAvailableError(node.node_id, address, f"cannot connect: {reason}")
            error.__cause__ = exc
            if node.attempt is attempt:
                node.attempt = node.attempt_task = None
                self._failed(node, f"connect failed: {reason}")
            if not attempt.done():
                attempt.set_exception(error)
            return
        if node.attempt is not attempt:  # superseded (closed, or another address) while connecting
            connection.abort("connect superseded")
            return
        node.attempt = node.attempt_task = None
        node.connection = connection
        node.failed_attempts = 0
        node.backoff_ms = 0.0
        node.retry_at = 0.0
        log.debug("node %s: connected to %s:%s", node.node_id, host, port)
        attempt.set_result(connection)

    async def _exchange(self, connection: ClientConnection, request: Request, version: int) -> Response:
        """One request on ``connection`` while it is being set up (the ``authenticate`` hook's sends)."""
        return await connection.submit(self._header(request, version), request)

    async def _api_versions(self, connection: ClientConnection) -> dict[int, tuple[int, int]]:
        request = ApiVersionsRequest(client_software_name="tidelog", client_software_version=__version__)
        response = await connection.submit(self._header(request, _API_VERSIONS_VERSION), request)
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code != ErrorCode.NONE:
            raise BrokerNotAvailableError(
                connection.node_id, connection.address, f"ApiVersions failed with error {response.error_code}"
            )
        return {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}

    def _ended_connection(self, connection: ClientConnection) -> None:
        """A connection ended (any cause): if it was its node's open connection, the node backs off."""
        if not connection.released.done():
            self._ended.add(connection)
            connection.released.add_done_callback(lambda _released: self._ended.discard(connection))
        node = self._nodes.get(connection.node_id)
        if node is not None and node.connection is connection:
            node.connection = None
            self._failed(node, "connection ended")

    def _failed(self, node: _Node, reason: str) -> None:
        node.failed_attempts += 1
        node.backoff_ms = reconnect_backoff_ms(
            node.failed_attempts, self._backoff_initial_ms, self._backoff_max_ms, random.random()
        )
        node.retry_at = asyncio.get_running_loop().time() + node.backoff_ms / 1000
        log.info(
            "node %s at %s: %s; next connect in %.0f ms (failure %d in a row)",
            node.node_id,
            node.address,
            reason,
            node.backoff_ms,
            node.failed_attempts,
        )

    def _readdress(self, node: _Node, address: Address) -> None:
        if node.address is not None:
            log.info("node %s: endpoint changed from %s to %s", node.node_id, node.address, address)
        self._reset(node, f"endpoint changed to {address[0]}:{address[1]}")
        node.address = address

    def _reset(self, node: _Node, reason: str) -> None:
        """Drop the node's connection and connect attempt (nothing counted as a failure) and its backoff."""
        connection, node.connection = node.connection, None
        if connection is not None:
            connection.abort(reason)
        attempt, task = node.attempt, node.attempt_task
        node.attempt = node.attempt_task = None
        if task is not None:
            task.cancel()
        if attempt is not None and not attempt.done():
            attempt.set_exception(
                BrokerNotAvailableError(node.node_id, node.address, f"connect abandoned: {reason}")
            )
        node.failed_attempts = 0
        node.backoff_ms = 0.0
        node.retry_at = 0.0

    # -- state and closing --------------------------------------------------------------------------------

    def connection_state(self, node_id: int) -> ConnectionState | None:
        """What the client knows of ``node_id`` (``None`` if it never sent to it, or closed it since)."""
        node = self._nodes.get(node_id)
        if node is None:
            return None
        connection = node.connection
        return ConnectionState(
            node_id=node_id,
            address=node.address,
            connected=connection is not None,
            connecting=node.attempt is not None,
            in_flight=0 if connection is None else connection.in_flight,
            failed_attempts=node.failed_attempts,
            reconnect_backoff_ms=node.backoff_ms,
            api_versions=dict(connection.api_versions) if connection is not None else {},
        )

    async def close(self, node_id: int) -> None:
        """Close the connection to ``node_id`` and forget its state (the next send connects at once)."""
        node = self._nodes.pop(node_id, None)
        if node is not None:
            self._reset(node, "closed by this broker")
        await self._settle()

    async def close_all(self) -> None:
        """:meth:`close` every node."""
        nodes = list(self._nodes.values())
        self._nodes.clear()
        for node in nodes:
            self._reset(node, "closed by this broker")
        await self._settle()

    async def _settle(self) -> None:
        """Until cancelled connects have ended and ended connections have released their sockets."""
        tasks = [task for task in self._tasks if task.done() or task.cancelling()]
        if tasks:
            await asyncio.wait(tasks)
        if self._ended:
            await asyncio.wait([connection.released for connection in self._ended])
