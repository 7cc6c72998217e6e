"""Open and hanging transactions, read with ListTransactions and DescribeTransactions from every broker.

confluent-kafka's AdminClient lacks both APIs, so this module speaks them itself over the console's wire
connection (:mod:`tidelog.console.wire`). Invariants: each
broker is asked for the transactions it coordinates, and those are described on the same connection (a
broker coordinates what it lists); every socket times out after ``timeout`` seconds.
Connections are secured as the console's librdkafka clients are (TLS, SASL: see
:mod:`tidelog.client.security`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidelog.client.wire import WireClient
from tidelog.console.kafka import ConsoleError
from tidelog.console.wire import wire_connection, wire_security
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

__all__ = ["OPEN_STATES", "TransactionView", "open_transactions"]

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


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


def _broker_transactions(node_id: int, connection: WireClient) -> list[TransactionView]:
    listed = connection.call(
        ListTransactionsRequest(state_filters=list(OPEN_STATES), producer_id_filters=[]),
        expect=ListTransactionsResponse,
    )
    if listed.error_code != ErrorCode.NONE:
        raise ConsoleError(
            f"broker {node_id} refused ListTransactions: {ErrorCode.name_of(listed.error_code)}"
        )
    ids = sorted(t.transactional_id for t in listed.transaction_states)
    if not ids:
        return []
    described = connection.call(
        DescribeTransactionsRequest(transactional_ids=ids), expect=DescribeTransactionsResponse
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
    brokers: Iterable[tuple[int, str, int]], settings: Mapping[str, object], timeout: float
) -> list[TransactionView]:
    """The open transactions of every broker ``(node id, host, port)``, oldest first; ``settings``: the
    console's librdkafka settings (security.protocol, sasl.*, ssl.*)."""
    security = wire_security(settings)
    found: list[TransactionView] = []
    for node_id, host, port in sorted(brokers):
        with wire_connection(host, port, timeout, security) as connection:
            found.extend(_broker_transactions(node_id, connection))
    return sorted(found, key=lambda t: (t.start_time_ms, t.transactional_id))


def now_ms() -> int:
    return int(time.time() * 1000)
