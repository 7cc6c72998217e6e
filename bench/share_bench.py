"""Share groups as a work queue (issue 13): how fast N records of SIZE bytes on a one-partition topic are
consumed by 1, 2 and 4 ``confluent_kafka.ShareConsumer``s, beside a classic confluent-kafka consumer on
the same data, and beside Redis Streams (XREADGROUP + XACK per record, redis-py) and a RabbitMQ classic
queue (manual ack per record, pika), each without and with PROCESS_MS of processing per record. One run;
ratios are printed against one share consumer and against the classic consumer.

    .venv/bin/python bench/share_bench.py                         # tidelog only (a broker in a temp dir)
    .venv/bin/python bench/share_bench.py --harness ../shared/bench   # plus Redis and RabbitMQ
    .venv/bin/python bench/share_bench.py --n 5000 --size 100 --process-ms 1 --json out.json
    .venv/bin/python bench/share_bench.py --share-config max.poll.records=2000   # records per ShareFetch
    .venv/bin/python bench/share_bench.py --timeline                 # where one share consumer's time goes
    .venv/bin/python bench/share_bench.py --batch-records 100        # small producer batches

What each leg measures: records per second from the first record delivered to the moment the N-th distinct
record has been processed (and, for Redis and RabbitMQ, acknowledged): the steady rate, without client
start-up, group join (reported apart as "join", from subscribe to the first record) or close. Before the
first leg a classic and a share consumer read a warm-up topic, so that no leg's timing includes the creation
of ``__consumer_offsets`` or ``__share_group_state``. Processing is ``time.sleep(process_ms / 1000)`` per
record, in the consumer's thread, so it is the same wait for every system.

- Share legs: K ``ShareConsumer`` threads (one instance each, as librdkafka requires) in one group, implicit
  acknowledgement (a poll accepts the previous poll's records), the group's ``share.auto.offset.reset``
  set to ``earliest`` through a GROUP config first. ``share.acquire.mode`` (KIP-1206) is the default,
  ``batch_optimized`` (a fetch acquires whole producer batches), for the legs without processing, and
  ``record_limit`` for the legs with processing (``--processing-acquire-mode``), as a user with slow
  per-record work sets it: otherwise one consumer acquires a whole producer batch and the others idle. Skipped, with a message, when the broker does not
  advertise ShareFetch (API key 78): the share-group coordinator is another branch of issue 13.
- Classic leg: one ``confluent_kafka.Consumer`` in a fresh group, ``auto.offset.reset=earliest``,
  auto-commit as configured by default (the way applications run it). Its loop does a share worker's work
  per record (the error check, the offset kept) and per call (one ``set.update``), so the legs compare
  the consumers, not their loops.
- Redis leg: XADD of N entries (pipelined), XGROUP CREATE at 0, then one consumer reads
  ``XREADGROUP COUNT 100`` and sends one XACK per entry after processing it (redis-py, no pipelining).
- RabbitMQ leg: N persistent messages published to a durable classic queue (until it holds N), then one consumer
  with ``basic_qos(prefetch_count=100)``, ``basic_ack`` per message after processing it (pika's
  BlockingConnection).

Broker CPU: for a broker this bench starts, each leg also reports the broker's CPU time (all its threads,
``/proc/<pid>/task/*/schedstat``) over the leg, join and close included, per record processed.

Client CPU: the classic and share legs also report the consumer threads' CPU time inside ``consume()`` /
``poll()`` per record (``time.thread_time``): the work librdkafka and confluent-kafka do in the
application's thread to hand it the records (a share consumer's fetch itself runs in librdkafka's own
threads, as a classic consumer's does).

Timeline (``--timeline``, the one-share-consumer legs): librdkafka's debug log (``fetch,protocol``, written
to stderr with millisecond timestamps, redirected to a temp file for the leg) and the worker's own poll
timestamps split the leg's time, summed over its ShareFetch round trips, into: poll() called → ShareFetch
sent; the round trip (librdkafka's rtt: the broker's handling, the wire, reading the response); the
response parsed into records (librdkafka); the records made Python ``Message`` objects until poll()
returns; the application between polls. The debug logging itself costs some client time.

Servers: tidelog runs from this tree (``tidelog.testing.Broker``), or ``--bootstrap`` names a running
broker. Redis and RabbitMQ are started and stopped (by PID, in a fresh directory under
``$PEERBENCH_DIR``, default /tmp/peerbench) with the peer harness's ``peers.py`` (``ServerGroup`` and its
Redis / RabbitMQ server specs; RabbitMQ gets an AMQP listener instead of the stream plugin's). The harness
is not part of this project: give its directory with ``--harness`` (``bash <harness>/run-peers.sh`` once
installs redis-server and rabbitmq-server), or point at running servers with ``--redis HOST:PORT`` and
``--amqp URL``; without either the peer legs are skipped. The peer legs need ``redis`` and ``pika``
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

SHARE_FETCH = 78
"""ShareFetch's API key: a broker that advertises it serves share groups."""

Result = dict[str, Any]


# -- tidelog -------------------------------------------------------------------------------------------------


@contextmanager
def tidelog_broker(bootstrap: str | None) -> Iterator[tuple[str, int | None]]:
    """A bootstrap address and the broker's PID (None for a running broker given with ``--bootstrap``): the
    given one, or a broker started from this tree in a temp dir."""
    if bootstrap is not None:
        yield bootstrap, None
        return
    from tidelog.testing import Broker

    with tempfile.TemporaryDirectory(prefix="share-bench-") as work:
        broker = Broker(
            {"group.initial.rebalance.delay.ms": "0"},
            data_dir=Path(work) / "data",
            run_dir=Path(work) / "run",
            startup_timeout=120,
        )
        broker.start()
        try:
            yield broker.bootstrap_servers, broker.pid
        finally:
            broker.stop(timeout=60)
            broker.close()


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of process ``pid`` so far (nanosecond resolution, unlike /proc/<pid>/stat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def advertises_share_fetch(bootstrap: str) -> bool:
    from tidelog.client.wire import connect

    with connect(bootstrap, timeout=30) as wire:
        return SHARE_FETCH in wire.versions


def produce(bootstrap: str, topic: str, n: int, size: int, batch_records: int | None = None) -> None:
    """``n`` records of ``size`` bytes on a new one-partition ``topic``; ``batch_records``: at most that many
    records a producer batch (librdkafka's ``batch.num.messages``; its default, 10,000, otherwise)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    futures[topic].result(timeout=60)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "log_level": 3,
            **({"batch.num.messages": batch_records} if batch_records else {}),
        }
    )
    payload = b"x" * size
    for i in range(n):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError("records still unacknowledged after 60 s")


def classic_leg(bootstrap: str, topic: str, n: int, process_s: float, group: str) -> Result:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    consumer.subscribe([topic])
    seen: set[int] = set()
    in_call = 0.0  # CPU inside consume(), as the share legs' inside poll()
    start = time.perf_counter()
    first: float | None = None
    deadline = time.monotonic() + 600
    try:
        while len(seen) < n and time.monotonic() < deadline:
            offsets = []  # the same per-record and per-call work as a share worker's (see share_leg)
            cpu = time.thread_time()
            messages = consumer.consume(num_messages=500, timeout=0.5)
            in_call += time.thread_time() - cpu
            for message in messages:
                if message.error() is not None:
                    continue
                first = first or time.perf_counter()
                if process_s:
                    time.sleep(process_s)
                offsets.append(message.offset())
            seen.update(offsets)
        end = time.perf_counter()
    finally:
        consumer.close()
    return _timed(len(seen), start, first, end, client_cpu_us_per_record=in_call / max(len(seen), 1) * 1e6)


def _timed(records: int, start: float, first: float | None, end: float, **extra: Any) -> Result:
    """A leg's figures: ``seconds`` from the first record delivered to the last one processed (the rate's
    base), ``join_seconds`` from the subscribe (or first read) to the first record."""
    first = end if first is None else first
    return {"records": records, "seconds": end - first, "join_seconds": first - start, **extra}


def warm_up(bootstrap: str, share: bool) -> None:
    """A classic consumer and (``share``) a share consumer read a few records of their own topic first, so
    that ``__consumer_offsets`` and ``__share_group_state`` are created and loaded (50 partitions each, on a
    fresh broker) before any leg is timed: otherwise the first classic and the first share leg of a run pay
    for it inside their timing, and the later legs do not."""
    topic = f"share-bench-warm-up-{int(time.time())}"
    produce(bootstrap, topic, 100, 10)
    classic_leg(bootstrap, topic, 100, 0.0, "share-bench-warm-up-classic")
    if share:
        share_leg(bootstrap, topic, 100, 0.0, 1, "share-bench-warm-up-share")


def set_share_group(bootstrap: str, group: str, acquire_mode: str | None) -> None:
    """The group starts at the log's start; ``acquire_mode`` sets ``share.acquire.mode`` (None: default)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    keys = {"share.auto.offset.reset": "earliest"}
    if acquire_mode is not None:
        keys["share.acquire.mode"] = acquire_mode
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in keys.items()]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)


def share_leg(
    bootstrap: str,
    topic: str,
    n: int,
    process_s: float,
    consumers: int,
    group: str,
    client_config: dict[str, str] | None = None,
    acquire_mode: str | None = None,
    timeline: bool = False,
) -> Result:
    """``consumers`` ShareConsumer threads in one share group until the group has processed ``n`` distinct
    records (a redelivered record counts once; redeliveries are reported). ``client_config``: more
    ShareConsumer keys (``--share-config``, e.g. ``max.poll.records``). ``timeline``: one consumer only,
    its time split as the module docstring says (``result["timeline"]``)."""
    if timeline:
        assert consumers == 1, "a timeline follows one consumer"
        with tempfile.TemporaryFile("w+") as log, _stderr_to(log):
            polls: list[tuple[float, float, int]] = []
            config = {**(client_config or {}), "debug": "fetch,protocol", "log_level": "7"}
            result = _share_leg(bootstrap, topic, n, process_s, 1, group, config, acquire_mode, polls)
            log.seek(0)
            result["timeline"] = split_timeline(log.read(), polls)
        return result
    return _share_leg(bootstrap, topic, n, process_s, consumers, group, client_config, acquire_mode, None)


@contextmanager
def _stderr_to(file: Any) -> Iterator[None]:
    """File descriptor 2 (where librdkafka writes its log without a logger) goes to ``file`` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


_LOG_LINE = re.compile(r"%7\|(\d+\.\d+)\|")
_RTT = re.compile(r"rtt ([\d.]+)ms")


def split_timeline(log: str, polls: list[tuple[float, float, int]]) -> dict[str, float]:
    """Milliseconds summed over the polls that returned records (see the module docstring), from
    librdkafka's log lines (millisecond timestamps: each step is found within 1 ms of its poll) and the
    worker's (poll called, poll returned, records) wall-clock times."""
    events: list[tuple[float, str, float]] = []
    for line in log.splitlines():
        m = _LOG_LINE.match(line)
        if m is None:
            continue
        if "Sent ShareFetchRequest" in line:
            events.append((float(m.group(1)), "sent", 0.0))
        elif "Received ShareFetchResponse" in line:
            rtt = _RTT.search(line)
            events.append((float(m.group(1)), "received", float(rtt.group(1)) / 1000 if rtt else 0.0))
        elif "Built share fetch response" in line:
            events.append((float(m.group(1)), "parsed", 0.0))
    sums = dict.fromkeys(("poll_to_sent", "round_trip", "parse", "to_python", "app"), 0.0)
    cycles = records = 0
    i = 0
    for k, (start, end, count) in enumerate(polls):
        while i < len(events) and events[i][0] < start - 0.001:
            i += 1
        found: dict[str, tuple[float, float]] = {}
        j = i
        for step in ("sent", "received", "parsed"):
            while j < len(events) and events[j][1] != step:
                j += 1
            if j < len(events) and events[j][0] <= end + 0.001:
                found[step] = (events[j][0], events[j][2])
        i = j
        if count == 0 or len(found) < 3:
            continue
        cycles += 1
        records += count
        sums["poll_to_sent"] += max(found["sent"][0] - start, 0.0)
        sums["round_trip"] += found["received"][1]
        sums["parse"] += max(found["parsed"][0] - found["received"][0], 0.0)
        sums["to_python"] += max(end - found["parsed"][0], 0.0)
        if k + 1 < len(polls):
            sums["app"] += polls[k + 1][0] - end
    return {"fetches": cycles, "records": records, **{key: v * 1000 for key, v in sums.items()}}


def _share_leg(
    bootstrap: str,
    topic: str,
    n: int,
    process_s: float,
    consumers: int,
    group: str,
    client_config: dict[str, str] | None,
    acquire_mode: str | None,
    polls: list[tuple[float, float, int]] | None,
) -> Result:
    set_share_group(bootstrap, group, acquire_mode)
    seen: set[int] = set()
    deliveries = [0]
    in_poll = [
        0.0
    ]  # the workers' CPU inside poll(): librdkafka's and confluent-kafka's work in the app thread
    first: list[float] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[str] = []
    ready = threading.Barrier(consumers + 1)

    def worker() -> None:
        consumer = confluent_kafka.ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3, **(client_config or {})}
        )
        try:
            consumer.subscribe([topic])
            ready.wait()
            while not done.is_set():
                offsets = []  # the bookkeeping is per poll, as the classic leg's: not a lock per record
                called, cpu = time.time(), time.thread_time()
                messages = consumer.poll(0.2)
                spent = time.thread_time() - cpu
                if polls is not None:
                    polls.append((called, time.time(), len(messages)))
                for message in messages:
                    if message.error() is not None:
                        errors.append(str(message.error()))
                        continue
                    if not first:
                        first.append(time.perf_counter())
                    if process_s:
                        time.sleep(process_s)
                    offsets.append(message.offset())
                if offsets:
                    with lock:
                        deliveries[0] += len(offsets)
                        in_poll[0] += spent
                        seen.update(offsets)
                        if len(seen) >= n:
                            done.set()
        finally:
            with suppress(Exception):
                consumer.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    finished = done.wait(600)
    end = time.perf_counter()
    done.set()
    for thread in threads:
        thread.join(60)
    if not finished:
        raise RuntimeError(
            f"{consumers} share consumers got {len(seen)} of {n} records in 600 s: {errors[:3]}"
        )
    return _timed(
        len(seen),
        start,
        min(first, default=None),
        end,
        redeliveries=deliveries[0] - len(seen),
        client_cpu_us_per_record=in_poll[0] / max(len(seen), 1) * 1e6,
    )


# -- peers through the harness -------------------------------------------------------------------------------


class Peers:
    """Redis and RabbitMQ servers started with the peer harness (``peers.ServerGroup``), stopped by PID."""

    def __init__(self, harness: Path) -> None:
        sys.path.insert(0, str(harness))
        self.peers: Any = importlib.import_module("peers")
        self.work = Path(os.environ.get("PEERBENCH_DIR", "/tmp/peerbench")) / "share-bench"
        self.groups: list[Any] = []

    def _start(self, specs: list[Any]) -> None:
        group = self.peers.ServerGroup(specs, str(self.work / "pids"), str(self.work / "logs"))
        self.groups.append(group)
        group.start()

    def _datadir(self, name: str) -> str:
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.work))
        return str(path)

    def redis(self, port: int = 16395) -> str:
        self.work.mkdir(parents=True, exist_ok=True)
        adapter = self.peers.RedisStreams(name="share-bench-redis", port=port, appendfsync="everysec")
        self._start(adapter.servers(self._datadir("redis")))
        return f"127.0.0.1:{port}"

    def rabbitmq(self, port: int = 15675) -> str:
        """A RabbitMQ node with an AMQP 0-9-1 listener on ``port`` (the harness's stream peer, reconfigured)."""
        self.work.mkdir(parents=True, exist_ok=True)
        datadir = self._datadir("rabbitmq")
        adapter = self.peers.RabbitStream(
            name="share-bench-rabbitmq", port=port + 1, dist_port=35675, epmd_port=14375
        )
        specs = adapter.servers(datadir)
        Path(datadir, "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{port}\n"
            "loopback_users = none\n"
            "log.console = false\nlog.file.level = warning\n"
        )
        Path(datadir, "enabled_plugins").write_text("[].\n")
        specs[-1].ready_port = port
        self._start(specs)
        return f"amqp://guest:guest@127.0.0.1:{port}/%2F"

    def stop(self) -> None:
        for group in reversed(self.groups):
            group.stop()
        self.groups = []


def redis_leg(address: str, n: int, size: int, process_s: float, stream: str) -> Result:
    import redis

    host, _, port = address.rpartition(":")
    client = redis.Redis(host=host, port=int(port))
    client.delete(stream)
    payload = b"x" * size
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"v": payload})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    client.xgroup_create(stream, "workers", id="0")
    seen = 0
    start = time.perf_counter()
    first: float | None = None
    while seen < n:
        answer = client.xreadgroup("workers", "w1", {stream: ">"}, count=100, block=500)
        for _name, entries in answer or []:
            for entry_id, _fields in entries:
                first = first or time.perf_counter()
                if process_s:
                    time.sleep(process_s)
                client.xack(stream, "workers", entry_id)
                seen += 1
    end = time.perf_counter()
    client.delete(stream)
    client.close()
    return _timed(seen, start, first, end)


def rabbitmq_leg(url: str, n: int, size: int, process_s: float, queue: str) -> Result:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_delete(queue)
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "classic"})
    payload = b"x" * size
    properties = pika.BasicProperties(delivery_mode=2)
    for _ in range(n):  # not timed; pika's confirms would wait for each message in turn
        channel.basic_publish("", queue, payload, properties)
    deadline = time.monotonic() + 300
    while channel.queue_declare(queue, passive=True).method.message_count < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"RabbitMQ did not queue {n} messages within 300 s")
        time.sleep(0.1)
    channel.basic_qos(prefetch_count=100)
    seen = 0
    start = time.perf_counter()
    first: float | None = None
    for method, _props, _body in channel.consume(queue, auto_ack=False, inactivity_timeout=30):
        if method is None:
            raise RuntimeError(f"RabbitMQ delivered {seen} of {n} messages, then nothing for 30 s")
        first = first or time.perf_counter()
        if process_s:
            time.sleep(process_s)
        channel.basic_ack(method.delivery_tag)
        seen += 1
        if seen >= n:
            break
    end = time.perf_counter()
    channel.cancel()
    channel.queue_delete(queue)
    connection.close()
    return _timed(seen, start, first, end)


# -- the run -------------------------------------------------------------------------------------------------


def rate(result: Result | None) -> float | None:
    if result is None or not result.get("seconds"):
        return None
    return float(result["records"]) / float(result["seconds"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    share_config = dict(kv.split("=", 1) for kv in args.share_config)
    results: dict[str, Any] = {
        "share_config": share_config,
        "n": args.n,
        "n_processing": args.n_processing,
        "batch_records": args.batch_records,
        "size": args.size,
        "process_ms": args.process_ms,
        "processing_acquire_mode": args.processing_acquire_mode,
        "legs": {},
    }
    legs: dict[str, Result | None] = results["legs"]
    waits = (
        ("no processing", 0.0, args.n),
        (f"{args.process_ms:g} ms/record", args.process_ms / 1000, args.n_processing),
    )
    modes = {"no processing": None, waits[1][0]: args.processing_acquire_mode}

    def leg(name: str, body: Callable[[], Result], pid: int | None = None) -> None:
        """Run one leg; ``pid``: the tidelog broker's, whose CPU over the leg is reported per record."""
        print(f"  {name} ...", end="", flush=True)
        try:
            cpu_before = cpu_seconds(pid) if pid is not None else 0.0
            result = legs[name] = body()
            if pid is not None and result["records"]:
                result["broker_cpu_us_per_record"] = (cpu_seconds(pid) - cpu_before) / result["records"] * 1e6
        except Exception as exc:  # a leg that fails is reported, the others still run
            legs[name] = None
            print(f" failed: {exc}")
            return
        print(f" {rate(legs[name]):,.0f} records/s")

    with tidelog_broker(args.bootstrap) as (bootstrap, broker_pid):
        share = advertises_share_fetch(bootstrap)
        if not share:
            print(
                "  share legs skipped: the broker does not advertise ShareFetch (API key 78); share groups are"
                " served once the share-group coordinator of issue 13 is merged"
            )
        warm_up(bootstrap, share)
        for label, wait, n in waits:
            topic = f"share-bench-{n}-{int(time.time())}"
            print(f"tidelog at {bootstrap}: producing {n} records of {args.size} B to {topic} (1 partition)")
            produce(bootstrap, topic, n, args.size, args.batch_records)
            leg(
                f"classic consumer, {label}",
                lambda w=wait, g=f"classic-{label}", t=topic, n=n: classic_leg(bootstrap, t, n, w, g),
                broker_pid,
            )
            if share:
                for k in (1, 2, 4):
                    leg(
                        f"{k} share consumer(s), {label}",
                        lambda w=wait, k=k, g=f"share-{k}-{label}", t=topic, n=n, m=modes[label]: share_leg(
                            bootstrap, t, n, w, k, g, share_config, m, timeline=args.timeline and k == 1
                        ),
                        broker_pid,
                    )
    peers = Peers(args.harness) if args.harness is not None else None
    try:
        redis_address = args.redis or (peers.redis() if peers is not None else None)
        amqp_url = args.amqp or (peers.rabbitmq() if peers is not None else None)
        if redis_address is None and amqp_url is None:
            print(
                "  Redis and RabbitMQ legs skipped: give --harness DIR (the peer harness) or --redis / --amqp"
            )
        for label, wait, n in waits:
            if redis_address is not None:
                leg(
                    f"Redis Streams XREADGROUP+XACK, {label}",
                    lambda w=wait, n=n: redis_leg(redis_address, n, args.size, w, "share-bench"),
                )
            if amqp_url is not None:
                leg(
                    f"RabbitMQ classic queue, manual ack, {label}",
                    lambda w=wait, n=n: rabbitmq_leg(amqp_url, n, args.size, w, "share-bench"),
                )
    finally:
        if peers is not None:
            peers.stop()
    report(results, waits)
    return results


def report(results: dict[str, Any], waits: tuple[tuple[str, float, int], ...]) -> None:
    legs: dict[str, Result | None] = results["legs"]
    print(f"\nrecords of {results['size']} B on one partition / stream / queue, one run")
    if results["share_config"]:
        print(f"share consumers with {results['share_config']}")
    modes = {"no processing": "batch_optimized (default)", waits[1][0]: results["processing_acquire_mode"]}
    for label, _wait, n in waits:
        print(f"\n{label}, {n} records (share groups: share.acquire.mode={modes[label]}):")
        classic = rate(legs.get(f"classic consumer, {label}"))
        one_share = rate(legs.get(f"1 share consumer(s), {label}"))
        for name, result in legs.items():
            if not name.endswith(label):
                continue
            r = rate(result)
            if r is None:
                print(f"  {name:<55} (not run)")
                continue
            vs = [
                f"{r / classic:5.2f}x classic" if classic else "",
                f"{r / one_share:5.2f}x 1 share" if one_share else "",
            ]
            assert result is not None
            join = f"join {result['join_seconds']:.2f} s"
            cpu = result.get("broker_cpu_us_per_record")
            if cpu is not None:
                vs.append(f"broker {cpu:.2f} us CPU/record")
            if result.get("client_cpu_us_per_record") is not None:
                vs.append(f"in consume()/poll() {result['client_cpu_us_per_record']:.2f} us CPU/record")
            print(f"  {name:<55} {r:>10,.0f} rec/s  {join:>12}  {'  '.join(v for v in vs if v)}")
            timeline = result.get("timeline")
            if timeline:
                print(
                    f"    {timeline['fetches']} ShareFetches, {timeline['records'] / max(timeline['fetches'], 1):,.0f}"
                    f" records each; ms summed: poll->sent {timeline['poll_to_sent']:.1f}, round trip"
                    f" {timeline['round_trip']:.1f}, librdkafka parse {timeline['parse']:.1f}, to Python"
                    f" {timeline['to_python']:.1f}, app between polls {timeline['app']:.1f}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=30000, help="records per leg without processing (30000)")
    parser.add_argument(
        "--n-processing", type=int, default=3000, help="records per leg with processing (default 3000)"
    )
    parser.add_argument("--size", type=int, default=100, help="record value size in bytes (default 100)")
    parser.add_argument(
        "--batch-records",
        type=int,
        help="at most this many records a producer batch (batch.num.messages; default librdkafka's 10,000)",
    )
    parser.add_argument("--process-ms", type=float, default=1.0, help="processing per record (default 1 ms)")
    parser.add_argument("--bootstrap", help="a running tidelog (or Kafka) broker; default: start one")
    parser.add_argument("--harness", type=Path, help="the peer harness directory (holds peers.py)")
    parser.add_argument("--redis", help="a running Redis, HOST:PORT (instead of starting one)")
    parser.add_argument("--amqp", help="a running RabbitMQ, amqp:// URL (instead of starting one)")
    parser.add_argument(
        "--share-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ShareConsumer config key for the share legs (repeatable), e.g. max.poll.records=2000",
    )
    parser.add_argument(
        "--processing-acquire-mode",
        default="record_limit",
        choices=("record_limit", "batch_optimized"),
        help="the share groups' share.acquire.mode for the legs with processing (default record_limit)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="split the one-share-consumer legs' time (librdkafka debug log; see the docstring)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = run(args)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
