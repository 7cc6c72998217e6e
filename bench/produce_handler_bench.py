"""The broker's CPU per Produce request in its handler and below, without sockets or codec (issue 17).

    .venv/bin/python bench/produce_handler_bench.py [--partitions 1000] [--records 40] [--rounds 20]
        [--warmup 50] [--runs 3] [--idempotent] [--acks -1]

An in-process broker (``tests/server/inprocess.make_broker``'s way: ``Broker`` on a temp data dir, its
defaults) with one topic of ``--partitions`` partitions. Each call is what the dispatcher hands the Produce
route (the quota wrapper, :class:`~tidelog.server.handlers.produce.ProduceHandler`, the replica manager,
the partition, the log) for a decoded ProduceRequest v9 carrying ONE partition's batch of ``--records``
100 B records, as librdkafka sends them (one partition per request): at 1,000 partitions with
``linger.ms=5`` a request holds 14-65 messages; the tiny produce of ``request_cost_bench`` is
``--partitions 1 --records 1``. Partitions are fed round-robin; the payload is a fresh ``bytearray`` each
time (a decoded request's records are a writable view of the frame). ``--idempotent`` gives the batches a
producer id and consecutive sequences (the Java client's default), so the producer-state checks run.

Phases: ``--warmup`` rounds (one batch per partition each; enough that every partition is past its first
index entries), then ``--rounds`` rounds timed. Reports process CPU (user + system, ``resource``) per
request, the median of ``--runs`` runs; what the connection, framing and codec add on top is
``request_cost_bench``'s and ``scale_bench``'s. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time

from inprocess import cpu, start_broker, stop_broker
from tidelog.protocol.messages import ApiKey, ProduceRequest
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.dispatch import RequestContext

VERSION = 9


async def run(partitions: int, records: int, warmup: int, rounds: int, idempotent: bool, acks: int) -> float:
    broker = start_broker("t", partitions, prefix="produce-handler-")
    route = broker.dispatcher.route_for(ApiKey.PRODUCE, VERSION)
    assert route is not None
    handle = route.handler
    ctx = RequestContext(
        api_key=ApiKey.PRODUCE,
        api_version=VERSION,
        correlation_id=1,
        client_id="rdkafka",
        client_host="127.0.0.1",
        connection_id=1,
    )
    now = int(time.time() * 1000)
    value = b"x" * 100
    sequences = [0] * partitions

    def batch(partition: int) -> bytearray:
        if not idempotent:
            return bytearray(template)
        sequence = sequences[partition]
        sequences[partition] = sequence + records
        return bytearray(
            encode_batch(
                [SimpleRecord(value=value, timestamp=now) for _ in range(records)],
                producer_id=1000 + partition,
                producer_epoch=0,
                base_sequence=sequence,
            )
        )

    template = encode_batch([SimpleRecord(value=value, timestamp=now) for _ in range(records)])

    def request(partition: int) -> ProduceRequest:
        return ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="t",
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=partition, records=batch(partition))
                    ],
                )
            ],
        )

    def phase(count: int) -> float:
        # the requests are built outside the timed part, as the codec builds them outside the handler
        pending = [request(p) for _ in range(count) for p in range(partitions)]
        gc.collect()
        start = cpu()
        for req in pending:
            answer = handle(ctx, req)
            if acks != 0:
                assert not asyncio.isfuture(answer), "a single node answers acks=all at once"
                assert answer.responses[0].partition_responses[0].error_code == 0, answer  # type: ignore[union-attr]
        return (cpu() - start) / len(pending) * 1e6

    try:
        gc.freeze()  # as the broker does after loading its logs
        chunk = max(1, 20_000 // partitions)
        for done in range(0, warmup, chunk):
            phase(min(chunk, warmup - done))
        costs = [phase(min(chunk, rounds - done)) for done in range(0, rounds, chunk)]
        return statistics.fmean(costs)
    finally:
        gc.unfreeze()
        stop_broker(broker)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=40, help="100 B records per request (40)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up rounds (50)")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (20)")
    parser.add_argument("--runs", type=int, default=3, help="repeat, report the median (3)")
    parser.add_argument("--idempotent", action="store_true", help="producer ids and sequences")
    parser.add_argument("--acks", type=int, default=-1, choices=(-1, 0, 1))
    args = parser.parse_args()
    costs = [
        asyncio.run(run(args.partitions, args.records, args.warmup, args.rounds, args.idempotent, args.acks))
        for _ in range(args.runs)
    ]
    print(
        f"{args.partitions} partitions, {args.records}-record batches, acks={args.acks}"
        f"{', idempotent' if args.idempotent else ''}: {statistics.median(costs):.2f} µs CPU per request "
        f"(runs: {', '.join(f'{c:.2f}' for c in costs)})",
        file=sys.stdout,
    )


if __name__ == "__main__":
    main()
