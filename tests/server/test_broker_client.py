"""BrokerClient (server/cluster/broker_client.py) against real tidelog brokers, in-process on 127.0.0.1:0 or
as subprocesses, and against listening sockets the test controls for what a broker never does.

- ApiVersions, Metadata, Produce and Fetch round trips, on asyncio's loop and on uvloop (the broker's).
- Many concurrent requests are pipelined on one connection and each gets its own response; produces are
  appended in the order they were sent.
- A broker killed with SIGKILL fails the request in flight with DisconnectedError; while it is down a send
  gets BrokerNotAvailableError; after it restarts (same port, or another port told by ``endpoint_for``) the
  next send reconnects.
- A SIGSTOPped broker: the request to it times out with RequestTimeoutError and its connection is closed
  (the request behind it fails with DisconnectedError), while another broker answers meanwhile; after
  SIGCONT the next send reconnects.
- A refused port and a peer that never answers ApiVersions give BrokerNotAvailableError (the latter after
  the connect timeout, well before the request timeout); no endpoint gives BrokerNotAvailableError.
- A request deadline that ends first, while connecting or during the backoff, fails the send without a
  new connect attempt.
- Reconnect backoff: one connect attempt per send to a peer that hangs up, however many sends share it;
  the backoff grows (doubling, jitter 0.2, capped) and the next attempt never comes before it ends.
- A response out of order, or a frame above the size limit, breaks the connection: every request in flight
  fails with DisconnectedError, and the next send connects again.
- A version the peer does not advertise is refused before sending and leaves the connection up; close()
  fails what is in flight and the next send connects at once; an endpoint change moves the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop
from tests.server.inprocess import make_broker, until

from tidelog.protocol.codec import decode_request, encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.framing import NEED_DATA, FrameDecoder
from tidelog.protocol.messages import (
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    LeaderAndIsrRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.primitives import INT32
from tidelog.protocol.records import SimpleRecord, decode_batch, encode_batch
from tidelog.protocol.records_header import LOG_OVERHEAD
from tidelog.server.broker import Broker
from tidelog.server.cluster.broker_client import (
    BrokerClient,
    BrokerNotAvailableError,
    ConnectionState,
    DisconnectedError,
    RequestTimeoutError,
    UnsupportedApiVersionError,
    reconnect_backoff_ms,
)
from tidelog.testing import Broker as BrokerProcess

pytestmark = [pytest.mark.timeout(180)]

Address = tuple[str, int]
LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


@contextlib.asynccontextmanager
async def serving(data: Path, **settings: str) -> AsyncIterator[Broker]:
    """An in-process broker on 127.0.0.1:0 with topic ``t`` (one partition), in this event loop."""
    broker = make_broker(data, **{"listeners": "PLAINTEXT://127.0.0.1:0", **settings})
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@contextlib.asynccontextmanager
async def client_of(endpoints: dict[int, Address], **options: int) -> AsyncIterator[BrokerClient]:
    client = BrokerClient(0, endpoints.get, client_id="test-broker-0", **options)
    try:
        yield client
    finally:
        await client.close_all()


def produce(values: list[bytes], acks: int = 1) -> ProduceRequest:
    batch = encode_batch([SimpleRecord(value=v, timestamp=1_700_000_000_000) for v in values])
    return ProduceRequest(
        acks=acks,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )


def fetch(offset: int, *, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


def fetched(response: FetchResponse) -> list[tuple[int, bytes | None]]:
    (partition,) = response.responses[0].partitions
    assert partition.error_code == ErrorCode.NONE
    data = memoryview(partition.records or b"")
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    while pos < len(data):
        header, records = decode_batch(data, pos)
        out += [(r.offset, r.value) for r in records]
        pos += header.batch_length + LOG_OVERHEAD
    return out


def metadata(topic: str | None = "t") -> MetadataRequest:
    topics = None if topic is None else [MetadataRequest.MetadataRequestTopic(name=topic)]
    return MetadataRequest(topics=topics, allow_auto_topic_creation=False)


async def create_topic_t(client: BrokerClient) -> None:
    """Topic ``t`` (one partition) on node 1, through the client."""
    request = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=1)],
        timeout_ms=10_000,
    )
    response = await client.send(1, request, 7, expect=CreateTopicsResponse)
    assert [(t.name, t.error_code) for t in response.topics] == [("t", ErrorCode.NONE)]


def state_of(client: BrokerClient, node_id: int) -> ConnectionState:
    state = client.connection_state(node_id)
    assert state is not None, f"the client knows nothing of node {node_id}"
    return state


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- round trips ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_api_versions_metadata_produce_and_fetch_round_trips(tmp_path: Path, loop: str) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "data") as broker, client_of({1: ("127.0.0.1", broker.port)}) as client:
            versions = await client.send(1, ApiVersionsRequest(), 3, expect=ApiVersionsResponse)
            assert versions.error_code == ErrorCode.NONE
            advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            assert advertised == {key: broker.dispatcher.supported(key) for key in advertised}
            assert advertised[ApiKey.FETCH] == (4, 16)

            meta = await client.send(1, metadata(), 12, expect=MetadataResponse)
            assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [(1, "127.0.0.1", broker.port)]
            (topic,) = meta.topics
            assert (topic.error_code, topic.name, [p.partition_index for p in topic.partitions]) == (
                0,
                "t",
                [0],
            )
            assert topic.partitions[0].leader_id == 1

            produced = await client.send(1, produce([b"a", b"b"], acks=-1), 9, expect=ProduceResponse)
            (partition,) = produced.responses[0].partition_responses
            assert (partition.error_code, partition.base_offset) == (0, 0)
            produced = await client.send(1, produce([b"c"]), 9, expect=ProduceResponse)
            assert produced.responses[0].partition_responses[0].base_offset == 2

            response = await client.send(1, fetch(0), 12, expect=FetchResponse)
            assert fetched(response) == [(0, b"a"), (1, b"b"), (2, b"c")]
            assert response.responses[0].partitions[0].high_watermark == 3

            state = state_of(client, 1)
            assert (state.connected, state.in_flight, state.failed_attempts) == (True, 0, 0)
            assert state.address == ("127.0.0.1", broker.port)
            assert state.api_versions == advertised
            assert len(broker._connections) == 1  # every request went over the one connection

    LOOPS[loop](scenario())


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_concurrent_requests_are_pipelined_on_one_connection_and_matched(tmp_path: Path, loop: str) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "data") as broker, client_of({1: ("127.0.0.1", broker.port)}) as client:
            await client.send(1, ApiVersionsRequest(), 3)
            requests: list[Any] = []
            for i in range(300):
                if i % 3 == 0:
                    requests.append(produce([f"v{i}".encode()]))
                elif i % 3 == 1:
                    requests.append(metadata(f"unknown-{i}"))
                else:
                    requests.append(fetch(0))
            tasks = [
                asyncio.create_task(client.send(1, r, 9 if isinstance(r, ProduceRequest) else 12))
                for r in requests
            ]
            await asyncio.sleep(0)  # every task has written its request: none waits for another's response
            state = state_of(client, 1)
            assert state.in_flight == 300
            responses = await asyncio.gather(*tasks)

            produced = 0
            for i, (request, response) in enumerate(zip(requests, responses, strict=True)):
                if isinstance(request, ProduceRequest):
                    assert isinstance(response, ProduceResponse)
                    # appended in the order sent: the i-th produce got offset i
                    assert response.responses[0].partition_responses[0].base_offset == produced
                    produced += 1
                elif isinstance(request, MetadataRequest):
                    assert isinstance(response, MetadataResponse)
                    assert [(t.name, t.error_code) for t in response.topics] == [
                        (f"unknown-{i}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    ]
                else:
                    assert isinstance(response, FetchResponse)
                    records = fetched(response)
                    assert records == [(n, f"v{3 * n}".encode()) for n in range(len(records))]
            final = await client.send(1, fetch(0), 12, expect=FetchResponse)
            assert fetched(final) == [(n, f"v{3 * n}".encode()) for n in range(100)]
            assert len(broker._connections) == 1

    LOOPS[loop](scenario())


# -- failures of real brokers -----------------------------------------------------------------------------


def test_a_killed_broker_fails_the_request_in_flight_and_is_reconnected_after_its_restart(
    fresh_broker: BrokerProcess,
) -> None:
    broker = fresh_broker

    async def scenario() -> None:
        port = broker.port
        async with client_of({1: ("127.0.0.1", port)}) as client:
            await create_topic_t(client)
            # a long poll at the log end: no answer until the broker has data, so it is in flight at the kill
            parked = asyncio.create_task(client.send(1, fetch(0, max_wait_ms=60_000), 12))
            await asyncio.sleep(0)
            assert state_of(client, 1).in_flight == 1
            await asyncio.to_thread(broker.kill)
            with pytest.raises(DisconnectedError) as disconnected:
                await parked
            assert disconnected.value.node_id == 1
            assert disconnected.value.address == ("127.0.0.1", port)
            state = state_of(client, 1)
            assert (state.connected, state.failed_attempts) == (False, 1)

            with pytest.raises(BrokerNotAvailableError) as refused:  # down: the connect is refused
                await client.send(1, metadata(None), 12)
            assert "cannot connect" in str(refused.value)
            assert state_of(client, 1).failed_attempts == 2

            await asyncio.to_thread(broker.restart)
            assert broker.port == port
            meta = await client.send(1, metadata(None), 12, expect=MetadataResponse)
            assert [(b.node_id, b.port) for b in meta.brokers] == [(1, port)]
            state = state_of(client, 1)
            assert (state.connected, state.failed_attempts, state.reconnect_backoff_ms) == (True, 0, 0.0)

    asyncio.run(scenario())


def test_a_broker_restarted_on_another_port_is_reached_through_endpoint_for(
    fresh_broker: BrokerProcess,
) -> None:
    broker = fresh_broker

    async def scenario() -> None:
        endpoints = {1: ("127.0.0.1", broker.port)}
        old_port = broker.port
        async with client_of(endpoints) as client:
            await create_topic_t(client)
            parked = asyncio.create_task(client.send(1, fetch(0, max_wait_ms=60_000), 12))
            await asyncio.sleep(0)
            await asyncio.to_thread(broker.kill)
            with pytest.raises(DisconnectedError):
                await parked
            await asyncio.to_thread(broker.start)  # port 0: the kernel picks a new one
            assert broker.port != old_port
            endpoints[1] = ("127.0.0.1", broker.port)
            meta = await client.send(1, metadata(None), 12, expect=MetadataResponse)
            assert [(b.node_id, b.port) for b in meta.brokers] == [(1, broker.port)]
            state = state_of(client, 1)
            assert (state.address, state.connected, state.failed_attempts) == (endpoints[1], True, 0)

    asyncio.run(scenario())


def test_a_request_to_a_stopped_broker_times_out_while_another_broker_answers(
    fresh_broker: BrokerProcess, tmp_path: Path
) -> None:
    stopped = fresh_broker

    async def scenario() -> None:
        async with serving(tmp_path / "other", **{"node.id": "2"}) as other:
            endpoints = {1: ("127.0.0.1", stopped.port), 2: ("127.0.0.1", other.port)}
            async with client_of(endpoints) as client:
                await client.send(1, ApiVersionsRequest(), 3)
                await client.send(2, ApiVersionsRequest(), 3)
                await asyncio.to_thread(stopped.pause)
                try:
                    stuck = asyncio.create_task(client.send(1, metadata(None), 12, timeout_ms=5_000))
                    behind = asyncio.create_task(client.send(1, metadata(None), 12, timeout_ms=60_000))
                    for i in range(10):
                        answer = await client.send(2, produce([f"r{i}".encode()]), 9, expect=ProduceResponse)
                        assert answer.responses[0].partition_responses[0].base_offset == i
                    assert not stuck.done()  # the other broker answered ten times meanwhile
                    with pytest.raises(RequestTimeoutError) as timed_out:
                        await stuck
                    assert timed_out.value.node_id == 1
                    assert "no response within 5000 ms" in str(timed_out.value)
                    # the connection is closed: the request behind it on the same connection fails at once
                    with pytest.raises(DisconnectedError, match="timed out after 5000 ms"):
                        await behind
                    state = state_of(client, 1)
                    assert (state.connected, state.failed_attempts) == (False, 1)
                    answer = await client.send(2, fetch(0), 12, expect=FetchResponse)
                    assert [v for _o, v in fetched(answer)] == [f"r{i}".encode() for i in range(10)]
                finally:
                    await asyncio.to_thread(stopped.resume)
                meta = await client.send(1, metadata(None), 12, expect=MetadataResponse)  # reconnects
                assert [b.port for b in meta.brokers] == [stopped.port]
                assert state_of(client, 1).failed_attempts == 0

    asyncio.run(scenario())


# -- peers the test controls ------------------------------------------------------------------------------


class Peer:
    """A listening socket on 127.0.0.1 whose behaviour the test picks; it records each accepted connection
    (its loop time) and answers ApiVersions (advertising ApiVersions and Metadata) unless told otherwise."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.accepted: list[float] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Peer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    @property
    def address(self) -> Address:
        return ("127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.append(asyncio.get_running_loop().time())
        self._writers.append(writer)
        if self.mode == "hang up":
            writer.close()
            return
        decoder = FrameDecoder(1 << 20)
        held: list[tuple[RequestHeader, MetadataResponse]] = []
        while data := await reader.read(65536):
            decoder.receive_data(data)
            while (frame := decoder.next_frame()) is not NEED_DATA:
                header, _body = decode_request(frame)
                if self.mode == "silent":
                    continue
                if header.request_api_key == ApiKey.API_VERSIONS:
                    self._answer(writer, header, self._versions())
                    continue
                answer = MetadataResponse(cluster_id=f"answer-{header.correlation_id}")
                if self.mode == "oversized":
                    writer.write(INT32.pack(2_000_000) + b"\x00" * 100)
                elif self.mode == "swap":  # answer pairs of requests in reverse order
                    held.append((header, answer))
                    if len(held) == 2:
                        for h, a in reversed(held):
                            self._answer(writer, h, a)
                        held.clear()
                else:
                    self._answer(writer, header, answer)
        writer.close()

    @staticmethod
    def _versions() -> ApiVersionsResponse:
        return ApiVersionsResponse(
            api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=12),
                ApiVersionsResponse.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=4),
            ]
        )

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, header: RequestHeader, body: Any) -> None:
        for chunk in encode_response(header, body):
            assert isinstance(chunk, bytes)
            writer.write(chunk)


def test_a_response_out_of_order_breaks_the_connection() -> None:
    async def scenario() -> None:
        async with Peer("swap") as peer, client_of({7: peer.address}) as client:
            first = asyncio.create_task(client.send(7, metadata(), 12))
            second = asyncio.create_task(client.send(7, metadata(), 12))
            for task in (first, second):
                with pytest.raises(DisconnectedError) as broken:
                    await task
                assert "correlation id" in str(broken.value)
            state = state_of(client, 7)
            assert (state.connected, state.failed_attempts) == (False, 1)
            assert len(peer.accepted) == 1
            peer.mode = "answer"
            answer = await client.send(7, metadata(), 12, expect=MetadataResponse)  # a new connection
            assert answer.cluster_id is not None
            assert answer.cluster_id.startswith("answer-")
            assert len(peer.accepted) == 2

    asyncio.run(scenario())


def test_a_response_above_the_size_limit_breaks_the_connection() -> None:
    async def scenario() -> None:
        async with (
            Peer("oversized") as peer,
            client_of({7: peer.address}, max_response_bytes=1_000_000) as client,
        ):
            with pytest.raises(DisconnectedError) as broken:
                await client.send(7, metadata(), 12)
            assert "larger than the maximum 1000000" in str(broken.value)
            assert state_of(client, 7).connected is False

    asyncio.run(scenario())


def test_no_endpoint_and_a_refused_port_are_broker_not_available() -> None:
    async def scenario() -> None:
        port = closed_port()
        async with client_of({1: ("127.0.0.1", port)}) as client:
            with pytest.raises(BrokerNotAvailableError) as unknown:
                await client.send(5, metadata(), 12)
            assert (unknown.value.node_id, unknown.value.address) == (5, None)
            assert "no endpoint" in str(unknown.value)

            with pytest.raises(BrokerNotAvailableError) as refused:
                await client.send(1, metadata(), 12)
            assert refused.value.address == ("127.0.0.1", port)
            assert isinstance(refused.value.__cause__, ConnectionRefusedError)
            state = state_of(client, 1)
            assert (state.connected, state.connecting, state.failed_attempts) == (False, False, 1)

    asyncio.run(scenario())


def test_a_peer_that_never_answers_api_versions_fails_within_the_connect_timeout() -> None:
    async def scenario() -> None:
        async with (
            Peer("silent") as peer,
            client_of({1: peer.address}, connect_timeout_ms=300, request_timeout_ms=120_000) as client,
        ):
            with pytest.raises(BrokerNotAvailableError) as not_available:
                await client.send(1, metadata(), 12)
            assert "not connected within 300 ms (TCP connect and ApiVersions)" in str(not_available.value)
            assert len(peer.accepted) == 1
            assert state_of(client, 1).failed_attempts == 1

    asyncio.run(scenario())


def test_a_request_deadline_shorter_than_the_connect_timeout_gives_request_timeout() -> None:
    async def scenario() -> None:
        async with (
            Peer("silent") as peer,
            client_of({1: peer.address}, connect_timeout_ms=120_000, request_timeout_ms=200) as client,
        ):
            with pytest.raises(
                RequestTimeoutError, match="not connected within the request timeout of 200 ms"
            ):
                await client.send(1, metadata(), 12)
            state = state_of(client, 1)
            # the connect goes on for the sends that come next (it is shared, not the request's own)
            assert (state.connecting, state.connected, state.failed_attempts) == (True, False, 0)
            with pytest.raises(RequestTimeoutError):
                await client.send(1, metadata(), 12, timeout_ms=50)
            assert len(peer.accepted) == 1

    asyncio.run(scenario())


def test_a_send_during_a_backoff_longer_than_its_deadline_fails_without_connecting() -> None:
    async def scenario() -> None:
        async with (
            Peer("hang up") as peer,
            client_of(
                {1: peer.address}, reconnect_backoff_ms=60_000, reconnect_backoff_max_ms=60_000
            ) as client,
        ):
            with pytest.raises(BrokerNotAvailableError, match="cannot connect"):
                await client.send(1, metadata(), 12)
            with pytest.raises(
                BrokerNotAvailableError, match=r"reconnect backoff of \d+ ms outlasts the request"
            ):
                await client.send(1, metadata(), 12, timeout_ms=100)
            assert len(peer.accepted) == 1
            assert state_of(client, 1).failed_attempts == 1

    asyncio.run(scenario())


def test_concurrent_sends_share_one_connect_attempt() -> None:
    async def scenario() -> None:
        async with Peer("hang up") as peer, client_of({1: peer.address}) as client:
            results = await asyncio.gather(
                *(client.send(1, metadata(), 12) for _ in range(5)), return_exceptions=True
            )
            assert [type(r) for r in results] == [BrokerNotAvailableError] * 5
            assert len(peer.accepted) == 1
            assert state_of(client, 1).failed_attempts == 1

    asyncio.run(scenario())


def test_reconnect_backoff_grows_and_each_attempt_waits_for_it() -> None:
    initial, maximum = 20, 160

    async def scenario() -> None:
        async with (
            Peer("hang up") as peer,
            client_of(
                {1: peer.address}, reconnect_backoff_ms=initial, reconnect_backoff_max_ms=maximum
            ) as client,
        ):
            backoffs: list[float] = []
            for attempt in range(1, 8):
                with pytest.raises(BrokerNotAvailableError):
                    await client.send(1, metadata(), 12)
                state = state_of(client, 1)
                assert state.failed_attempts == attempt
                backoffs.append(state.reconnect_backoff_ms)
                assert len(peer.accepted) == attempt  # one connect per send, no retry behind its back
            for attempt, backoff in enumerate(backoffs, start=1):
                term = min(initial * 2 ** (attempt - 1), maximum)
                assert 0.8 * term <= backoff <= min(1.2 * term, maximum)
            assert backoffs[0] < backoffs[1] < backoffs[2] < backoffs[3]  # 20, 40, 80, 160 (each x0.8-1.2)
            for earlier, later, backoff in zip(peer.accepted, peer.accepted[1:], backoffs, strict=False):
                assert later - earlier >= backoff / 1000 - 0.001  # never before the backoff ended

    asyncio.run(scenario())


def test_reconnect_backoff_formula() -> None:
    assert reconnect_backoff_ms(0, 50, 1000, 0.5) == 0.0
    assert reconnect_backoff_ms(1, 50, 1000, 0.5) == 50
    assert reconnect_backoff_ms(2, 50, 1000, 0.0) == pytest.approx(80)
    assert reconnect_backoff_ms(3, 50, 1000, 1.0) == pytest.approx(240)
    assert reconnect_backoff_ms(5, 50, 1000, 0.5) == 800
    assert reconnect_backoff_ms(6, 50, 1000, 0.0) == 800
    assert reconnect_backoff_ms(6, 50, 1000, 1.0) == 1000
    assert reconnect_backoff_ms(10_000, 50, 1000, 0.5) == 1000


# -- versions, close, endpoint changes --------------------------------------------------------------------


def test_a_version_the_peer_does_not_speak_is_refused_before_sending(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "data") as broker, client_of({1: ("127.0.0.1", broker.port)}) as client:
            with pytest.raises(UnsupportedApiVersionError) as unsupported:
                await client.send(1, LeaderAndIsrRequest(), 5)
            assert (unsupported.value.api_key, unsupported.value.version) == (ApiKey.LEADER_AND_ISR, 5)
            assert "not at all" in str(unsupported.value)
            with pytest.raises(UnsupportedApiVersionError, match="versions 4-16"):
                await client.send(1, fetch(0), 3)
            await client.send(1, metadata(), 12)  # the connection is still up
            state = state_of(client, 1)
            assert (state.connected, state.failed_attempts) == (True, 0)
            assert len(broker._connections) == 1

    asyncio.run(scenario())


def test_close_fails_what_is_in_flight_and_the_next_send_connects_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "data") as broker, client_of({1: ("127.0.0.1", broker.port)}) as client:
            parked = asyncio.create_task(client.send(1, fetch(0, max_wait_ms=60_000), 12))
            await until(lambda: (state := client.connection_state(1)) is not None and state.in_flight == 1)
            await client.close(1)
            with pytest.raises(DisconnectedError, match="closed by this broker"):
                await parked
            assert client.connection_state(1) is None
            answer = await client.send(1, metadata(), 12, expect=MetadataResponse)
            assert answer.topics[0].name == "t"
            assert state_of(client, 1).failed_attempts == 0

    asyncio.run(scenario())


def test_an_endpoint_change_moves_the_connection_to_the_new_address(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving(tmp_path / "a") as first, serving(tmp_path / "b") as second:
            endpoints = {1: ("127.0.0.1", first.port)}
            async with client_of(endpoints) as client:
                meta = await client.send(1, metadata(None), 12, expect=MetadataResponse)
                assert [b.port for b in meta.brokers] == [first.port]
                parked = asyncio.create_task(client.send(1, fetch(0, max_wait_ms=60_000), 12))
                await asyncio.sleep(0)
                endpoints[1] = ("127.0.0.1", second.port)
                meta = await client.send(1, metadata(None), 12, expect=MetadataResponse)
                assert [b.port for b in meta.brokers] == [second.port]
                with pytest.raises(DisconnectedError, match=f"endpoint changed to 127.0.0.1:{second.port}"):
                    await parked
                state = state_of(client, 1)
                assert (state.address, state.connected, state.failed_attempts) == (endpoints[1], True, 0)

    asyncio.run(scenario())
