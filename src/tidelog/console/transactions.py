"""Open and hanging transactions, read with ListTransactions and DescribeTransactions from every broker.

confluent-kafka's AdminClient lacks both APIs, so this module speaks them itself over tidelog's generic
Kafka codec (:mod:`tidelog.protocol`; ApiVersions v0 first, so any Kafka broker answers). Invariants: each
broker is asked for the transactions it coordinates, and those are described on the same connection (a
broker coordinates what it lists); plaintext connections only -- when the console was given
``security.protocol`` other than PLAINTEXT, :func:`open_transactions` raises :class:`ConsoleError` instead
of connecting without the configured security; every socket times out after ``timeout`` seconds.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from tidelog.console.kafka import ConsoleError
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    RequestHeader,
)
from tidelog.protocol.schema import Request, Response

__all__ = ["OPEN_STATES", "TransactionView", "open_transactions"]

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
R = TypeVar("R", bound=Response)


@dataclass(frozen=True)
class TransactionView:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1: unknown
    partitions: tuple[str, ...]

    def duration_ms(self, now_ms: int) -> int | None:
        return now_ms - self.start_time_ms if self.start_time_ms >= 0 else None


class _Connection:
    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ConsoleError(f"cannot reach broker at {self.address}: {exc}") from None
        self._correlation_id = 0
        versions = self.call(ApiVersionsRequest(), 0, ApiVersionsResponse)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}

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


def _error(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _broker_transactions(node_id: int, connection: _Connection) -> list[TransactionView]:
    listed = connection.call(
        ListTransactionsRequest(state_filters=list(OPEN_STATES), producer_id_filters=[]),
        connection.version(ListTransactionsRequest),
        ListTransactionsResponse,
    )
    if listed.error_code != ErrorCode.NONE:
        raise ConsoleError(f"broker {node_id} refused ListTransactions: {_error(listed.error_code)}")
    ids = sorted(t.transactional_id for t in listed.transaction_states)
    if not ids:
        return []
    described = connection.call(
        DescribeTransactionsRequest(transactional_ids=ids),
        connection.version(DescribeTransactionsRequest),
        DescribeTransactionsResponse,
    )
    result = []
    for state in described.transaction_states:
        if state.error_code != ErrorCode.NONE or state.transaction_state not in OPEN_STATES:
            continue  # it ended (or moved) between the two requests
        result.append(
            TransactionView(
                state.transactional_id,
                node_id,
                state.transaction_state,
                state.producer_id,
                state.producer_epoch,
                state.transaction_timeout_ms,
                state.transaction_start_time_ms,
                tuple(f"{t.topic}/{p}" for t in state.topics for p in sorted(t.partitions)),
            )
        )
    return result


def open_transactions(
    brokers: Iterable[tuple[int, str, int]], security_protocol: str, timeout: float
) -> list[TransactionView]:
    """The open transactions of every broker ``(node id, host, port)``, oldest first."""
    if security_protocol.upper() not in ("", "PLAINTEXT"):
        raise ConsoleError(
            f"listing transactions speaks plaintext Kafka only, and this console uses {security_protocol}: "
            "use `tidelog transactions list` or Kafka's kafka-transactions.sh"
        )
    found: list[TransactionView] = []
    for node_id, host, port in sorted(brokers):
        connection = _Connection(host, port, timeout)
        try:
            found.extend(_broker_transactions(node_id, connection))
        finally:
            connection.close()
    return sorted(found, key=lambda t: (t.start_time_ms, t.transactional_id))


def now_ms() -> int:
    return int(time.time() * 1000)
