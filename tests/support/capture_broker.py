"""A test-only Kafka broker that records what producers send.

It speaks just enough of the protocol for a real producer (confluent-kafka, kafka-python, aiokafka) to
deliver record batches to it: ApiVersions (v0 layout; any other version is answered with
UNSUPPORTED_VERSION in the v0 layout, so clients fall back to v0), Metadata v0-5 (one broker, itself,
also the controller; any topic asked for exists), FindCoordinator v1 (itself), InitProducerId v0 (for
idempotent producers) and
Produce v3-7 (the raw ``records`` bytes of each partition are captured, offsets assigned from a
per-partition counter, success returned). Everything else closes the connection.

It also serves batches to real consumers: :meth:`CaptureBroker.serve` sets the bytes of a partition's
log, and Fetch v4-11 answers every fetch below the high watermark with all of them (consumers skip
the records before their fetch offset), fetch sessions declined (session id 0).

The messages are encoded by hand with ``struct`` so that these tests do not depend on tidelog's own
codec, which they are partly meant to check. Not thread-safe beyond what the producers need: each
connection runs in its own thread and appends to ``captured`` under a lock.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass
from types import TracebackType

from tidelog.protocol.records import iter_batch_headers

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0
INIT_PRODUCER_ID = 22
FETCH = 1
FIND_COORDINATOR = 10
UNSUPPORTED_VERSION = 35

# (api_key, min, max): Profile N of CLIENT-API-MATRIX.md, a range set that looks like a real Kafka
# release (kafka-python infers the broker version from it) with Produce >= 7 and Fetch >= 10 so that
# librdkafka writes magic-2 batches and allows zstd.
ADVERTISED: tuple[tuple[int, int, int], ...] = (
    (0, 0, 7),  # Produce
    (1, 0, 11),  # Fetch
    (2, 0, 3),  # ListOffsets
    (3, 0, 5),  # Metadata
    (8, 0, 3),  # OffsetCommit
    (9, 0, 3),  # OffsetFetch
    (10, 0, 1),  # FindCoordinator
    (11, 0, 5),  # JoinGroup
    (12, 0, 1),  # Heartbeat
    (13, 0, 1),  # LeaveGroup
    (14, 0, 3),  # SyncGroup
    (18, 0, 0),  # ApiVersions
    (22, 0, 0),  # InitProducerId
)


@dataclass(frozen=True)
class CapturedProduce:
    """The records bytes of one partition of one Produce request."""

    topic: str
    partition: int
    records: bytes
    api_version: int
    client_id: str | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw.decode()

    def bytes_(self) -> bytes | None:
        length = self.take(">i")
        if length < 0:
            return None
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


class CaptureBroker:
    """Run with ``with CaptureBroker() as broker:``; point producers at ``broker.bootstrap``."""

    def __init__(self, partitions: int = 1, node_id: int = 1) -> None:
        self.partitions = partitions
        self.node_id = node_id
        self.captured: list[CapturedProduce] = []
        self.requests: list[tuple[int, int]] = []  # (api_key, api_version) in arrival order
        self._lock = threading.Condition()
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._next_producer_id = 1000
        self._connections: set[socket.socket] = set()
        self._logs: dict[tuple[str, int], bytes] = {}
        broker = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                broker._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="capture-broker", daemon=True)

    def __enter__(self) -> CaptureBroker:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._thread.join(timeout=5)

    # ---- what the tests read --------------------------------------------------------------------

    def batches(self, topic: str, partition: int = 0) -> list[bytes]:
        """Every batch captured for the partition, in arrival order, each as its own bytes."""
        with self._lock:
            payloads = [c.records for c in self.captured if c.topic == topic and c.partition == partition]
        return [
            payload[pos : pos + h.size_in_bytes]
            for payload in payloads
            for pos, h in iter_batch_headers(payload)
        ]

    def wait_for_records(
        self, topic: str, count: int, timeout: float = 20.0, partition: int = 0
    ) -> list[bytes]:
        """Block until batches holding ``count`` records arrived for the partition; return the batches."""
        deadline = time.monotonic() + timeout
        while True:
            batches = self.batches(topic, partition)
            got = sum(next(iter_batch_headers(b))[1].records_count for b in batches)
            if got >= count:
                return batches
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{got} of {count} records for {topic}-{partition}; requests: {self.requests}"
                )
            with self._lock:
                self._lock.wait(min(remaining, 0.1))

    def serve(self, topic: str, log: bytes, partition: int = 0) -> int:
        """Make ``log`` (whole batches, offsets already assigned) the partition's content for Fetch;
        returns the high watermark (the last batch's next offset)."""
        headers = [h for _pos, h in iter_batch_headers(log)]
        high_watermark = headers[-1].next_offset if headers else 0
        with self._lock:
            self._logs[(topic, partition)] = log
            self._next_offsets[(topic, partition)] = high_watermark
        return high_watermark

    # ---- the protocol ---------------------------------------------------------------------------

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)
        try:
            while True:
                size_bytes = self._recv_exactly(conn, 4)
                if size_bytes is None:
                    return
                (size,) = struct.unpack(">i", size_bytes)
                frame = self._recv_exactly(conn, size)
                if frame is None:
                    return
                response = self._handle(frame)
                if response is None:
                    continue
                if response == b"":
                    return
                conn.sendall(struct.pack(">i", len(response)) + response)
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    @staticmethod
    def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = conn.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _handle(self, frame: bytes) -> bytes | None:
        """Response bytes after the size prefix; None for no response (acks=0); b"" to hang up."""
        r = _Reader(frame)
        api_key, api_version, correlation_id = r.take(">h"), r.take(">h"), r.take(">i")
        client_id = r.string()
        with self._lock:
            self.requests.append((api_key, api_version))
        header = struct.pack(">i", correlation_id)
        if api_key == API_VERSIONS:
            error = 0 if api_version == 0 else UNSUPPORTED_VERSION
            body = struct.pack(">hi", error, len(ADVERTISED))
            body += b"".join(struct.pack(">hhh", *entry) for entry in ADVERTISED)
            return header + body
        if api_key == METADATA and api_version <= 5:
            return header + self._metadata(r, api_version)
        if api_key == INIT_PRODUCER_ID and api_version == 0:
            with self._lock:
                producer_id = self._next_producer_id
                self._next_producer_id += 1
            return header + struct.pack(">ihqh", 0, 0, producer_id, 0)
        if api_key == FIND_COORDINATOR and api_version == 1:  # librdkafka asks when group.id is set
            r.string()  # key
            body = struct.pack(">ihh", 0, 0, -1) + struct.pack(">i", self.node_id)
            return header + body + _string("127.0.0.1") + struct.pack(">i", self.port)
        if api_key == FETCH and 4 <= api_version <= 11:
            return header + self._fetch(r, api_version)
        if api_key == PRODUCE and 3 <= api_version <= 7:
            produced = self._produce(r, api_version, client_id)
            return None if produced is None else header + produced
        return b""

    def _metadata(self, r: _Reader, version: int) -> bytes:
        count = r.take(">i")
        topics = [r.string() or "" for _ in range(max(count, 0))]
        with self._lock:
            if count <= 0:  # null or empty: all known topics
                topics = sorted({t for t, _ in self._next_offsets})
        out = bytearray()
        if version >= 3:
            out += struct.pack(">i", 0)  # throttle_time_ms
        out += struct.pack(">i", 1)
        out += struct.pack(">i", self.node_id) + _string("127.0.0.1") + struct.pack(">i", self.port)
        if version >= 1:
            out += _string(None)  # rack
        if version >= 2:
            out += _string("capture-cluster")
        if version >= 1:
            out += struct.pack(">i", self.node_id)  # controller_id
        out += struct.pack(">i", len(topics))
        for topic in topics:
            out += struct.pack(">h", 0) + _string(topic)
            if version >= 1:
                out += b"\x00"  # is_internal
            out += struct.pack(">i", self.partitions)
            for partition in range(self.partitions):
                out += struct.pack(">hii", 0, partition, self.node_id)
                out += struct.pack(">ii", 1, self.node_id)  # replicas
                out += struct.pack(">ii", 1, self.node_id)  # isr
                if version >= 5:
                    out += struct.pack(">i", 0)  # offline replicas
            with self._lock:
                for partition in range(self.partitions):
                    self._next_offsets.setdefault((topic, partition), 0)
        return bytes(out)

    def _fetch(self, r: _Reader, version: int) -> bytes:
        r.take(">i")  # replica_id
        max_wait_ms = r.take(">i")
        r.take(">i")  # min_bytes
        r.take(">i")  # max_bytes
        r.take(">b")  # isolation_level
        if version >= 7:
            r.take(">i")  # session_id
            r.take(">i")  # session_epoch
        wanted: list[tuple[str, list[tuple[int, int]]]] = []
        for _ in range(r.take(">i")):
            topic = r.string() or ""
            partitions = []
            for _ in range(r.take(">i")):
                partition = r.take(">i")
                if version >= 9:
                    r.take(">i")  # current_leader_epoch
                fetch_offset = r.take(">q")
                if version >= 5:
                    r.take(">q")  # log_start_offset
                r.take(">i")  # partition_max_bytes
                partitions.append((partition, fetch_offset))
            wanted.append((topic, partitions))
        answers = []
        any_data = False
        with self._lock:
            for topic, partitions in wanted:
                rows = []
                for partition, fetch_offset in partitions:
                    log = self._logs.get((topic, partition), b"")
                    high_watermark = self._next_offsets.get((topic, partition), 0)
                    records = log if fetch_offset < high_watermark else b""
                    any_data = any_data or bool(records)
                    rows.append((partition, high_watermark, records))
                answers.append((topic, rows))
        if not any_data:
            time.sleep(min(max_wait_ms, 100) / 1000)
        out = bytearray(struct.pack(">i", 0))  # throttle_time_ms
        if version >= 7:
            out += struct.pack(">hi", 0, 0)  # error_code, session_id 0: no fetch session
        out += struct.pack(">i", len(answers))
        for topic, rows in answers:
            out += _string(topic) + struct.pack(">i", len(rows))
            for partition, high_watermark, records in rows:
                out += struct.pack(">ihqq", partition, 0, high_watermark, high_watermark)  # hw, last stable
                if version >= 5:
                    out += struct.pack(">q", 0)  # log_start_offset
                out += struct.pack(">i", -1)  # aborted_transactions: null
                if version >= 11:
                    out += struct.pack(">i", -1)  # preferred_read_replica
                out += struct.pack(">i", len(records)) + records
        return bytes(out)

    def _produce(self, r: _Reader, version: int, client_id: str | None) -> bytes | None:
        r.string()  # transactional_id
        acks = r.take(">h")
        r.take(">i")  # timeout_ms
        results: list[tuple[str, list[tuple[int, int]]]] = []
        for _ in range(r.take(">i")):
            topic = r.string() or ""
            partitions = []
            for _ in range(r.take(">i")):
                partition = r.take(">i")
                records = r.bytes_() or b""
                with self._lock:
                    self.captured.append(CapturedProduce(topic, partition, records, version, client_id))
                    base_offset = self._next_offsets.get((topic, partition), 0)
                    next_offset = base_offset
                    for _pos, h in iter_batch_headers(records):
                        next_offset += h.last_offset_delta + 1
                    self._next_offsets[(topic, partition)] = next_offset
                    self._lock.notify_all()
                partitions.append((partition, base_offset))
            results.append((topic, partitions))
        if acks == 0:
            return None
        out = bytearray(struct.pack(">i", len(results)))
        for topic, partitions in results:
            out += _string(topic) + struct.pack(">i", len(partitions))
            for partition, base_offset in partitions:
                out += struct.pack(">ihq", partition, 0, base_offset)
                if version >= 2:
                    out += struct.pack(">q", -1)  # log_append_time_ms
                if version >= 5:
                    out += struct.pack(">q", 0)  # log_start_offset
        out += struct.pack(">i", 0)  # throttle_time_ms
        return bytes(out)
