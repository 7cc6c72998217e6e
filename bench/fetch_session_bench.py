"""Broker CPU per fetch for one consumer of 1,000 idle partitions (issue 17, KIP-227 fetch sessions).

Starts ``tidelog broker`` on 127.0.0.1:0 in a temporary directory, creates a topic of ``--partitions``
partitions with nothing in them, and lets one kafka-python consumer (the Python client that uses
incremental fetch sessions) poll all of them for ``--seconds`` with ``fetch.max.wait.ms`` 0, so fetches
follow one another as fast as the client sends them. Prints the fetches answered, the broker's CPU seconds
over the run (utime + stime from /proc) and the broker CPU per fetch. With sessions each fetch after the
first is an empty incremental one; a broker that declines sessions gets a full fetch naming every partition
every time.

    .venv/bin/python bench/fetch_session_bench.py --partitions 1000 --seconds 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kafka
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.consumer.fetcher import Fetcher

TOPIC = "idle"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tidelog-sessions-"))
    ready = work / "ready"
    broker = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("tidelog")),
            "broker",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--set",
            f"log.dirs={work / 'data'}",
            "--ready-file",
            str(ready),
        ],
        stderr=subprocess.DEVNULL,
    )
    fetches = [0]
    handle = Fetcher._handle_fetch_response

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        fetches[0] += 1
        return handle(self, *a, **kw)

    Fetcher._handle_fetch_response = counted
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if time.monotonic() > deadline or broker.poll() is not None:
                raise SystemExit("broker did not start")
            time.sleep(0.05)
        bootstrap = ready.read_text().strip()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=300_000)
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)], timeout_ms=300_000)
        admin.close()
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=0
        )
        consumer.assign([TopicPartition(TOPIC, p) for p in range(args.partitions)])
        consumer.seek_to_beginning()
        end = time.monotonic() + 3  # warm-up: positions resolved, the session opened
        while time.monotonic() < end:
            consumer.poll(timeout_ms=100)
        fetches[0] = 0
        cpu_before = _cpu_seconds(broker.pid)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            assert not consumer.poll(timeout_ms=100)
        cpu = _cpu_seconds(broker.pid) - cpu_before
        consumer.close()
        print(f"{args.partitions} idle partitions, {args.seconds:.0f} s: {fetches[0]} fetches")
        print(f"broker CPU {cpu:.2f} s, {cpu / max(fetches[0], 1) * 1e6:.0f} us per fetch")
    finally:
        broker.terminate()
        broker.wait(60)


if __name__ == "__main__":
    main()
