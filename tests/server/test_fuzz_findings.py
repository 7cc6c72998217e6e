"""Requests the wire fuzzer (tidelog.testing.wire_fuzz) found mishandled, each answered as Kafka answers
it, over a real connection to a real broker. The broker fixture fails the module if the broker logged a
traceback or an ERROR line, which is how each of these first showed."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest
from tests.support.kafka_workload import confluent_create_topic

from tidelog.client.wire import WireClient
from tidelog.protocol.codec import encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
)
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(60)]

TOPIC = "findings"
BROKER_CONFIG = {"offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def client(broker: Broker) -> Iterator[WireClient]:
    confluent_create_topic(broker.bootstrap_servers, TOPIC, 1)
    with WireClient("127.0.0.1", broker.port, timeout=10, client_id="findings") as wire:
        yield wire


def test_a_long_poll_fetch_naming_no_partition_is_answered_at_once(client: WireClient) -> None:
    """A topic listed with no partitions used to reach the purgatory with nothing to watch (ValueError,
    connection dropped); Kafka answers an empty fetch at once."""
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[])],
    )
    response = client.call(request, 12, expect=FetchResponse)
    assert response.error_code == 0
    assert [(t.topic, t.partitions) for t in response.responses] in ([], [(TOPIC, [])])


def _closed_without_answer(broker: Broker, frame: bytes) -> bool:
    """Send ``frame`` on a fresh connection: True when the broker closes it without a byte."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(frame)
        return sock.recv(1) == b""


def test_metadata_v10_with_a_null_topic_name_is_an_invalid_request(
    broker: Broker, client: WireClient
) -> None:
    """v10-11 carry a topic id field but answer by name only: a null name used to build a response v10
    cannot encode (a traceback in the writer). Kafka refuses it (InvalidRequestException); the broker
    closes the connection, and v12 still looks the topic up by id."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())])
    header = RequestHeader(request_api_key=3, request_api_version=10, correlation_id=1, client_id="findings")
    assert _closed_without_answer(broker, encode_request(header, request))
    response = client.call(request, 12, expect=MetadataResponse)
    assert [(t.error_code, t.name) for t in response.topics] == [(ErrorCode.UNKNOWN_TOPIC_ID, None)]


def _coordinator_errors(client: WireClient, keys: list[str]) -> list[int]:
    request = FindCoordinatorRequest(key_type=0, coordinator_keys=keys)
    response = client.call(request, 4, expect=FindCoordinatorResponse)
    return [c.error_code for c in response.coordinators]


def test_partitions_added_to_consumer_offsets_are_not_coordinated(client: WireClient) -> None:
    """A client may add partitions to ``__consumer_offsets`` (Kafka lets it); the group coordinator used
    to try to load the new ones, beyond ``offsets.topic.num.partitions``, and raise on every
    FindCoordinator after. Keys still hash over the configured count, and every lookup is answered."""
    keys = [f"g-{i}" for i in range(20)]
    errors = _coordinator_errors(client, keys)
    while any(e == ErrorCode.COORDINATOR_NOT_AVAILABLE for e in errors):  # created on first lookup
        errors = _coordinator_errors(client, keys)
    grow = CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(
                name="__consumer_offsets", count=5, assignments=None
            )
        ],
        timeout_ms=10000,
    )
    response = client.call(grow, 1, expect=CreatePartitionsResponse)
    assert [r.error_code for r in response.results] == [0]
    assert _coordinator_errors(client, keys) == [0] * len(keys)
