"""The console's own Kafka connection, for the few APIs confluent-kafka's AdminClient lacks.

Invariants: tidelog's generic Kafka codec (:mod:`tidelog.protocol`); ApiVersions v0 first, so any Kafka
broker answers, then the SASL login when the settings ask for one (TLS is on the socket before any byte);
each request is sent at the highest version both sides speak; every socket times out after ``timeout``
seconds; a failure is a :class:`~tidelog.console.kafka.ConsoleError`.
"""

from __future__ import annotations

import socket
import struct
from typing import TypeVar

from tidelog.console.kafka import ConsoleError
from tidelog.console.wire_security import WireSecurity
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, RequestHeader
from tidelog.protocol.schema import Request, Response

__all__ = ["WireConnection"]

R = TypeVar("R", bound=Response)


class WireConnection:
    """One connection to one broker, logged in when the settings ask for it."""

    def __init__(self, host: str, port: int, timeout: float, security: WireSecurity) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = security.wrap(socket.create_connection((host, port), timeout=timeout), host)
        except OSError as exc:
            raise ConsoleError(f"cannot reach broker at {self.address}: {exc}") from None
        self._correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            versions = self.call(ApiVersionsRequest(), 0, ApiVersionsResponse)
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            security.login(lambda request: self.call(request, self.version(type(request)), Response))
        except ConsoleError:
            self.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def version(self, request_type: type[Request]) -> int:
        low, high = request_type.VALID_VERSIONS
        theirs = self.versions.get(request_type.API_KEY)
        if theirs is None or theirs[1] < low or theirs[0] > high:
            raise ConsoleError(f"broker at {self.address} does not support {request_type.__name__}")
        return min(high, theirs[1])

    def call(self, body: Request, version: int, expect: type[R]) -> R:
        self._correlation_id += 1
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=self._correlation_id,
            client_id="tidelog-console",
        )
        try:
            self._sock.sendall(encode_request(header, body))
            (size,) = struct.unpack(">i", self._recv(4))
            response_header, response = decode_response(self._recv(size), body.API_KEY, version)
        except OSError as exc:
            raise ConsoleError(f"lost the connection to {self.address}: {exc}") from None
        if response_header.correlation_id != self._correlation_id or not isinstance(response, expect):
            raise ConsoleError(f"{self.address} answered {type(body).__name__} out of order")
        return response

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise OSError("connection closed by the broker")
            data += chunk
        return bytes(data)
