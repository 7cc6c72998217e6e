"""How fast a partition reassignment copies a log (issue 15's unthrottled move rate), in one run.

    .venv/bin/python bench/reassign_bench.py [--mib 200] [--size 1000] [--load 0] [--throttle-mib 10]
        [--quota-window-num 11]

A 4-broker cluster on a throwaway ZooKeeper; a one-partition topic on brokers 1,2,3 (acks=all, RF 3) gets
MIB MiB of SIZE-byte messages; then ``tidelog reassign``'s API (AlterPartitionReassignments) moves it to
2,3,4 and the figure is the time from the request to the final assignment in ZooKeeper (broker 4 copied
the whole log by follower fetches and joined the ISR), as MiB/s. With ``--load R`` a producer keeps
sending R msg/s (acks=all) during the move, and its delivery failures are counted (0 expected).

The throttled leg then moves it back to 1,2,3 with ``tidelog reassign execute --throttle`` (THROTTLE_MIB
MiB/s; 0 skips the leg), timed the same way, and ``verify`` removes the throttles. With Kafka's default
``replication.quota.window.num`` (11) a fresh quota lets about 10 s worth through at full speed first, so
a short throttled move averages above its throttle; ``--quota-window-num 1`` paces it from the start.
Figures drift on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kazoo.client import KazooClient

from tidelog.testing import Cluster

TOPIC = "moved"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=200)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--load", type=int, default=0, help="msg/s produced during the move (0: none)")
    parser.add_argument("--throttle-mib", type=float, default=10, help="the throttled leg's MiB/s (0: skip)")
    parser.add_argument("--quota-window-num", type=int, default=11, help="replication.quota.window.num")
    args = parser.parse_args()
    config = {
        "min.insync.replicas": 2,
        "log.segment.bytes": 64 * 1024 * 1024,
        "replication.quota.window.num": args.quota_window_num,
    }
    with Cluster(4, config=config) as cluster:
        bootstrap = cluster.bootstrap_servers
        creator = AdminClient({"bootstrap.servers": bootstrap})
        creator.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])], operation_timeout=30)[
            TOPIC
        ].result(60)
        zk = KazooClient(hosts=cluster.connect_string)
        zk.start()
        producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20}
        )
        value = b"x" * args.size
        count = args.mib * 1024 * 1024 // args.size
        started = time.monotonic()
        for _ in range(count):
            while True:
                try:
                    producer.produce(TOPIC, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(300)
        filled = time.monotonic() - started
        print(
            f"filled {args.mib} MiB ({count} messages) in {filled:.1f} s ({args.mib / filled:.1f} MiB/s acks=all)"
        )

        failures: list[str] = []
        stop = threading.Event()

        def load() -> None:
            loader = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})

            def report(err: object, _msg: object) -> None:
                if err is not None:
                    failures.append(str(err))

            while not stop.is_set():
                loader.produce(TOPIC, b"load", partition=0, on_delivery=report)
                loader.poll(0)
                time.sleep(1 / args.load)
            loader.flush(60)

        thread = threading.Thread(target=load, daemon=True)
        if args.load:
            thread.start()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        begun = time.monotonic()
        assert admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): [2, 3, 4]}) == {
            TopicPartition(TOPIC, 0): None
        }
        while json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]["0"] != [2, 3, 4]:
            time.sleep(0.05)
        moved = time.monotonic() - begun
        stop.set()
        if args.load:
            thread.join()
        print(
            f"moved 1,2,3 -> 2,3,4 in {moved:.1f} s: {args.mib / moved:.1f} MiB/s copied by broker 4"
            + (f"; {len(failures)} failed deliveries under {args.load} msg/s" if args.load else "")
        )
        if args.throttle_mib > 0:
            throttled_move(bootstrap, zk, args.mib, int(args.throttle_mib * 1024 * 1024))
        admin.close()
        zk.stop()


def throttled_move(bootstrap: str, zk: KazooClient, mib: int, rate: int) -> None:
    """Move 2,3,4 -> 1,2,3 with ``tidelog reassign execute --throttle rate``, then ``verify``."""
    import tempfile
    from pathlib import Path

    from click.testing import CliRunner

    from tidelog.cli.main import cli

    with tempfile.TemporaryDirectory() as directory:
        plan = Path(directory) / "plan.json"
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [1, 2, 3]}]}
            )
        )
        common = ["--reassignment-json-file", str(plan), "--bootstrap-server", bootstrap]
        begun = time.monotonic()
        executed = CliRunner().invoke(cli, ["reassign", "execute", *common, "--throttle", str(rate)])
        assert executed.exit_code == 0, executed.output
        while json.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]["0"] != [1, 2, 3]:
            time.sleep(0.05)
        moved = time.monotonic() - begun
        print(
            f"throttled to {rate / 1024 / 1024:g} MiB/s: moved 2,3,4 -> 1,2,3 in {moved:.1f} s:"
            f" {mib / moved:.1f} MiB/s copied by broker 1"
        )
        verified = CliRunner().invoke(cli, ["reassign", "verify", *common])
        assert verified.exit_code == 0, verified.output
        print(verified.output.rstrip())


if __name__ == "__main__":
    main()
