"""The cost of the Prometheus metrics on produce throughput, measured in one run (issue 14).

    .venv/bin/python bench/metrics_overhead.py [--n 200000] [--size 100] [--rounds 3] [--partitions 8] [--linger-ms 5]

Two brokers run side by side, one with ``metrics.listener`` (scraped every second, as Prometheus would)
and one without. Each round produces N messages of SIZE bytes (acks=1, linger.ms=5 unless told,
batch.size 1 MiB, no compression) from one confluent-kafka producer to each broker in turn, the order
alternating between rounds, timed until every delivery report is in. The figures are the ratios of the
medians (on / off) of the throughput and of the broker's CPU time per message (from /proc): absolute
rates drift on a shared machine, the ratio of interleaved rounds less, CPU per message least (it does not
count the time the broker waited for a core). ``--linger-ms 0`` makes small requests: the worst case of
a cost paid per request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker


def _produce(bootstrap: str, topic: str, n: int, value: bytes, linger_ms: float = 5) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": linger_ms,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return n / (time.perf_counter() - started)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _metrics_port(broker: Broker) -> int:
    for line in broker.log_path.read_text().splitlines():
        if "metrics on http://" in line:
            return int(line.rsplit(":", 1)[1].split("/")[0])
    raise RuntimeError("the broker did not log its metrics port")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--linger-ms", type=float, default=5, help="0: small requests, the per-request cost's worst case"
    )
    args = parser.parse_args()
    value = b"x" * args.size
    with (
        Broker({"metrics.listener": "http://127.0.0.1:0"}) as on,
        Broker({}) as off,
    ):
        for broker in (on, off):
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
            admin.create_topics([NewTopic("bench", args.partitions, 1)])["bench"].result(30)
        port = _metrics_port(on)
        stop = threading.Event()
        scrapes = 0

        def scrape() -> None:
            nonlocal scrapes
            while not stop.wait(1.0):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                    response.read()
                scrapes += 1

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        rates: dict[str, list[float]] = {"on": [], "off": []}
        cpu_us: dict[str, list[float]] = {"on": [], "off": []}
        _produce(on.bootstrap_servers, "bench", args.n // 10, value)  # warm-up
        _produce(off.bootstrap_servers, "bench", args.n // 10, value)
        for round_ in range(args.rounds):
            order = [("on", on), ("off", off)] if round_ % 2 == 0 else [("off", off), ("on", on)]
            for name, broker in order:
                assert broker.pid is not None
                cpu_before = _cpu_seconds(broker.pid)
                rate = _produce(broker.bootstrap_servers, "bench", args.n, value, args.linger_ms)
                per_message_us = (_cpu_seconds(broker.pid) - cpu_before) / args.n * 1e6
                rates[name].append(rate)
                cpu_us[name].append(per_message_us)
                print(
                    f"round {round_ + 1} metrics {name:>3}: {rate:,.0f} msg/s, broker CPU {per_message_us:.2f} us/msg",
                    flush=True,
                )
        stop.set()
        scraper.join()
    on_median, off_median = statistics.median(rates["on"]), statistics.median(rates["off"])
    print(f"median: on {on_median:,.0f} msg/s, off {off_median:,.0f} msg/s ({scrapes} scrapes)")
    print(
        f"throughput ratio on/off: {on_median / off_median:.3f} (overhead {100 * (1 - on_median / off_median):.1f}%)"
    )
    cpu_on, cpu_off = statistics.median(cpu_us["on"]), statistics.median(cpu_us["off"])
    print(
        f"broker CPU per message: on {cpu_on:.2f} us, off {cpu_off:.2f} us, ratio on/off {cpu_on / cpu_off:.3f}"
    )


if __name__ == "__main__":
    main()
