"""Replication's cost and failover time, measured in one run (issue 11's benchmark).

    .venv/bin/python bench/cluster_bench.py [--n 200000] [--size 100] [--rate 5000] [--seconds 6]

Phases, each on fresh processes (a single broker, then a 3-broker cluster on a throwaway ZooKeeper):

1. **produce**: N messages of SIZE bytes from one confluent-kafka producer (linger.ms=5, batch.size=1 MiB,
   no compression) to a one-partition topic, timed until every delivery report is in: acks=1 on the single
   broker, acks=all with replication factor 3 and min.insync.replicas=2 on the cluster. Broker CPU per
   message is read from /proc.
2. **latency**: RATE msg/s for SECONDS from a producer with linger.ms=0 (acks=all, RF 3); a consumer in
   another process records now - send stamp (monotonic clock); the first 0.5 s is dropped; p50/p99/max.
3. **failover**: with acks=all producing continuously (RF 3), the leader is killed with SIGKILL; the figure
   is the time from the kill to the first acknowledgement of a message sent after it (the new leader
   serving), for each ``zookeeper.session.timeout.ms`` given (default 6000 and 18000).

Ratios (acks=all RF 3 / acks=1 single) are the point: absolute figures drift on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker, Cluster

TOPIC = "bench"
LATENCY_TOPIC = "bench-latency"


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def create_topic(bootstrap: str, replication: int, config: dict[str, str], topic: str = TOPIC) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, replication, config=config)], operation_timeout=30)
    futures[topic].result(60)
    deadline = time.monotonic() + 60
    while True:
        partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        if partition.leader >= 0 and len(partition.isrs) == replication:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the topic's replicas did not get in sync")
        time.sleep(0.1)


def produce(bootstrap: str, n: int, size: int, acks: str, pids: list[int]) -> dict[str, float]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "compression.type": "none",
        }
    )
    payload = b"x" * size
    done = [0, 0]

    def report(err: Any, _msg: Any) -> None:
        done[0 if err is None else 1] += 1

    cpu_before = cpu_seconds(pids)
    started = time.monotonic()
    for _ in range(n):
        while True:
            try:
                producer.produce(TOPIC, payload, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(pids) - cpu_before
    return {
        "msgs_per_s": done[0] / elapsed,
        "failed": done[1],
        "broker_cpu_us_per_msg": cpu / max(done[0], 1) * 1e6,
    }


def _latency_consumer(bootstrap: str, seconds: float, out: Any) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-latency", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(LATENCY_TOPIC, 0, 0)])
    samples: list[float] = []
    deadline = time.monotonic() + seconds + 5
    out.send("ready")
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        sent_ns, start_ns = (int(x) for x in message.value().split(b":")[:2])
        if sent_ns - start_ns >= 500_000_000:
            samples.append((time.monotonic_ns() - sent_ns) / 1e6)
    consumer.close()
    out.send(samples)


def latency(bootstrap: str, rate: int, seconds: float) -> dict[str, float]:
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=_latency_consumer, args=(bootstrap, seconds, child))
    process.start()
    assert parent.recv() == "ready"
    time.sleep(1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    start = time.monotonic_ns()
    sent = 0
    while (now := time.monotonic_ns()) - start < seconds * 1e9:
        due = int((now - start) / 1e9 * rate)
        while sent < due:
            producer.produce(LATENCY_TOPIC, f"{time.monotonic_ns()}:{start}:".encode() + b"x" * 80)
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)
    samples = sorted(parent.recv())
    process.join(30)
    if not samples:
        return {"count": 0}
    return {
        "count": len(samples),
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[int(len(samples) * 0.99) - 1],
        "max_ms": samples[-1],
    }


def failover(session_timeout_ms: int, base: Path) -> dict[str, float]:
    config = {"min.insync.replicas": 2, "replica.lag.time.max.ms": 10000}
    with Cluster(
        3,
        config=config,
        data_dir=base / f"failover-{session_timeout_ms}",
        zookeeper_session_timeout_ms=session_timeout_ms,
    ) as cluster:
        create_topic(cluster.bootstrap_servers, 3, {})
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "linger.ms": 0,
                "enable.idempotence": True,
                "message.timeout.ms": 120000,
            }
        )
        first_after: list[float] = []
        killed_at = [0.0]
        stop = threading.Event()

        def report(err: Any, msg: Any) -> None:
            if err is None and killed_at[0] and float(msg.value()) > killed_at[0] and not first_after:
                first_after.append(time.monotonic())

        def load() -> None:
            while not stop.is_set():
                producer.produce(TOPIC, str(time.monotonic()).encode(), on_delivery=report)
                producer.poll(0.005)
            producer.flush(60)

        thread = threading.Thread(target=load)
        thread.start()
        time.sleep(2)
        killed_at[0] = time.monotonic()
        cluster.kill(leader)
        deadline = time.monotonic() + session_timeout_ms / 1000 + 60
        while not first_after and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        thread.join(90)
        return {
            "session_timeout_ms": session_timeout_ms,
            "failover_s": first_after[0] - killed_at[0] if first_after else float("nan"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--session-timeouts", default="6000,18000")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/tidelog-cluster-bench"))
    args = parser.parse_args()
    # SIGTERM (a timeout, a CI cancel) unwinds like ^C, so the with-blocks stop the brokers and ZooKeeper
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    results: dict[str, Any] = {}
    with Broker(data_dir=args.dir / "single", run_dir=args.dir / "single-run") as single:
        create_topic(single.bootstrap_servers, 1, {})
        results["single_acks1"] = produce(single.bootstrap_servers, args.n, args.size, "1", [single.pid or 0])
    print(json.dumps(results), file=sys.stderr)
    config = {"min.insync.replicas": 2, "replica.lag.time.max.ms": 10000}
    with Cluster(3, config=config, data_dir=args.dir / "cluster") as cluster:
        pids = [b.pid or 0 for b in cluster.brokers.values()]
        create_topic(cluster.bootstrap_servers, 3, {})
        results["rf3_acksall"] = produce(cluster.bootstrap_servers, args.n, args.size, "all", pids)
        create_topic(cluster.bootstrap_servers, 3, {}, LATENCY_TOPIC)
        results["rf3_latency"] = latency(cluster.bootstrap_servers, args.rate, args.seconds)
    print(json.dumps(results), file=sys.stderr)
    results["failover"] = [failover(int(t), args.dir) for t in args.session_timeouts.split(",")]
    results["ratio_rf3_acksall_to_single_acks1"] = (
        results["rf3_acksall"]["msgs_per_s"] / results["single_acks1"]["msgs_per_s"]
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
