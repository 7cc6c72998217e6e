"""Wide-append benchmark: the storage side of issue #17's 1,000-partition produce row, without sockets.

``--partitions`` (1,000) logs under one :class:`OpenSegmentLimiter`, fed round-robin one small batch each
(``--records`` records of 100 B, as librdkafka sends them at 1,000 partitions with linger.ms=5): each
append is ``validate_batches`` then ``PartitionLog.append`` with its headers, what the broker's produce path
does per partition-batch below the replica manager. Phases, each ``--rounds`` rounds over every partition
(a round is one batch per partition), after ``--warmup`` rounds:

* ``first``: the first rounds after the warm-up. With scale_bench's defaults (20,000 warm-up messages over
  1,000 partitions, then 100 per partition) every partition's first index entries (at
  ``index.interval.bytes``, ~24 one-record batches) fall here.
* ``steady``: the same number of rounds again, every partition past its first index entries.

The logs are out of the garbage collector's reach (``gc.freeze``, as the broker freezes the logs it loads
at start-up), so collections walk only what the appends made. Reports process CPU (user + system,
``os.times``) per append, so the figure does not depend on the load of
the machine as a rate would. ``--flush`` also times a final ``flush`` of every log (what a periodic flush
pays, pending index entries included). Not a test: nothing is asserted.

    .venv/bin/python bench/wide_append_bench.py
    .venv/bin/python bench/wide_append_bench.py --partitions 1000 --records 2 --runs 5
"""

from __future__ import annotations

import argparse
import gc
import resource
import shutil
import statistics
import tempfile
from pathlib import Path

from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.protocol.records_header import validate_batches
from tidelog.storage.config import LogConfig
from tidelog.storage.file_handles import OpenSegmentLimiter
from tidelog.storage.partition_log import PartitionLog


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def run(
    partitions: int, records: int, warmup: int, rounds: int, flush: bool
) -> dict[str, tuple[float, float]]:
    root = Path(tempfile.mkdtemp(prefix="wide-append-"))
    config = LogConfig()
    limiter = OpenSegmentLimiter(10_000)
    logs = [
        PartitionLog.open(root / f"t-{p}", config, now_ms=0, clean_shutdown=True, limiter=limiter)
        for p in range(partitions)
    ]
    batch = bytes(
        encode_batch([SimpleRecord(value=b"x" * 100, timestamp=1_700_000_000_000) for _ in range(records)])
    )
    max_bytes = config.max_message_bytes
    gc.collect()
    gc.freeze()  # as the broker does after loading its logs: full collections do not walk them

    def phase(count: int, now_ms: int) -> tuple[float, float]:
        user, system = cpu()
        for r in range(count):
            for log in logs:
                buf = bytearray(batch)  # the broker appends a writable view of the request
                headers = validate_batches(buf, max_batch_bytes=max_bytes)
                log.append(buf, leader_epoch=0, now_ms=now_ms + r, headers=headers)
        user2, system2 = cpu()
        appends = count * partitions
        return (user2 - user) / appends * 1e6, (system2 - system) / appends * 1e6

    phase(warmup, 1_700_000_000_000)
    results = {"first": phase(rounds, 1_700_000_001_000), "steady": phase(rounds, 1_700_000_002_000)}
    if flush:
        user, system = cpu()
        for log in logs:
            log.flush()
        user2, system2 = cpu()
        results["flush (per log)"] = (
            (user2 - user) / partitions * 1e6,
            (system2 - system) / partitions * 1e6,
        )
    for log in logs:
        log.close()
    gc.unfreeze()
    shutil.rmtree(root)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=1, help="records per batch (1)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up rounds (20)")
    parser.add_argument("--rounds", type=int, default=100, help="rounds per timed phase (100)")
    parser.add_argument("--runs", type=int, default=3, help="repeat, report medians (3)")
    parser.add_argument("--flush", action="store_true", help="also time a final flush of every log")
    args = parser.parse_args()
    runs = [
        run(args.partitions, args.records, args.warmup, args.rounds, args.flush) for _ in range(args.runs)
    ]
    print(f"{args.partitions} partitions, {args.records}-record batches, median of {args.runs} runs")
    for name in runs[0]:
        user = statistics.median(r[name][0] for r in runs)
        system = statistics.median(r[name][1] for r in runs)
        unit = "µs CPU per log" if name.startswith("flush") else "µs CPU per append"
        print(f"  {name:16} {user + system:6.2f} {unit} (user {user:.2f}, system {system:.2f})")


if __name__ == "__main__":
    main()
