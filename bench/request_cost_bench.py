"""The broker's CPU per request for the smallest requests clients send (issue 17).

    .venv/bin/python bench/request_cost_bench.py [--produce 20000] [--fetch-seconds 5] [--size 100]
        [--profile DIR]

Against a freshly started broker (``tidelog.testing.Broker``, its defaults, one partition):

- **tiny produce**: one confluent-kafka producer, ``acks=1``, ``linger.ms=0``, ``batch.num.messages=1``
  (so every Produce request carries exactly one SIZE-byte message), N messages sent as fast as the
  producer pipelines them; reports msg/s and broker CPU µs per Produce request.
- **empty fetch**: one confluent-kafka consumer assigned to the idle partition at its end,
  ``fetch.wait.max.ms=1``, polled for SECONDS; every Fetch request comes back empty after the wait;
  reports Fetch requests/s and broker CPU µs per Fetch request.

Broker CPU is utime + stime of the broker process from ``/proc/<pid>/stat`` before and after each
phase (a warm-up runs first). Requests are counted by the client (librdkafka's statistics: the
``req`` counters of the broker connection), so the figures include everything the broker does per
request: framing, decoding, dispatch, the handler, encoding and the socket writes, plus its idle
background work over the phase (small: the phases are short).

``--profile DIR`` also records each measured phase with py-spy (a dev extra; root or ptrace rights)
and writes DIR/produce.txt and DIR/fetch.txt as collapsed stacks (flamegraph.pl input, or read with
``sort -k2 -n``); sampling slows the broker a little, so take the CPU figures from a run without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker

TOPIC = "request-cost"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--produce", type=int, default=20_000, help="messages in the tiny-produce phase")
    parser.add_argument("--fetch-seconds", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--profile", type=Path, help="record each phase with py-spy into this directory")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    with Broker({"num.partitions": 1}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        results: dict[str, Any] = {
            "tiny_produce": tiny_produce(
                broker, args.produce, args.size, args.profile and args.profile / "produce.txt"
            ),
            "empty_fetch": empty_fetch(
                broker, args.fetch_seconds, args.profile and args.profile / "fetch.txt"
            ),
        }
    produce, fetch = results["tiny_produce"], results["empty_fetch"]
    print(
        f"tiny produce: {produce['msg_per_s']:,.0f} msg/s, {produce['requests']:,} requests for "
        f"{produce['messages']:,} messages, broker CPU {produce['cpu_us_per_request']:.1f} µs/request "
        f"(user {produce['user_s']:.2f} s, sys {produce['sys_s']:.2f} s)"
    )
    print(
        f"empty fetch: {fetch['requests_per_s']:,.0f} requests/s, {fetch['requests']:,} requests "
        f"({fetch['other_requests']} others), "
        f"broker CPU {fetch['cpu_us_per_request']:.1f} µs/request (user {fetch['user_s']:.2f} s, sys {fetch['sys_s']:.2f} s)"
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
