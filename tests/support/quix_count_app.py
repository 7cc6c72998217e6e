"""A quixstreams application counting events per key, run by tests/integration/test_quixstreams.py.

It runs under ``.venv-quix/bin/python`` (quixstreams pins an older confluent-kafka than tidelog's own
virtualenv), never inside the test process, and imports nothing from tidelog.

Input: JSON values on a keyed topic (string keys). For every message the app adds one to the count kept in
its state store under the message's key and writes ``{"key": key, "count": count}`` to the output topic
with the same key, so the latest output record per key is that key's count. The state store is backed by a
compacted changelog topic that quixstreams creates on the broker; a restart with an empty ``--state-dir``
recovers the counts from it.

``--pause-after N`` makes it hang (processing stops, the process stays) right after writing its N-th
output record, in the middle of a checkpoint: the output records since the last commit are written, their
transaction (exactly-once) still open, until a test kills the app.

``--consumer-debug cgrp,protocol --loglevel DEBUG`` puts librdkafka's view of the consumer group in the
app's output (for investigating a failure).

The app runs until SIGTERM (graceful: quixstreams commits its checkpoint, then exits 0) or SIGKILL.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from quixstreams import Application, State


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--guarantee", choices=["at-least-once", "exactly-once"], required=True)
    parser.add_argument("--commit-interval", type=float, default=1.0)
    parser.add_argument("--transaction-timeout-ms", type=int, default=10_000)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000)
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--pause-after", type=int, default=0)
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument("--consumer-debug", default="", help="librdkafka debug contexts, e.g. cgrp,protocol")
    args = parser.parse_args()

    app = Application(
        broker_address=args.broker,
        consumer_group=args.group,
        state_dir=args.state_dir,
        auto_offset_reset="earliest",
        processing_guarantee=args.guarantee,
        commit_interval=args.commit_interval,
        loglevel=args.loglevel,
        # A SIGKILLed member stays in the group until its session times out.
        consumer_extra_config={
            "session.timeout.ms": args.session_timeout_ms,
            **({"debug": args.consumer_debug} if args.consumer_debug else {}),
        },
        producer_extra_config={
            # A SIGKILLed exactly-once app leaves its transaction open (quixstreams draws a new
            # transactional.id per process); the broker aborts it after this timeout, and until then
            # read_committed readers of the changelog and the group's offsets wait.
            "transaction.timeout.ms": args.transaction_timeout_ms,
            "batch.size": args.batch_bytes,  # below the broker's segment.bytes
        },
    )
    source = app.topic(args.input, key_deserializer="string", value_deserializer="json")
    sink = app.topic(args.output, key_serializer="string", value_serializer="json")

    processed = 0

    def count(value: dict[str, Any], key: str, timestamp: int, headers: Any, state: State) -> dict[str, Any]:
        nonlocal processed
        processed += 1
        total = state.get("count", 0) + 1
        state.set("count", total)
        return {"key": key, "count": total}

    def maybe_hang(_value: object) -> None:
        if processed == args.pause_after:
            # Hang in the middle of a checkpoint until killed: this message's output is already handed to
            # the producer (sent in the background); under exactly-once its transaction stays open.
            while True:
                time.sleep(1)

    sdf = app.dataframe(source)
    sdf = sdf.apply(count, stateful=True, metadata=True)
    sdf.to_topic(sink)
    sdf.update(maybe_hang)
    app.run()


if __name__ == "__main__":
    main()
