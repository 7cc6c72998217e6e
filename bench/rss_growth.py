"""Broker memory while its log grows: RSS of a real tidelog broker as 100 MB -> 5 GB is produced.

    .venv/bin/python bench/rss_growth.py [--gib 5] [--size 1024] [--partitions 1]

Starts ``tidelog broker`` on 127.0.0.1:0 in a temporary directory, produces with confluent-kafka
(linger.ms 5, batch.size 1 MiB, acks=1), and samples the broker's VmRSS from /proc at each checkpoint of
bytes produced. A flat RSS shows the broker holds no per-record or per-byte state in memory (segments are
appended and served from files; indexes are memory-mapped and sparse). Not a test: figures are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=5.0, help="total bytes to produce, in GiB")
    parser.add_argument("--size", type=int, default=1024, help="value size in bytes")
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tidelog-rss-"))
    ready = work / "ready"
    tidelog = Path(sys.executable).with_name("tidelog")
    broker = subprocess.Popen(
        [
            str(tidelog),
            "broker",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--set",
            f"log.dirs={work / 'data'}",
            "--set",
            f"num.partitions={args.partitions}",
            "--ready-file",
            str(ready),
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if time.monotonic() > deadline or broker.poll() is not None:
                raise SystemExit("broker did not start")
            time.sleep(0.05)
        bootstrap = ready.read_text().strip()
        producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1}
        )
        failed: list[object] = []

        def report(err: object, _msg: object) -> None:
            if err is not None:
                failed.append(err)

        value = os.urandom(args.size)
        total = int(args.gib * (1 << 30))
        marks = [m for m in (100 << 20, 500 << 20, 1 << 30, 2 << 30, 3 << 30, 4 << 30, 5 << 30) if m <= total]
        if not marks or marks[-1] != total:
            marks.append(total)
        print(f"{'produced':>12} {'broker RSS MB':>14} {'elapsed s':>10}")
        print(f"{0:>12} {rss_mb(broker.pid):>14.1f} {0:>10.1f}")
        sent = 0
        start = time.monotonic()
        for mark in marks:
            while sent < mark:
                try:
                    producer.produce("rss-growth", value, on_delivery=report)
                except BufferError:
                    producer.poll(0.005)
                    continue
                sent += args.size
            producer.flush(120)
            print(
                f"{sent / (1 << 20):>10.0f}MB {rss_mb(broker.pid):>14.1f} {time.monotonic() - start:>10.1f}"
            )
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
