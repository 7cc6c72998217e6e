"""Pipelined requests sent in one write are answered in request order, each exactly once, whether the reader
answers them at once (gathered and sent together, issue 17) or one of them waits (a long-poll fetch): the
answers gathered before the waiting one leave before it, those after it wait behind it."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.kafka_workload import confluent_create_topic

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.records import SimpleRecord, decode_batch, encode_batch
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

TOPIC = "pipelined"
PRODUCE_VERSION = 9
FETCH_VERSION = 12


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = Broker(data_dir=tmp_path / "data", run_dir=tmp_path / "run")
    running.start()
    try:
        confluent_create_topic(running.bootstrap_servers, TOPIC, 1)
        yield running
    finally:
        running.stop(timeout=30)


def produce(value: bytes, acks: int) -> ProduceRequest:
    records = encode_batch([SimpleRecord(value=value, timestamp=1_700_000_000_000)])
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)]
            )
        ],
    )


def long_poll(offset: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=10_000,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[
            FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "broker closed the connection"
        data += chunk
    return bytes(data)


def test_pipelined_produces_and_a_long_poll_are_answered_in_order(broker: Broker) -> None:
    """100 produces (acks=1, the 50th acks=-1) with a long-poll fetch at the log end (offset 40) after the
    40th, all in one write: 101 answers in order; produce i gets base offset i, the fetch the records from
    offset 40 (at least the first, which woke it)."""
    requests: list[tuple[int, Any]] = []
    for i in range(100):
        if i == 40:
            requests.append((FETCH_VERSION, long_poll(40)))
        requests.append((PRODUCE_VERSION, produce(f"v{i}".encode(), -1 if i == 50 else 1)))
    wire = b"".join(
        encode_request(
            RequestHeader(
                request_api_key=body.API_KEY,
                request_api_version=version,
                correlation_id=correlation_id,
                client_id="pipelined-test",
            ),
            body,
        )
        for correlation_id, (version, body) in enumerate(requests)
    )
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        sock.sendall(wire)
        answers = []
        for version, body in requests:
            (size,) = struct.unpack(">i", recv_exact(sock, 4))
            header, response = decode_response(recv_exact(sock, size), body.API_KEY, version)
            answers.append((header.correlation_id, response))

    assert [correlation_id for correlation_id, _ in answers] == list(range(101))
    produced = [response for _, response in answers if isinstance(response, ProduceResponse)]
    assert len(produced) == 100
    for i, response in enumerate(produced):
        (partition,) = response.responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (ErrorCode.NONE, i)
    fetched = answers[40][1]
    assert isinstance(fetched, FetchResponse)
    (data,) = fetched.responses[0].partitions
    assert data.error_code == ErrorCode.NONE
    header, records = decode_batch(bytes(data.records), 0)
    assert header.base_offset == 40
    assert [(record.offset, record.value) for record in records] == [(40, b"v40")]
