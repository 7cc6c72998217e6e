"""Requests the wire fuzzer (tidelog.testing.wire_fuzz) found mishandled, each answered as Kafka answers
it, over a real connection to a real broker. The broker fixture fails the module if the broker logged a
traceback or an ERROR line, which is how each of these first showed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.kafka_workload import confluent_create_topic

from tidelog.client.wire import WireClient
from tidelog.protocol.messages import FetchRequest, FetchResponse
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(60)]

TOPIC = "findings"


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
