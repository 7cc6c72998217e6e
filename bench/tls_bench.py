"""Produce and consume throughput over PLAINTEXT and over SSL, on one broker in one run.

    .venv/bin/python bench/tls_bench.py [--n 50000] [--size 1000] [--runs 1]

Starts one tidelog broker with a PLAINTEXT and an SSL listener (test certificates made on the spot with
``cryptography``, as tests/support/certs.py does), then with confluent-kafka (acks=1, linger 5 ms)
produces ``n`` messages of ``size`` bytes to a fresh topic and consumes them back, over each listener in
turn (alternating, ``runs`` times). Prints MB/s and the plaintext/TLS ratio. Over TLS the broker cannot
``sendfile`` record data: fetches are copied through the ssl module.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.certs import tls_material

from tidelog.testing import Broker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _TwoListenerBroker(Broker):
    ssl_port = 0

    def command(self, port: int) -> list[str]:
        plain = f"listeners=PLAINTEXT://{self.host}:{port}"
        extra = f",SSL://{self.host}:{self.ssl_port}"
        return [plain + extra if arg == plain else arg for arg in super().command(port)]


def produce(settings: dict[str, object], topic: str, n: int, size: int) -> float:
    producer = confluent_kafka.Producer({**settings, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000})
    payload = b"x" * size
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def consume(settings: dict[str, object], topic: str, n: int) -> float:
    consumer = confluent_kafka.Consumer(
        {
            **settings,
            "group.id": uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    start = None
    while got < n:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                if start is None:
                    start = time.perf_counter()
                got += 1
    elapsed = time.perf_counter() - (start or time.perf_counter())
    consumer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tidelog-tls-bench-"))
    pki = tls_material(work / "pki")
    broker = _TwoListenerBroker(
        {
            "ssl.keystore.location": str(pki.broker.keystore),
            "log.segment.bytes": 1 << 30,
        },
        data_dir=work / "data",
        run_dir=work / "run",
    )
    broker.ssl_port = free_port()
    broker.start()
    listeners = {
        "PLAINTEXT": {"bootstrap.servers": broker.bootstrap_servers},
        "SSL": {
            "bootstrap.servers": f"127.0.0.1:{broker.ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca.cert),
        },
    }
    mb = args.n * args.size / 1e6
    results: dict[str, dict[str, list[float]]] = {name: {"produce": [], "consume": []} for name in listeners}
    try:
        for _ in range(args.runs):
            for name, settings in listeners.items():
                topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                results[name]["produce"].append(mb / produce(settings, topic, args.n, args.size))
                results[name]["consume"].append(mb / consume(settings, topic, args.n))
    finally:
        broker.stop(timeout=30)
        broker.close()
    print(f"{args.n} messages x {args.size} B ({mb:.0f} MB), {args.runs} run(s), median MB/s")
    print(f"{'':10} {'produce':>9} {'consume':>9}")
    for name, figures in results.items():
        print(
            f"{name:10} {statistics.median(figures['produce']):9.1f} {statistics.median(figures['consume']):9.1f}"
        )
    for name, figures in results.items():
        runs = ", ".join(
            f"{p:.1f}/{c:.1f}" for p, c in zip(figures["produce"], figures["consume"], strict=True)
        )
        print(f"{name:10} each run (produce/consume): {runs}")
    for phase in ("produce", "consume"):
        plain = statistics.median(results["PLAINTEXT"][phase])
        tls = statistics.median(results["SSL"][phase])
        print(f"plaintext/TLS {phase}: {plain / tls:.2f}x")


if __name__ == "__main__":
    main()
