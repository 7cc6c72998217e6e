"""Idle cost benchmark (issue #17, "no per-partition cost when idle"): a broker with ``--partitions``
single-replica partitions and nothing produced; reports the broker's CPU seconds (utime + stime of
``/proc/<pid>/stat``, every thread) over ``--seconds`` after a settle period. Not a test: nothing is
asserted. With ``--profile FILE`` it then records a py-spy profile (speedscope/flamegraph by extension)
of another ``--seconds``.

    .venv/bin/python bench/idle_bench.py --partitions 5000 --seconds 60
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="tidelog-idle-"))
    try:
        config = {"num.partitions": 1, "log.max.open.segments": 2000}
        with Broker(config, data_dir=data_dir, startup_timeout=300) as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "socket.timeout.ms": 300_000})
            topic = NewTopic("idle", num_partitions=args.partitions, replication_factor=1)
            admin.create_topics([topic], request_timeout=300, operation_timeout=300)["idle"].result(300)
            del admin
            time.sleep(args.settle)
            assert broker.pid is not None
            before = cpu_seconds(broker.pid)
            time.sleep(args.seconds)
            used = cpu_seconds(broker.pid) - before
            print(
                f"partitions={args.partitions} idle_cpu_s={used:.3f} over {args.seconds:.0f}s "
                f"= {used * 60 / args.seconds:.3f} CPU s/min"
            )
            if args.profile:
                py_spy = Path(sys.executable).parent / "py-spy"
                subprocess.run(
                    [
                        str(py_spy),
                        "record",
                        "-p",
                        str(broker.pid),
                        "-d",
                        str(int(args.seconds)),
                        "-r",
                        "200",
                        "-o",
                        args.profile,
                        "-f",
                        "raw",
                    ],
                    check=False,
                )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
