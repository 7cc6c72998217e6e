"""A fault-injecting TCP proxy in front of one Kafka broker: it loses Produce responses on purpose.

The proxy listens on ``127.0.0.1:0`` (see :attr:`KafkaProxy.bootstrap_servers`) and relays whole Kafka
frames both ways between each client connection and its own connection to the broker. For a chosen subset
of the Produce requests it forwards the request, waits for the broker's answer (so the batches are in the
log), then drops that answer and either closes the client connection (:attr:`DropAction.CLOSE`) or keeps
it open while swallowing every later answer on it until the client gives up on its request timeout and
closes it (:attr:`DropAction.HOLD`). The client has to retry batches that are already stored: exactly the
case idempotent producers exist for.

Invariants:

- Frames are relayed unchanged and in order, except (1) dropped/swallowed Produce responses and (2)
  Metadata, FindCoordinator and DescribeCluster responses, which are decoded with tidelog's codec and
  re-encoded with every advertised broker/coordinator address replaced by the proxy's own, so clients
  keep talking through the proxy. One upstream broker only: a multi-broker cluster would be collapsed
  onto it.
- Drop decisions are deterministic: only *eligible* responses count (a Produce response whose partitions
  all answer error NONE, i.e. whose batches were appended or recognised as duplicates, read on a
  connection that is not held); the n-th eligible response (1-based, over all connections, in the order
  the proxy reads them) is dropped when ``n > policy.skip_first`` and either ``policy.every`` divides
  ``n - skip_first`` or a ``random.Random(policy.seed)`` draw is below ``policy.probability``; never
  more than ``policy.max_drops``. Successive drops cycle through ``policy.actions``.
- Every record batch of every Produce request is identified by :class:`BatchId` (topic, partition,
  producer id, epoch, base sequence, record count) and every broker answer for it is kept as a
  :class:`BatchAnswer` with whether the client received it, so a test can prove that a dropped batch was
  sent again and answered with its original offset.
- Bookkeeping is mutated only on the proxy's event-loop thread, under a lock; :meth:`KafkaProxy.stats`
  returns an immutable snapshot for the test thread.
- :meth:`KafkaProxy.close` closes the listener and every connection and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import random
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType

from tidelog.protocol.codec import (
    UnsupportedVersionError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_response,
)
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import (
    ApiKey,
    DescribeClusterResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.records import iter_batch_headers
from tidelog.protocol.schema import Response

__all__ = [
    "BatchAnswer",
    "BatchId",
    "DropAction",
    "DropPolicy",
    "DroppedResponse",
    "KafkaProxy",
    "ProxyStats",
]

MAX_FRAME_BYTES = 256 * 1024 * 1024
_SIZE = struct.Struct(">i")
_REWRITTEN = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER})


class DropAction(enum.Enum):
    CLOSE = "close"
    """Drop the response and close the client connection at once (and the proxy's broker side)."""
    HOLD = "hold"
    """Drop the response and every later one on this connection, keep forwarding requests, and leave the
    connection open until the client closes it (its request timeout) or ``hold_timeout_s`` passes."""


@dataclass(frozen=True, slots=True)
class DropPolicy:
    """Which eligible Produce responses to lose (see the module docstring) and how."""

    every: int | None = None
    probability: float = 0.0
    seed: int = 0
    actions: tuple[DropAction, ...] = (DropAction.CLOSE,)
    skip_first: int = 0
    max_drops: int | None = None
    hold_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.every is not None and self.every < 1:
            raise ValueError("every must be >= 1")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("probability must be within [0, 1]")
        if not self.actions:
            raise ValueError("at least one action")


@dataclass(frozen=True, slots=True, order=True)
class BatchId:
    """A produced record batch as the broker's producer state sees it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


@dataclass(frozen=True, slots=True)
class BatchAnswer:
    """The broker's answer for one batch of one Produce request, and whether it reached the client."""

    connection: int
    correlation_id: int
    error_code: int
    base_offset: int
    delivered: bool


@dataclass(frozen=True, slots=True)
class DroppedResponse:
    connection: int
    correlation_id: int
    action: DropAction
    batches: tuple[tuple[BatchId, int], ...]
    """Each batch of the request with the base offset the broker answered (and the client never saw)."""


@dataclass(frozen=True, slots=True)
class ProxyStats:
    connections: int
    produce_requests: int
    produce_responses: int
    eligible_responses: int
    dropped: tuple[DroppedResponse, ...]
    errors: tuple[str, ...]
    """Exceptions raised inside the proxy (a bug in the proxy or a frame it could not parse)."""
    swallowed: int
    """Responses lost after a HOLD drop on the same connection (not counted in ``dropped``)."""
    rewritten: int
    batch_sends: dict[BatchId, int]
    batch_answers: dict[BatchId, tuple[BatchAnswer, ...]]

    def dropped_batches(self) -> list[tuple[BatchId, int]]:
        return [batch for response in self.dropped for batch in response.batches]


@dataclass(slots=True)
class _Pending:
    header: RequestHeader
    batches: list[tuple[str, int, BatchId | None]]


@dataclass(slots=True, eq=False)
class _Connection:
    number: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    pending: dict[int, _Pending] = field(default_factory=dict)
    holding: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()
        self.done.set()


class KafkaProxy:
    """A proxy to ``upstream`` (``"host:port"``) that loses Produce responses per ``policy``."""

    def __init__(self, upstream: str, policy: DropPolicy | None = None, *, host: str = "127.0.0.1") -> None:
        upstream_host, _, upstream_port = upstream.rpartition(":")
        self.upstream = (upstream_host, int(upstream_port))
        self.policy = policy or DropPolicy()
        self.host = host
        self._port: int | None = None
        self._random = random.Random(self.policy.seed)
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # bookkeeping (loop thread writes under the lock)
        self._connection_count = 0
        self._produce_requests = 0
        self._produce_responses = 0
        self._eligible = 0
        self._dropped: list[DroppedResponse] = []
        self._swallowed = 0
        self._errors: list[str] = []
        self._rewritten = 0
        self._batch_sends: Counter[BatchId] = Counter()
        self._batch_answers: dict[BatchId, list[BatchAnswer]] = {}

    # ---- lifecycle ----

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the proxy has not been started")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> KafkaProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="kafka-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout=10)
        return self

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def stats(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(
                connections=self._connection_count,
                produce_requests=self._produce_requests,
                produce_responses=self._produce_responses,
                eligible_responses=self._eligible,
                dropped=tuple(self._dropped),
                errors=tuple(self._errors),
                swallowed=self._swallowed,
                rewritten=self._rewritten,
                batch_sends=dict(self._batch_sends),
                batch_answers={batch: tuple(answers) for batch, answers in self._batch_answers.items()},
            )

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        if self._tasks:  # let every connection's task finish before the loop stops
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    # ---- one client connection ----

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        connection = _Connection(next(self._numbers), client_writer)
        with self._lock:
            self._connection_count += 1
        self._connections.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            try:
                upstream_reader, connection.upstream = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            pumps = [
                asyncio.create_task(self._requests(connection, client_reader)),
                asyncio.create_task(self._responses(connection, upstream_reader)),
            ]
            closed = asyncio.create_task(connection.done.wait())
            await asyncio.wait([*pumps, closed], return_when=asyncio.FIRST_COMPLETED)
            for task in [*pumps, closed]:
                task.cancel()
            for result in await asyncio.gather(*pumps, closed, return_exceptions=True):
                if isinstance(result, Exception) and not isinstance(result, ConnectionError):
                    with self._lock:
                        self._errors.append(f"connection {connection.number}: {result!r}")
        finally:
            connection.close()
            self._connections.discard(connection)

    async def _requests(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        upstream = connection.upstream
        assert upstream is not None
        while (frame := await _read_frame(reader)) is not None:
            self._note_request(connection, frame)
            upstream.write(_SIZE.pack(len(frame)) + frame)
            await upstream.drain()

    async def _responses(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        client = connection.client
        while (frame := await _read_frame(reader)) is not None:
            out, action = self._note_response(connection, frame)
            if action is DropAction.CLOSE:
                return
            if action is DropAction.HOLD and not connection.holding:
                connection.holding = True
                asyncio.get_running_loop().call_later(self.policy.hold_timeout_s, connection.close)
            if out is not None:
                client.write(out)
                await client.drain()

    # ---- frames ----

    def _note_request(self, connection: _Connection, frame: bytes) -> None:
        try:
            header = decode_request_header(frame)
        except UnsupportedVersionError as exc:
            header = exc.header
        except KafkaProtocolError:
            return  # relayed as is; the broker will answer (or close) as it sees fit
        if header.request_api_key != ApiKey.PRODUCE:
            connection.pending[header.correlation_id] = _Pending(header, [])
            return
        _, request = decode_request(frame)
        assert isinstance(request, ProduceRequest)
        batches = _produce_batches(request)
        with self._lock:
            self._produce_requests += 1
            for _, _, batch in batches:
                if batch is not None:
                    self._batch_sends[batch] += 1
        if request.acks != 0:
            connection.pending[header.correlation_id] = _Pending(header, batches)

    def _note_response(self, connection: _Connection, frame: bytes) -> tuple[bytes | None, DropAction | None]:
        """The bytes to send on (None: drop) and the drop action taken for this response, if any."""
        whole = _SIZE.pack(len(frame)) + frame
        if len(frame) < 4:
            return whole, None
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        pending = connection.pending.pop(correlation_id, None)
        if pending is None:
            return (None if connection.holding else whole), None
        api_key = pending.header.request_api_key
        version = pending.header.request_api_version
        if api_key == ApiKey.PRODUCE:
            return self._produce_response(connection, pending, frame, whole)
        if connection.holding:
            with self._lock:
                self._swallowed += 1
            return None, None
        if api_key in _REWRITTEN:
            _, body = decode_response(frame, api_key, version)
            chunks = encode_response(pending.header, self._rewrite(body), version)
            with self._lock:
                self._rewritten += 1
            assert all(isinstance(chunk, bytes) for chunk in chunks)
            return b"".join(chunk for chunk in chunks if isinstance(chunk, bytes)), None
        return whole, None

    def _produce_response(
        self, connection: _Connection, pending: _Pending, frame: bytes, whole: bytes
    ) -> tuple[bytes | None, DropAction | None]:
        _, body = decode_response(frame, ApiKey.PRODUCE, pending.header.request_api_version)
        assert isinstance(body, ProduceResponse)
        answers = {
            (topic.name, partition.index): (partition.error_code, partition.base_offset)
            for topic in body.responses
            for partition in topic.partition_responses
        }
        with self._lock:
            self._produce_responses += 1
            action: DropAction | None = None
            eligible = bool(answers) and all(error == ErrorCode.NONE for error, _ in answers.values())
            if eligible and not connection.holding:
                self._eligible += 1
                if self._should_drop(self._eligible):
                    action = self.policy.actions[len(self._dropped) % len(self.policy.actions)]
            delivered = action is None and not connection.holding
            if not delivered and action is None:
                self._swallowed += 1
            answered: list[tuple[BatchId, int]] = []
            for topic, partition, batch in pending.batches:
                error_code, base_offset = answers.get(
                    (topic, partition), (ErrorCode.UNKNOWN_SERVER_ERROR, -1)
                )
                if batch is None:
                    continue
                answer = BatchAnswer(
                    connection.number, pending.header.correlation_id, error_code, base_offset, delivered
                )
                self._batch_answers.setdefault(batch, []).append(answer)
                answered.append((batch, base_offset))
            if action is not None:
                self._dropped.append(
                    DroppedResponse(connection.number, pending.header.correlation_id, action, tuple(answered))
                )
        return (whole if delivered else None), action

    def _should_drop(self, n: int) -> bool:
        policy = self.policy
        if n <= policy.skip_first:
            return False
        if policy.max_drops is not None and len(self._dropped) >= policy.max_drops:
            return False
        if policy.every is not None and (n - policy.skip_first) % policy.every == 0:
            return True
        return policy.probability > 0.0 and self._random.random() < policy.probability

    def _rewrite(self, body: Response) -> Response:
        """Point every advertised broker and coordinator address at the proxy (in place)."""
        if isinstance(body, MetadataResponse | DescribeClusterResponse):
            for broker in body.brokers:
                broker.host, broker.port = self.host, self.port
        elif isinstance(body, FindCoordinatorResponse):
            if body.host:  # versions 0-3; an error answer has no address
                body.host, body.port = self.host, self.port
            for coordinator in body.coordinators:  # versions 4+
                if coordinator.host:
                    coordinator.host, coordinator.port = self.host, self.port
        return body


def _produce_batches(request: ProduceRequest) -> list[tuple[str, int, BatchId | None]]:
    """(topic, partition, first batch's id) for each partition of the request; None without a batch."""
    out: list[tuple[str, int, BatchId | None]] = []
    for topic in request.topic_data:
        for partition in topic.partition_data:
            batch: BatchId | None = None
            records = partition.records
            if isinstance(records, bytes | bytearray | memoryview):
                for _, h in iter_batch_headers(records):
                    batch = BatchId(
                        topic.name,
                        partition.index,
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        h.records_count,
                    )
                    break
            out.append((topic.name, partition.index, batch))
    return out


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame (without its size prefix), or None at end of stream or on a broken connection."""
    try:
        head = await reader.readexactly(4)
        (size,) = _SIZE.unpack(head)
        if size < 0 or size > MAX_FRAME_BYTES:
            return None
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
