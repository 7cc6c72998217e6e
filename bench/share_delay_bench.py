"""Cost of a share fetch with many delayed records waiting (issue 13, delayed delivery).

``N`` records delayed by an hour (distinct due times) join a share-partition's window in chunks of 1,000
(one fetch's worth, as ShareFetch admits them), then 1,000 ordinary records; measured: the admission in
total, one later acquire (the ordinary records) and one ``next_deadline`` (each the mean of a few), and the
memory the window holds (tracemalloc). Run: ``.venv/bin/python bench/share_delay_bench.py 1000000 [--interleaved] [--memory] [--due]`` (``--due``: the acquires come after every delivery time).
"""

from __future__ import annotations

import sys
import time
import tracemalloc

from tidelog.coordinator.share.share_partition import SharePartition

HOUR_MS = 3_600_000
CHUNK = 1000


def main(n: int, interleaved: bool, memory: bool, due: bool) -> None:
    if memory:
        tracemalloc.start()  # slows the admission: its time is then not comparable
    sp = SharePartition(0, max_record_locks=2000)
    now = 1_000
    t0 = time.perf_counter()
    if interleaved:
        # every other record delayed; the ordinary ones acquired and acknowledged as they come
        for base in range(0, 2 * n, 2 * CHUNK):
            delays = [(o, now + HOUR_MS + o) for o in range(base, base + 2 * CHUNK, 2)]
            got = sp.acquire("m", CHUNK, base + 2 * CHUNK, now, 30_000, delays)
            for r in got:
                sp.acknowledge("m", r.first_offset, r.last_offset, [1], now)
        end = 2 * n
    else:
        for base in range(0, n, CHUNK):
            delays = [(o, now + HOUR_MS + o) for o in range(base, base + CHUNK)]
            sp.acquire("m", CHUNK, base + CHUNK, now, 30_000, delays)
        end = n
    admit = time.perf_counter() - t0
    held = tracemalloc.get_traced_memory()[0] if memory else 0
    tracemalloc.stop()
    if due:  # the clock passes every delivery time: the first acquire takes the records due
        now += HOUR_MS + n
        end = 0
    t0 = time.perf_counter()
    got = sp.acquire("m", CHUNK, end + CHUNK, now, 30_000)
    first = time.perf_counter() - t0
    if (
        not interleaved and not due
    ):  # interleaved: the acknowledged records behind the delayed ones fill the lock limit
        assert [(r.first_offset, r.last_offset) for r in got] == [(end, end + CHUNK - 1)], got
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        sp.acquire("m", CHUNK, end + CHUNK, now, 30_000)
    acquire = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        sp.next_deadline()
    deadline = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    batches = sp.state_batches()
    persist = time.perf_counter() - t0
    print(
        f"{'interleaved ' if interleaved else ''}{'all due ' if due else ''}delayed={n}: admission {admit:.2f} s, acquire {first * 1000:.2f} ms"
        f" (then {acquire * 1000:.2f} ms), next_deadline {deadline * 1000:.2f} ms, state_batches {persist * 1000:.1f} ms"
        f" ({len(batches)} batches), {len(sp._ranges)} ranges"
        + (f", window memory {held / 2**20:.0f} MiB ({held / n:.0f} B/delayed record)" if memory else "")
    )


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = set(sys.argv)
    main(int(args[0]) if args else 100_000, "--interleaved" in flags, "--memory" in flags, "--due" in flags)
