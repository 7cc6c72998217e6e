"""The broker's CPU per empty long-poll Fetch in process: decode, handler, purgatory, expiry, encode (issue 17).

    .venv/bin/python bench/fetch_handler_bench.py [--partitions 32] [--rounds 2000] [--runs 5]

An in-process broker on uvloop (``Broker`` on a temp data dir, its defaults, a :class:`ManualClock`) with one idle
topic of ``--partitions`` partitions. Each round does what ``request_cost_bench``'s many-connection phase
asks of the broker, minus the event loop and the sockets: for every partition, decode a Fetch v12 frame for
it at its end (``max_wait_ms=1``, ``min_bytes=1``) and hand it to the dispatcher's Fetch route (the quota
wrapper, :class:`~tidelog.server.handlers.fetch.FetchHandler`: every fetch parks in the purgatory); then the
clock moves past the wait and the purgatory's timer callback expires them all (each builds its empty
answer); then each answer is encoded as the connection would. Reports process CPU (user + system,
``resource``) per request, and the share of each step (``perf_counter``), the median of ``--runs`` runs.
What the event loop, the timer and the socket calls add is ``request_cost_bench``'s. Not a test: the
answers are checked only enough to be sure the path is the one meant (parked, then empty, no error).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

import uvloop

from inprocess import cpu, start_broker, stop_broker
from request_cost_raw import fetch_frame
from tidelog.protocol.codec import decode_request, encode_response
from tidelog.protocol.messages import ApiKey
from tidelog.server.clock import ManualClock
from tidelog.server.dispatch import RequestContext

VERSION = 12
TOPIC = "idle"


async def run(partitions: int, rounds: int) -> tuple[float, dict[str, float]]:
    clock = ManualClock()
    broker = start_broker(TOPIC, partitions, prefix="fetch-handler-", clock=clock)
    route = broker.dispatcher.route_for(ApiKey.FETCH, VERSION)
    assert route is not None
    handle = route.handler
    # the purgatory as its clock task runs it: futures of this loop, its timer armed for the next expiry
    # (the broker arms it about once per expiry too); the bench calls the timer's callback itself (the
    # one-step park's: every fetch here is parked so)
    purgatory = broker.fetch_purgatory
    purgatory._loop = asyncio.get_running_loop()
    frames = [fetch_frame(0, topic=TOPIC, partition=p, correlation_id=p)[4:] for p in range(partitions)]

    def expire() -> None:
        if purgatory._timer is not None:
            purgatory._timer.cancel()
        purgatory._expire_parked()

    def one_round(steps: dict[str, float]) -> None:
        t0 = time.perf_counter()
        decoded = [decode_request(frame) for frame in frames]
        t1 = time.perf_counter()
        answers = []
        for (header, body), frame in zip(decoded, frames, strict=True):
            ctx = RequestContext(
                api_key=header.request_api_key,
                api_version=header.request_api_version,
                correlation_id=header.correlation_id,
                client_id=header.client_id,
                client_host="127.0.0.1",
                connection_id=1,
                listener_name="PLAINTEXT",
                request_size=len(frame),
            )
            answers.append(handle(ctx, body))
        t2 = time.perf_counter()
        clock.advance(2)
        expire()
        t3 = time.perf_counter()
        for (header, _), answer in zip(decoded, answers, strict=True):
            assert isinstance(answer, asyncio.Future)
            encode_response(header, answer.result())
        t4 = time.perf_counter()
        steps["decode"] += t1 - t0
        steps["handle"] += t2 - t1
        steps["expire"] += t3 - t2
        steps["encode"] += t4 - t3

    try:
        first = handle(
            RequestContext(ApiKey.FETCH, VERSION, 0, "bench", "127.0.0.1", 1, "PLAINTEXT"),
            decode_request(frames[0])[1],
        )
        assert isinstance(first, asyncio.Future), "an idle partition's fetch parks"
        assert not first.done(), "an idle partition's fetch parks"
        clock.advance(2)
        expire()
        partition = first.result().responses[0].partitions[0]
        assert partition.error_code == 0, partition
        assert not partition.records, partition
        steps = dict.fromkeys(("decode", "handle", "expire", "encode"), 0.0)
        for _ in range(200):  # warm-up
            one_round(steps)
        steps = dict.fromkeys(steps, 0.0)
        gc.collect()
        gc.freeze()  # as the broker does after loading its logs
        start = cpu()
        for _ in range(rounds):
            one_round(steps)
        cost = (cpu() - start) / (rounds * partitions) * 1e6
        return cost, {name: seconds / (rounds * partitions) * 1e6 for name, seconds in steps.items()}
    finally:
        gc.unfreeze()
        stop_broker(broker)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--partitions", type=int, default=32, help="idle partitions, one fetch each per round"
    )
    parser.add_argument("--rounds", type=int, default=2000, help="timed rounds (2000)")
    parser.add_argument("--runs", type=int, default=5, help="repeat, report the median (5)")
    args = parser.parse_args()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(10_000, older, oldest)  # as main.py sets it
    results = [uvloop.run(run(args.partitions, args.rounds)) for _ in range(args.runs)]
    costs = [cost for cost, _ in results]
    median = statistics.median(costs)
    steps = results[costs.index(median)][1]
    print(
        f"empty fetch in process ({args.partitions} partitions): {median:.2f} µs CPU/request "
        f"(runs: {', '.join(f'{c:.2f}' for c in costs)}); "
        + ", ".join(f"{name} {us:.2f}" for name, us in steps.items())
    )


if __name__ == "__main__":
    main()
