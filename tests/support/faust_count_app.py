"""A Faust application counting words, run by tests/server/test_faust.py.

It runs under ``.venv-faust/bin/python`` (faust-streaming with its own aiokafka and mode-streaming, kept
out of tidelog's virtualenv), never inside the test process, and imports nothing from tidelog.

Input: words as the keys of the input topic (the value is unused), so a word's events are in one partition
and the table, co-partitioned with the input topic, keeps its count in that partition. For every event the
agent adds one to the word's count in a ``Table`` (in memory, ``memory://``, backed by the compacted
changelog topic ``<app id>-word_counts-changelog`` that Faust creates) and sends ``count`` (ASCII digits)
to the output topic with the word as key. A worker started with an empty ``--data-dir`` restores the table
from the changelog before it processes anything.

The worker has no web server and runs until SIGTERM (graceful: Faust stops its agents, flushes the
producer and commits the consumer's offsets, then exits 0).
"""

from __future__ import annotations

import argparse

import faust


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--guarantee", choices=["at_least_once", "exactly_once"], required=True)
    parser.add_argument("--changelog-segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--batch-bytes", type=int, default=16384)
    parser.add_argument("--session-timeout", type=float, default=60.0)
    parser.add_argument("--loglevel", default="info")
    args = parser.parse_args()

    app = faust.App(
        args.app_id,
        broker=f"kafka://{args.broker}",
        store="memory://",
        datadir=args.data_dir,
        web_enabled=False,
        processing_guarantee=args.guarantee,
        topic_partitions=args.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=0.5,
        # A SIGKILLed worker stays in the group until its session times out; its successor waits for that.
        broker_session_timeout=args.session_timeout,
        broker_heartbeat_interval=min(3.0, args.session_timeout / 4),
        producer_max_batch_size=args.batch_bytes,  # below the changelog's segment.bytes
    )
    words = app.topic(
        args.input, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    counts_topic = app.topic(
        args.output, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
    )
    counts = app.Table(
        "word_counts",
        default=int,
        partitions=args.partitions,
        extra_topic_configs={"segment.bytes": args.changelog_segment_bytes},
    )

    @app.agent(words)
    async def count(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            word = event.key
            text = word.decode()
            counts[text] += 1
            await counts_topic.send(key=word, value=str(counts[text]).encode())

    worker = faust.Worker(app, loglevel=args.loglevel)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
