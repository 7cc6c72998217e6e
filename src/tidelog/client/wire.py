"""A small blocking Kafka client over tidelog's own codec, for the APIs the bundled Kafka clients lack
(confluent-kafka 2.16's AdminClient has no ListTransactions / DescribeTransactions): the CLI's commands and
the web console both speak through it.

Invariants: every request goes at the highest version both sides support (ApiVersions v0 first, so any
Kafka broker answers); a connection failure or a version the broker lacks raises :class:`WireError` with a
one-line message (the CLI turns it into ``Error: ...``, exit 1; the console into an error page), marked
``retriable`` when the broker could not be reached or the connection was lost (a refused or reset
connection, a timeout: a broker restarting); sockets time out after ``timeout``. Given a ``tls`` context the connection speaks TLS before any byte (SSL and
SASL_SSL listeners; the broker's host name is checked when the context says so); given a ``sasl`` login
(mechanism, username, password), the client logs in right after ApiVersions, as any Kafka client does on a
SASL_* listener (a failed login never shows the password). A connection that fails while it is being set
up is closed. :mod:`tidelog.client.security` builds ``tls`` and ``sasl`` from librdkafka's properties.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import TypeVar, overload

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.messages import REQUEST_TYPES, ApiVersionsRequest, ApiVersionsResponse, RequestHeader
from tidelog.protocol.schema import Request, Response

__all__ = ["WireClient", "WireError", "connect"]

R = TypeVar("R", bound=Response)


class WireError(Exception):
    """The broker could not be reached, or cannot serve a request. ``retriable``: asking again later may
    work (the broker was unreachable, the connection was lost or timed out, or a retriable error code)."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class WireClient:
    """One connection to one broker."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float,
        client_id: str = "tidelog-cli",
        sasl: tuple[str, str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise WireError(
                f"cannot reach broker at {self.address} within {timeout:g} s: {exc}", retriable=True
            ) from None
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
            try:
                sock.do_handshake()
            except OSError as exc:  # ssl.SSLError included
                sock.close()
                raise WireError(f"TLS handshake with {self.address} failed: {exc}") from None
        self._sock = sock
        self._correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            self._handshake(sasl)
        except WireError:
            self.close()
            raise

    def _handshake(self, sasl: tuple[str, str, str] | None) -> None:
        response = self._call(ApiVersionsRequest(), 0, ApiVersionsResponse)
        if response.error_code:
            raise WireError(f"broker at {self.address} refused ApiVersions (error {response.error_code})")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if sasl is not None:
            from tidelog.protocol.sasl_client import authenticate
            from tidelog.protocol.scram import SaslAuthenticationError

            try:
                authenticate(self.call, *sasl)
            except SaslAuthenticationError as exc:
                raise WireError(f"cannot log in to {self.address}: {exc}") from None

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def version_for(self, request_type: type[Request], highest: int | None = None) -> int:
        """The highest version of ``request_type`` both sides speak (at most ``highest``)."""
        ours_low, ours_high = request_type.VALID_VERSIONS
        if highest is not None:
            ours_high = min(ours_high, highest)
        theirs = self.versions.get(request_type.API_KEY)
        if theirs is None or theirs[1] < ours_low or theirs[0] > ours_high:
            name = request_type.__name__.removesuffix("Request")
            raise WireError(f"broker at {self.address} does not support {name}")
        return min(ours_high, theirs[1])

    @overload
    def call(self, body: Request, version: int | None = None) -> Response: ...

    @overload
    def call(self, body: Request, version: int | None = None, *, expect: type[R]) -> R: ...

    def call(
        self, body: Request, version: int | None = None, *, expect: type[Response] = Response
    ) -> Response:
        """Send ``body`` (at ``version``, else the best common one) and return the decoded response, which
        must be an ``expect`` (the response class of ``body``'s API)."""
        cls = REQUEST_TYPES[body.API_KEY]
        return self._call(body, self.version_for(cls) if version is None else version, expect)

    def _call(self, body: Request, version: int, expect: type[R]) -> R:
        self._correlation_id += 1
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=self._correlation_id,
            client_id=self.client_id,
        )
        try:
            self._sock.sendall(encode_request(header, body))
            (size,) = struct.unpack(">i", self._recv_exact(4))
            response_header, response = decode_response(self._recv_exact(size), body.API_KEY, version)
        except OSError as exc:
            raise WireError(f"lost the connection to {self.address}: {exc}", retriable=True) from None
        if response_header.correlation_id != self._correlation_id:
            raise WireError(f"{self.address} answered out of order")
        if not isinstance(response, expect):
            raise WireError(f"{self.address} answered {type(body).__name__} with a {type(response).__name__}")
        return response

    def _recv_exact(self, n: int) -> bytes:
        data = bytearray(n)
        view = memoryview(data)
        got = 0
        while got < n:  # into one buffer: a Fetch answer of megabytes is not copied chunk by chunk
            k = self._sock.recv_into(view[got:], n - got)
            if not k:
                raise OSError("connection closed by the broker")
            got += k
        return bytes(data)


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise WireError(f"bad broker address {address!r} (expected HOST:PORT)")
    return host.strip("[]") or "127.0.0.1", int(port)


def connect(
    bootstrap: str,
    *,
    timeout: float,
    sasl: tuple[str, str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> WireClient:
    """A connection to the first reachable broker of a comma-separated ``bootstrap`` list."""
    errors: list[WireError] = []
    for address in bootstrap.split(","):
        host, port = _split(address)
        try:
            return WireClient(host, port, timeout=timeout, sasl=sasl, tls=tls)
        except WireError as exc:
            errors.append(exc)
    raise errors[-1] if errors else WireError("no bootstrap server given")
