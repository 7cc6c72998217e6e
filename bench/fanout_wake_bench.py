"""Fan-out, broker side only: CPU per woken fetch, in process, without sockets or clients (issue 17).

Builds a broker on a temporary data dir (one topic of ``--partitions`` partitions), then ``--rounds``
times: parks ``--waiters`` consumer fetches at the log end of every partition (as librdkafka sends them:
FetchRequest v12, read_committed, ``min_bytes`` 1), appends one small batch to one partition (the next one
each round; it completes them all), and encodes every answer as the connection would. With many partitions
this is one wide consumer woken by an append to one of them: ``--waiters 1 --partitions 1000``. Prints the CPU per waiter of parking, of the append that wakes them (the purgatory pass:
wake-up checks, reads, responses) and of encoding the answers. What this leaves out (loop callbacks, the
write per connection, request decoding) ``bench/fanout_bench.py`` measures with real consumers.

    .venv/bin/python bench/fanout_wake_bench.py --waiters 500 --rounds 50
    .venv/bin/python bench/fanout_wake_bench.py --waiters 1 --partitions 1000 --rounds 200
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import Any

from inprocess import start_broker, stop_broker
from tidelog.protocol.codec import encode_response
from tidelog.protocol.messages import ApiKey, FetchRequest, RequestHeader
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.broker import Broker
from tidelog.server.dispatch import RequestContext

VERSION = 12


def _request(offsets: list[int]) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=30_000,
        min_bytes=1,
        max_bytes=52_428_800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="fanout",
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=index, fetch_offset=offset, partition_max_bytes=1_048_576
                    )
                    for index, offset in enumerate(offsets)
                ],
            )
        ],
    )


async def _run(broker: Broker, waiters: int, partitions: int, rounds: int) -> tuple[float, float, float]:
    route = broker.dispatcher.route_for(ApiKey.FETCH, VERSION)
    assert route is not None
    context = RequestContext(
        api_key=ApiKey.FETCH,
        api_version=VERSION,
        correlation_id=1,
        client_id="bench",
        client_host="127.0.0.1",
        connection_id=1,
    )
    header = RequestHeader(
        request_api_key=ApiKey.FETCH, request_api_version=VERSION, correlation_id=7, client_id="bench"
    )
    park = wake = encode = 0.0
    offsets = [0] * partitions
    for round_ in range(rounds):
        t0 = time.process_time()
        parked: list[Any] = [route.handler(context, _request(offsets)) for _ in range(waiters)]
        t1 = time.process_time()
        data = encode_batch([SimpleRecord(value=b"x" * 16, timestamp=int(time.time() * 1000))])
        index = round_ % partitions
        broker.replicas.append("fanout", index, data, now_ms=broker.clock.now_ms())
        offsets[index] += 1
        t2 = time.process_time()
        for future in parked:
            assert isinstance(future, asyncio.Future)
            assert future.done()
            encode_response(header, future.result())
        t3 = time.process_time()
        park, wake, encode = park + t1 - t0, wake + t2 - t1, encode + t3 - t2
    n = waiters * rounds
    return park / n * 1e6, wake / n * 1e6, encode / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--waiters", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    broker = start_broker("fanout", args.partitions, prefix="tidelog-wake-")
    gc.collect()
    gc.freeze()  # as the broker's main does with what startup built
    try:
        park, wake, encode = asyncio.run(_run(broker, args.waiters, args.partitions, args.rounds))
    finally:
        stop_broker(broker)
    print(
        f"{args.waiters} waiters on {args.partitions} partition(s) x {args.rounds} appends:"
        f" CPU per woken fetch  park {park:.1f} us"
        f"  wake (append pass) {wake:.1f} us  encode {encode:.1f} us  total {park + wake + encode:.1f} us"
    )


if __name__ == "__main__":
    main()
