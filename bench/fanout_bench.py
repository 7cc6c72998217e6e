"""Fan-out: produce->delivery latency with many consumers long-polling one partition (issue 17).

Starts ``tidelog broker`` on 127.0.0.1:0 in a temporary directory (or uses ``--bootstrap``), creates a
one-partition topic, and starts ``--consumers`` confluent-kafka consumers spread over ``--processes``
worker processes (one thread per consumer, each assigned partition 0 at its end, fetch.min.bytes 1, the
default fetch.wait.max.ms 500, so a consumer that keeps up is parked in the broker's fetch purgatory
between messages; one that falls behind finds records waiting at every fetch). Once
every consumer has received a warm-up message, one producer (linger.ms 0, acks 1) sends ``--rate``
messages/s for ``--seconds``; each value carries its send time, and every consumer records, for every
message, the time from send to its ``consume()`` returning it. Prints p50/p99/max of that delivery latency
over all consumers and messages, the producer's produce->ack latency, and the broker's CPU seconds per
message produced during the measured phase, what the broker and the consumers cost per fetch response
(and the consumers per delivery), and how long the broker, the producer and the consumers were runnable
but waiting for a CPU (the kernel's schedstat run delay): on a small machine the consumers' threads
compete with the broker for the same cores.

    .venv/bin/python bench/fanout_bench.py --consumers 500 --rate 1000 --seconds 10
    .venv/bin/python bench/fanout_bench.py --consumers 2 --partitions 1000 --rate 50 --seconds 10
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "fanout"
BUCKET_US = 100  # histogram resolution: 0.1 ms
BUCKETS = 200_000  # up to 20 s
_VALUE = struct.Struct(">qq")  # (sequence or -1 for warm-up, send time ns)


def _consumer_thread(
    bootstrap: str, partitions: int, hist: list[int], warmed: threading.Event, stop: threading.Event
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fanout-bench",
            "enable.auto.commit": False,
            "fetch.min.bytes": 1,
            "fetch.wait.max.ms": 500,
            "queued.min.messages": 1000,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(TOPIC, i, -1) for i in range(partitions)])  # OFFSET_END
    unpack = _VALUE.unpack
    try:
        while not stop.is_set():
            first = consumer.poll(0.2)  # returns at the first message (consume() waits out its timeout)
            if first is None:
                continue
            batch = [first, *consumer.consume(num_messages=10_000, timeout=0)]
            now = time.time_ns()
            for message in batch:
                if message.error() is not None:
                    continue
                seq, sent = unpack(message.value() or bytes(16))
                if seq < 0:
                    warmed.set()
                    continue
                hist[min((now - sent) // 1000 // BUCKET_US, BUCKETS - 1)] += 1
    finally:
        consumer.close()


def _worker(bootstrap: str, partitions: int, consumers: int, ready: Any, results: Any, stop: Any) -> None:
    hists = [[0] * BUCKETS for _ in range(consumers)]
    warmed = [threading.Event() for _ in range(consumers)]
    local_stop = threading.Event()
    threads = [
        threading.Thread(
            target=_consumer_thread,
            args=(bootstrap, partitions, hists[i], warmed[i], local_stop),
            daemon=True,
        )
        for i in range(consumers)
    ]
    for thread in threads:
        thread.start()
    for event in warmed:
        event.wait()
    ready.put(consumers)
    stop.wait()
    local_stop.set()
    for thread in threads:
        thread.join(10)
    total = [0] * BUCKETS
    for hist in hists:
        for i, n in enumerate(hist):
            if n:
                total[i] += n
    results.put({i: n for i, n in enumerate(total) if n})


def _percentile(hist: dict[int, int], q: float) -> float:
    count = sum(hist.values())
    if not count:
        return float("nan")
    rank, seen = q * count, 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= rank:
            return (bucket + 1) * BUCKET_US / 1000
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    user, system = _user_system(pid)
    return user + system


def _user_system(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid`` in user space and in the kernel (its syscalls: sends, receives, polls)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _waited(pid: int) -> tuple[float, int]:
    """Seconds ``pid``'s threads have spent runnable but waiting for a CPU (the kernel's schedstat run
    delay, summed over its threads), and how many threads it has."""
    total, threads = 0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that just ended
            continue
        threads += 1
    return total / 1e9, threads


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _fetches(metrics_url: str | None) -> int:
    """Fetch requests the broker has answered (its Prometheus endpoint), 0 without one."""
    if metrics_url is None:
        return 0
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("kafka_network_requestmetrics_requests_total{") and 'request="Fetch"' in line
    )


def _start_broker(work: Path, metrics_port: int) -> tuple[subprocess.Popen[bytes], str]:
    ready = work / "ready"
    broker = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("tidelog")),
            "broker",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--set",
            f"log.dirs={work / 'data'}",
            "--set",
            f"metrics.listener=http://127.0.0.1:{metrics_port}",
            "--ready-file",
            str(ready),
        ],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline or broker.poll() is not None:
            raise SystemExit("broker did not start")
        time.sleep(0.05)
    return broker, ready.read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--consumers", type=int, default=500)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument(
        "--partitions",
        type=int,
        default=1,
        help="partitions of the topic; every consumer is assigned all of them and the producer sends to each"
        " in turn (a wide consumer: each append wakes a fetch that watches them all)",
    )
    parser.add_argument("--rate", type=int, default=1000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument(
        "--broker-pid", type=int, help="with --bootstrap: the broker's pid, for its CPU figure"
    )
    args = parser.parse_args()

    broker = None
    broker_pid: int | None = args.broker_pid
    metrics_url: str | None = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        metrics_port = _free_port()
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        broker, bootstrap = _start_broker(Path(tempfile.mkdtemp(prefix="tidelog-fanout-")), metrics_port)
        broker_pid = broker.pid
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, args.partitions, 1)]).values():
            try:
                future.result(30)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
        ctx = mp.get_context("spawn")
        ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        shares = [
            args.consumers // args.processes + (i < args.consumers % args.processes)
            for i in range(args.processes)
        ]
        workers = [
            # daemons: a run that gives up (no warm-up) does not wait for them at exit
            ctx.Process(
                target=_worker, args=(bootstrap, args.partitions, n, ready, results, stop), daemon=True
            )
            for n in shares
            if n
        ]
        for worker in workers:
            worker.start()
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "log_level": 3})
        acks: list[float] = []

        def acked(err: object, msg: Any) -> None:
            if err is None:
                acks.append((time.time_ns() - _VALUE.unpack(msg.value() or bytes(16))[1]) / 1e6)

        started = 0
        deadline = time.monotonic() + 300
        while started < len(workers):  # warm-up: a message every 50 ms until every consumer has one
            producer.produce(TOPIC, _VALUE.pack(-1, time.time_ns()), partition=0)
            producer.poll(0.05)
            while not ready.empty():
                ready.get()
                started += 1
            if time.monotonic() > deadline:
                raise SystemExit(f"consumers did not warm up: {started} of {len(workers)} processes ready")
        producer.flush(10)
        acks.clear()
        time.sleep(1)
        cpu_before = _cpu_seconds(broker_pid) if broker_pid else 0.0
        system_before = _user_system(broker_pid)[1] if broker_pid else 0.0
        client_before = sum(_cpu_seconds(w.pid) for w in workers if w.pid)
        waited_before = _waited(broker_pid)[0] if broker_pid else 0.0
        client_waited_before = sum(_waited(w.pid)[0] for w in workers if w.pid)
        producer_waited_before = _waited(os.getpid())[0]
        fetches_before = _fetches(metrics_url)
        count = int(args.rate * args.seconds)
        interval = 1 / args.rate
        begin = time.monotonic()
        for seq in range(count):
            due = begin + seq * interval
            delay = due - time.monotonic()
            while delay > 0:  # serve acks while waiting, so each is timed when it arrives
                producer.poll(delay)
                delay = due - time.monotonic()
            producer.produce(
                TOPIC, _VALUE.pack(seq, time.time_ns()), partition=seq % args.partitions, on_delivery=acked
            )
            producer.poll(0)
        producer.flush(30)
        elapsed = time.monotonic() - begin
        time.sleep(2)  # let the last deliveries land
        cpu = (_cpu_seconds(broker_pid) - cpu_before) if broker_pid else float("nan")
        system = (_user_system(broker_pid)[1] - system_before) if broker_pid else float("nan")
        client_cpu = sum(_cpu_seconds(w.pid) for w in workers if w.pid) - client_before
        waited = (_waited(broker_pid)[0] - waited_before) if broker_pid else float("nan")
        client_waits = [_waited(w.pid) for w in workers if w.pid]
        client_waited = sum(w for w, _ in client_waits) - client_waited_before
        client_threads = sum(n for _, n in client_waits)
        producer_waited = _waited(os.getpid())[0] - producer_waited_before
        fetches = _fetches(metrics_url) - fetches_before
        stop.set()
        hist: dict[int, int] = {}
        for _ in workers:
            for bucket, n in results.get(timeout=120).items():
                hist[bucket] = hist.get(bucket, 0) + n
        for worker in workers:
            worker.join(30)
        delivered = sum(hist.values())
        acks.sort()
        print(
            f"consumers {args.consumers} in {len(workers)} processes, {count} messages at {count / elapsed:.0f} msg/s"
        )
        print(f"deliveries {delivered} (expected {count * args.consumers})")
        print(
            f"produce->delivery ms  p50 {_percentile(hist, 0.5):.1f}  p99 {_percentile(hist, 0.99):.1f}"
            f"  max {_percentile(hist, 1.0):.1f}"
        )
        if acks:
            print(
                f"produce->ack ms       p50 {acks[len(acks) // 2]:.2f}  p99 {acks[int(len(acks) * 0.99)]:.2f}"
            )
        print(
            f"broker CPU {cpu:.2f} s over {elapsed + 2:.1f} s ({system:.2f} s of it in the kernel),"
            f" {cpu / count * 1e6:.0f} us per message produced"
        )
        if fetches:
            print(
                f"fetch responses {fetches}, broker CPU {cpu / fetches * 1e6:.0f} us per fetch response"
                f" ({system / fetches * 1e6:.0f} us in the kernel)"
            )
        print(
            f"runnable but waiting for a CPU: broker {waited:.2f} s, producer (this process)"
            f" {producer_waited:.2f} s (summed over their threads)"
        )
        print(
            f"consumer processes ({client_threads} threads) waiting for a CPU {client_waited:.2f} s"
            " (summed over threads)"
        )
        print(
            f"consumer processes CPU {client_cpu:.2f} s"
            + (f", {client_cpu / fetches * 1e6:.0f} us per fetch response" if fetches else "")
            + (f", {client_cpu / delivered * 1e6:.2f} us per delivery" if delivered else "")
        )
        del admin, producer  # closed before the broker goes, so they do not log its disappearance
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(60)


if __name__ == "__main__":
    main()
