"""Client-visible unavailability of a rolling restart (issue 15's figure), measured in one run.

    .venv/bin/python bench/rolling_restart_bench.py [--partitions 6] [--rate 600] [--steady 10] [--settle 3]

A 3-broker cluster on a throwaway ZooKeeper; one topic with replication factor 3 and min.insync.replicas=2
(RF - 1). One idempotent confluent-kafka producer (acks=all, linger.ms=5) sends RATE msg/s spread evenly over
the partitions, one confluent-kafka consumer reads every partition from the beginning. After STEADY seconds
of steady state, each broker in turn gets the README's procedure: SIGTERM (controlled shutdown), start it
again, wait until every partition of the cluster has its whole assignment in the ISR (ZooKeeper's view),
then SETTLE seconds before the next. For the steady window and each restart window (SIGTERM to back in
every ISR) it prints:

- **max ack gap**: the longest time between two consecutive successful acknowledgements of one partition
  (the client-visible unavailability of that partition), over all partitions and over the partitions the
  restarted broker led; at steady state it is the pacing interval plus batching;
- **produce latency** p50 / p99 / max of the messages sent in the window (send to delivery report);
- **retriable errors**: the errors produce responses carried (librdkafka retries them itself; read from
  its ``msg`` debug lines), requests it retried (its statistics' ``txretries``) and the client errors it
  reported (``error_cb``, e.g. ``_TRANSPORT`` when a broker closes its connections);
- at the end: messages failed (must be 0) and whether the consumer read every record of every partition
  exactly once in offset order.

Figures from one run on a shared machine: the ratios to steady state are the point, not the absolutes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from rich.console import Console
from rich.table import Table

from tidelog.testing import Cluster

TOPIC = "rolling"


@dataclass
class Load:
    """What the producer and consumer threads saw (appended from their threads, read at the end)."""

    sent: int = 0
    acks: list[tuple[int, float, float]] = field(default_factory=list)  # partition, sent at, acked at
    failures: list[tuple[float, str]] = field(default_factory=list)
    retries: list[tuple[float, int]] = field(default_factory=list)  # (when, cumulative txretries)
    errors: list[tuple[float, str]] = field(default_factory=list)
    produce_errors: list[tuple[float, str]] = field(default_factory=list)  # retried by the client
    read: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    stop_sending: threading.Event = field(default_factory=threading.Event)
    stop_reading: threading.Event = field(default_factory=threading.Event)


@dataclass
class Window:
    name: str
    start: float
    end: float
    led: tuple[int, ...] = ()
    stop_s: float | None = None
    back_s: float | None = None


def produce(bootstrap: str, partitions: int, rate: float, size: int, load: Load) -> None:
    def on_stats(text: str) -> None:
        stats = json.loads(text)
        total = sum(int(b.get("txretries", 0)) for b in stats.get("brokers", {}).values())
        load.retries.append((time.monotonic(), total))

    def on_error(error: KafkaError) -> None:
        load.errors.append((time.monotonic(), error.name()))

    class ProduceErrors(logging.Handler):
        """librdkafka's "msg" debug lines for a produce response's error, which it retries itself."""

        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if "encountered error: " in text:
                error = text.split("encountered error: ", 1)[1].split(" (actions", 1)[0]
                load.produce_errors.append((time.monotonic(), error))

    logger = logging.getLogger("rolling-bench.rdkafka")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(ProduceErrors())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 500,
            "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 2000,
            "statistics.interval.ms": 250,
            "stats_cb": on_stats,
            "error_cb": on_error,
            "debug": "msg",
            "logger": logger,
        }
    )
    payload = b"x" * size
    interval = 1.0 / rate
    next_at = time.monotonic()
    seq = 0
    while not load.stop_sending.is_set():
        now = time.monotonic()
        if now < next_at:
            producer.poll(min(next_at - now, 0.005))
            continue
        partition = seq % partitions

        def report(err: KafkaError | None, _msg: Message, sent_at: float = now, p: int = partition) -> None:
            if err is None:
                load.acks.append((p, sent_at, time.monotonic()))
            else:
                load.failures.append((time.monotonic(), err.name()))

        while True:
            try:
                producer.produce(TOPIC, payload, partition=partition, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        load.sent += 1
        seq += 1
        next_at += interval
        if now - next_at > 1.0:  # fell behind (a starved thread): do not burst
            next_at = now
    producer.flush(150)


def consume(bootstrap: str, partitions: int, load: Load) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "rolling-bench",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
    try:
        while not load.stop_reading.is_set():
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    load.read[msg.partition()].append(msg.offset())
    finally:
        consumer.close()


def partition_states(zk: KazooClient) -> dict[tuple[str, int], dict[str, Any]]:
    states = {}
    for topic in zk.get_children("/brokers/topics"):
        replicas = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
        for p in zk.get_children(f"/brokers/topics/{topic}/partitions"):
            state = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
            state["replicas"] = replicas[p]
            states[(topic, int(p))] = state
    return states


def every_isr_full(zk: KazooClient) -> bool:
    return all(
        s["leader"] >= 0 and sorted(s["isr"]) == sorted(s["replicas"]) for s in partition_states(zk).values()
    )


def wait(condition: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(window: Window, load: Load, partitions: int) -> dict[str, Any]:
    by_partition: dict[int, list[float]] = defaultdict(list)
    for p, _sent, acked in load.acks:
        by_partition[p].append(acked)
    gaps: dict[int, float] = {}
    gap_at: dict[int, float] = {}
    for p in range(partitions):
        times = sorted(by_partition[p])
        worst = 0.0
        for a, b in itertools.pairwise(times):
            if b >= window.start and a <= window.end:  # a gap overlapping the window
                gap = min(b, window.end) - max(a, window.start)
                if gap > worst:
                    worst, gap_at[p] = gap, max(a, window.start) - window.start
        gaps[p] = worst
    latencies = [acked - sent for _p, sent, acked in load.acks if window.start <= sent <= window.end]

    def retries_at(moment: float) -> int:
        return max((total for when, total in load.retries if when <= moment), default=0)

    worst_partition = max(gaps, key=lambda p: gaps[p])
    return {
        "window": window.name,
        "seconds": round(window.end - window.start, 2),
        "stop_s": window.stop_s,
        "back_in_isr_s": window.back_s,
        "max_ack_gap_ms": round(gaps[worst_partition] * 1000),
        "max_ack_gap_partition": worst_partition,
        "max_ack_gap_from_ms": round(gap_at.get(worst_partition, 0.0) * 1000),
        "max_ack_gap_led_ms": round(max((gaps[p] for p in window.led), default=0.0) * 1000),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "max_ms": round(max(latencies, default=float("nan")) * 1000, 1),
        "messages": len(latencies),
        "request_retries": retries_at(window.end) - retries_at(window.start),
        "produce_errors": dict(
            Counter(name for when, name in load.produce_errors if window.start <= when <= window.end)
        ),
        "produce_errors_ms_after_start": [
            [round((when - window.start) * 1000), name]
            for when, name in load.produce_errors
            if window.start <= when <= window.end
        ],
        "client_errors": dict(
            Counter(name for when, name in load.errors if window.start <= when <= window.end)
        ),
        "failed": sum(1 for when, _name in load.failures if window.start <= when <= window.end),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=600.0, help="messages per second, all partitions")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of steady state first")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between restarts")
    args = parser.parse_args()
    config: dict[str, str | int | bool] = {
        "min.insync.replicas": 2,
        "default.replication.factor": 3,
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": 3,
        "transaction.state.log.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
    }
    directory = Path(tempfile.mkdtemp(prefix="rolling-bench-"))
    load = Load()
    windows: list[Window] = []
    with Cluster(3, config=config, data_dir=directory / "cluster") as cluster:
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        topic = NewTopic(TOPIC, args.partitions, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([topic], operation_timeout=30)[TOPIC].result(60)
        zk = KazooClient(hosts=cluster.connect_string, timeout=10)
        zk.start(timeout=20)
        wait(lambda: every_isr_full(zk) and len(partition_states(zk)) >= args.partitions, "the topic in sync")
        threads = [
            threading.Thread(target=produce, args=(bootstrap, args.partitions, args.rate, args.size, load)),
            threading.Thread(target=consume, args=(bootstrap, args.partitions, load)),
        ]
        for thread in threads:
            thread.start()
        wait(lambda: len(load.acks) >= 100, "the first acknowledgements")
        start = time.monotonic()
        time.sleep(args.steady)  # a measured window, not synchronisation
        windows.append(Window("steady state", start, time.monotonic()))
        for broker in (1, 2, 3):
            led = tuple(
                p for (t, p), s in partition_states(zk).items() if t == TOPIC and s["leader"] == broker
            )
            began = time.monotonic()
            cluster.stop(broker)
            stopped = time.monotonic()
            cluster.start_broker(broker)
            wait(lambda: every_isr_full(zk), f"broker {broker} back in every ISR")
            back = time.monotonic()
            windows.append(
                Window(f"restart broker {broker}", began, back, led, stopped - began, back - stopped)
            )
            print(
                f"broker {broker}: stopped in {stopped - began:.1f} s, back in every ISR "
                f"{back - stopped:.1f} s later",
                file=sys.stderr,
            )
            time.sleep(args.settle)
        load.stop_sending.set()
        threads[0].join(180)
        offsets = {}
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "rolling-bench-hw", "log_level": 3})
        for p in range(args.partitions):
            offsets[p] = reader.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1]
        reader.close()
        wait(lambda: all(len(load.read[p]) >= offsets[p] for p in offsets), "the consumer to catch up", 60)
        load.stop_reading.set()
        threads[1].join(30)
        zk.stop()
        zk.close()
    rows = [measure(w, load, args.partitions) for w in windows]
    in_order = all(load.read[p] == list(range(offsets[p])) for p in offsets)
    summary = {
        "sent": load.sent,
        "acknowledged": len(load.acks),
        "failed": len(load.failures),
        "failed_errors": dict(Counter(name for _when, name in load.failures)),
        "consumer_read_every_record_once_in_order": in_order,
        "partitions": args.partitions,
        "rate": args.rate,
    }
    table = Table(
        title=f"rolling restart, 3 brokers, RF 3, min.insync.replicas 2, {args.partitions} partitions, "
        f"{args.rate:g} msg/s acks=all idempotent",
        title_justify="left",
    )
    for column in (
        "window",
        "s",
        "stop s",
        "back in ISR s",
        "max ack gap ms (partition)",
        "max gap, led ms",
        "p50 ms",
        "p99 ms",
        "max ms",
        "retries",
        "produce errors (retried)",
        "client errors",
        "failed",
    ):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["window"],
            f"{row['seconds']:.1f}",
            "-" if row["stop_s"] is None else f"{row['stop_s']:.1f}",
            "-" if row["back_in_isr_s"] is None else f"{row['back_in_isr_s']:.1f}",
            f"{row['max_ack_gap_ms']} ({row['max_ack_gap_partition']})",
            str(row["max_ack_gap_led_ms"]) if row["window"] != "steady state" else "-",
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            f"{row['max_ms']:.1f}",
            str(row["request_retries"]),
            ", ".join(f"{k} x{v}" for k, v in row["produce_errors"].items()) or "-",
            ", ".join(f"{k} x{v}" for k, v in row["client_errors"].items()) or "-",
            str(row["failed"]),
        )
    Console(width=200).print(table)
    print(json.dumps(summary))
    print(json.dumps(rows), file=sys.stderr)


if __name__ == "__main__":
    main()
