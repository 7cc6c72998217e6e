"""The broker's CPU per full Fetch of many idle partitions, as librdkafka and aiokafka send one (issue 17).

    .venv/bin/python bench/wide_fetch_bench.py [--partitions 1000] [--version 12] [--rounds 200] [--runs 3]
        [--pause-ms 0]
    .venv/bin/python bench/wide_fetch_bench.py --live [--partitions 1000] [--wait-ms 100] [--seconds 10]

Those clients use no fetch sessions (KIP-227): a consumer assigned P partitions names all P in every Fetch,
every ``fetch.wait.max.ms`` when idle. In process (the default): a broker on uvloop (``Broker`` on a temp
data dir, a :class:`ManualClock`) with one idle topic of ``--partitions`` partitions; each round decodes a
Fetch frame naming every partition at its end (``max_wait_ms=500``, ``min_bytes=1``, the partitions rotated
by one each round as librdkafka rotates them), hands it to the dispatcher's Fetch route (it parks), moves the
clock past the wait and lets the purgatory expire it, then encodes the answer. Reports process CPU per fetch
and each step's share (``perf_counter``), the median of ``--runs`` runs. ``--pause-ms``: a pause after each
round, as a consumer polls (the live gap: with 100 ms between fetches the same work costs about twice the
CPU of back-to-back rounds, the 1,000 partitions' state gone from the CPU caches each time). ``--live``: a
broker process and one confluent-kafka consumer assigned every partition at its end, ``fetch.wait.max.ms``
``--wait-ms``; reports the broker's CPU (``/proc``, user and system) per Fetch the consumer's statistics
count over ``--seconds``, and every request it sent meanwhile (librdkafka uses the latest Fetch version, v16
against tidelog: pass ``--version 16`` in process to compare). Not a test: the answers are checked only
enough to be sure the path is the one meant (parked, then empty, no error).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import uvloop

from inprocess import cpu, start_broker, stop_broker
from tidelog.protocol.codec import decode_request, encode_request, encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse, RequestHeader
from tidelog.server.clock import ManualClock
from tidelog.server.dispatch import RequestContext

TOPIC = "idle"
STEPS = ("decode", "handle", "expire", "encode")


def _frame(partitions: list[int], version: int, topic_id: object) -> bytes:
    body = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=TOPIC,
                topic_id=topic_id if version >= 13 else None,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=p, current_leader_epoch=0, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                    for p in partitions
                ],
            )
        ],
    )
    header = RequestHeader(request_api_key=ApiKey.FETCH, request_api_version=version, correlation_id=1)
    return encode_request(header, body)[4:]


async def in_process(
    partitions: int, version: int, rounds: int, pause: float = 0.0
) -> tuple[float, dict[str, float]]:
    clock = ManualClock()
    broker = start_broker(TOPIC, partitions, prefix="wide-fetch-", clock=clock)
    try:
        route = broker.dispatcher.route_for(ApiKey.FETCH, version)
        assert route is not None
        purgatory = broker.fetch_purgatory
        run = asyncio.create_task(purgatory.run())
        await asyncio.sleep(0)
        meta = broker.metadata.topic(TOPIC)
        assert meta is not None
        order = list(range(partitions))
        # librdkafka's rotation: one frame per starting partition
        frames = [
            _frame(order[shift:] + order[:shift], version, meta.topic_id) for shift in range(partitions)
        ]
        steps = dict.fromkeys(STEPS, 0.0)

        def one(frame: bytes) -> None:
            t0 = time.perf_counter()
            header, request = decode_request(frame)
            t1 = time.perf_counter()
            ctx = RequestContext(ApiKey.FETCH, version, 1, "bench", "127.0.0.1", 1, "PLAINTEXT")
            parked = route.handler(ctx, request)
            t2 = time.perf_counter()
            assert isinstance(parked, asyncio.Future)
            assert not parked.done()
            clock.advance(600)
            purgatory._operations._expire_due()  # the timer callback, without the wait
            response = parked.result()
            t3 = time.perf_counter()
            encode_response(header, response)
            t4 = time.perf_counter()
            for name, start, end in zip(STEPS, (t0, t1, t2, t3), (t1, t2, t3, t4), strict=True):
                steps[name] += end - start
            assert isinstance(response, FetchResponse)
            [topic] = response.responses
            assert len(topic.partitions) == partitions
            assert all(p.error_code == ErrorCode.NONE and not p.records for p in topic.partitions)

        for i in range(min(rounds, 30)):
            one(frames[i % partitions])
        steps = dict.fromkeys(STEPS, 0.0)
        gc.collect()
        gc.freeze()
        if pause:  # each round's CPU alone, the loop's own work during the pauses not counted
            used = 0.0
            for i in range(rounds):
                start = cpu()
                one(frames[i % partitions])
                used += cpu() - start
                await asyncio.sleep(pause)  # as a consumer's poll interval: the caches go cold meanwhile
            used /= rounds
        else:
            start = cpu()
            for i in range(rounds):
                one(frames[i % partitions])
            used = (cpu() - start) / rounds
        run.cancel()
        return used, {name: value / rounds for name, value in steps.items()}
    finally:
        gc.unfreeze()
        stop_broker(broker)


def live(partitions: int, wait_ms: int, seconds: float) -> tuple[int, float, float, dict[str, int]]:
    """(fetches, broker user and system CPU seconds, every request the consumer sent) of one
    confluent-kafka consumer over ``seconds``."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = tempfile.mkdtemp(prefix="wide-fetch-live-")
    args = ["--set", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--set", f"log.dirs={data}"]
    broker = subprocess.Popen(  # this interpreter, fixed arguments
        [sys.executable, "-m", "tidelog", "broker", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the topic's creation needs it alive
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(300)
        requests: dict[str, int] = {}

        def stats(text: str) -> None:
            requests.clear()
            for b in json.loads(text)["brokers"].values():
                for name, count in b.get("req", {}).items():
                    requests[name] = requests.get(name, 0) + count

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "wide-fetch-bench",
                "fetch.wait.max.ms": wait_ms,
                "statistics.interval.ms": 200,
                "stats_cb": stats,
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])

        def poll_for(duration: float) -> None:
            end = time.monotonic() + duration
            while time.monotonic() < end:
                consumer.poll(0.1)

        def broker_cpu() -> tuple[float, float]:
            with open(f"/proc/{broker.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            tick = os.sysconf("SC_CLK_TCK")
            return int(fields[11]) / tick, int(fields[12]) / tick

        poll_for(5)  # warm: the assignment's first fetches, the metadata
        (user0, system0), sent0 = broker_cpu(), dict(requests)
        poll_for(seconds)
        (user1, system1), sent1 = broker_cpu(), dict(requests)
        sent = {
            name: count - sent0.get(name, 0) for name, count in sent1.items() if count > sent0.get(name, 0)
        }
        consumer.close()
        return sent.get("Fetch", 0), user1 - user0, system1 - system0, sent
    finally:
        broker.terminate()
        broker.wait()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--version", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pause-ms", type=int, default=0, help="in process: a pause after each round")
    parser.add_argument("--live", action="store_true")
    parser.add_argument("--wait-ms", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    options = parser.parse_args()
    if options.live:
        count, user, system, sent = live(options.partitions, options.wait_ms, options.seconds)
        used = user + system
        print(
            f"live, {options.partitions} idle partitions, fetch.wait.max.ms {options.wait_ms}: {count} fetches, "
            f"{used:.2f} s broker CPU ({user:.2f} user, {system:.2f} system), "
            f"{used / max(count, 1) * 1e3:.2f} ms per fetch; requests sent: "
            + ", ".join(f"{name} {n}" for name, n in sorted(sent.items()))
        )
        return
    results = [
        uvloop.run(in_process(options.partitions, options.version, options.rounds, options.pause_ms / 1e3))
        for _ in range(options.runs)
    ]
    used = statistics.median(r[0] for r in results)
    shares = {name: statistics.median(r[1][name] for r in results) for name in STEPS}
    print(
        f"in process, {options.partitions} idle partitions, Fetch v{options.version}, pause {options.pause_ms} ms: "
        f"{used * 1e3:.2f} ms CPU per"
        " fetch; " + ", ".join(f"{name} {value * 1e3:.2f} ms" for name, value in shares.items())
    )


if __name__ == "__main__":
    main()
