"""What the ``tidelog transactions`` commands share: the connection, the transaction coordinator lookup and
DescribeTransactions, the partition leaders. They speak the protocol through :mod:`tidelog.client.wire`
(confluent-kafka's AdminClient lacks these APIs), so of librdkafka's ``-X`` / ``--command-config``
properties only the security ones that client reads are taken (TLS and SASL logins); any other is refused
by name.

Invariants: a broker that cannot be reached or cannot serve a request ends the command with
``Error: ...`` (exit 1, :func:`~tidelog.cli._common.fail`); retriable coordinator errors are retried
until ``--timeout``; the codec is imported only when a command runs (``tidelog --help`` stays fast).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from tidelog.cli._common import ClientOptions, fail
from tidelog.protocol.errors import ErrorCode

if TYPE_CHECKING:  # the codec loads the generated messages (~0.3 s): imported when a command runs
    from tidelog.client.wire import WireClient
    from tidelog.protocol.messages import DescribeTransactionsResponse, MetadataResponse

__all__ = [
    "describe_transaction",
    "GROUP_KEY_TYPE",
    "find_coordinator",
    "no_librdkafka_properties",
    "open_wire",
    "partition_leaders",
]

GROUP_KEY_TYPE = 0
_TRANSACTION_KEY_TYPE = 1


WIRE_PROPERTIES = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
"""The client properties tidelog's own wire client understands (ClientOptions.wire_security)."""


def no_librdkafka_properties(client: ClientOptions) -> None:
    """Refuse the properties the wire client would silently ignore."""
    unused = sorted(set(client.properties) - WIRE_PROPERTIES)
    if unused:
        raise click.UsageError(
            f"transactions commands take only the connection's security properties "
            f"({', '.join(sorted(WIRE_PROPERTIES))}), not {', '.join(unused)}"
        )


def open_wire(client: ClientOptions, address: str | None = None) -> WireClient:
    """A connection to ``address`` (default: the bootstrap servers)."""
    from tidelog.client.wire import WireError, connect

    security = client.wire_security()
    try:
        return connect(
            address or client.bootstrap_server, timeout=client.timeout, sasl=security.sasl, tls=security.tls
        )
    except WireError as exc:
        fail(str(exc))


def find_coordinator(
    wire: WireClient, transactional_id: str, *, key_type: int = _TRANSACTION_KEY_TYPE
) -> tuple[int, str]:
    """(node id, host:port) of the coordinator of ``transactional_id`` (a transactional id; a group id with
    ``key_type=GROUP_KEY_TYPE``): :func:`tidelog.client.lookup.find_coordinator`."""
    from tidelog.client.lookup import find_coordinator as find

    return find(wire, transactional_id, key_type=key_type)


def describe_transaction(
    client: ClientOptions, wire: WireClient, transactional_id: str
) -> tuple[int, DescribeTransactionsResponse.TransactionState]:
    """(coordinator node id, the coordinator's ``TransactionState`` of ``transactional_id``); its
    ``error_code`` is NONE, TRANSACTIONAL_ID_NOT_FOUND, or another error that did not pass within the
    timeout. Raises ``WireError`` when the coordinator cannot be found or reached."""
    from tidelog.protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse

    node_id, address = find_coordinator(wire, transactional_id)
    deadline = time.monotonic() + client.timeout
    with open_wire(client, address) as coordinator:
        while True:
            (state,) = coordinator.call(
                DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                expect=DescribeTransactionsResponse,
            ).transaction_states
            error = state.error_code
            if error in (ErrorCode.NONE, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND):
                return node_id, state
            if not ErrorCode.of(error).retriable or time.monotonic() > deadline:
                return node_id, state
            time.sleep(0.1)


def partition_leaders(
    wire: WireClient, topics: Iterable[str] | None
) -> tuple[dict[int, str], dict[str, MetadataResponse.MetadataResponseTopic]]:
    """Metadata (never creating a topic): :func:`tidelog.client.lookup.partition_leaders`."""
    from tidelog.client.lookup import partition_leaders as leaders

    return leaders(wire, topics)
