"""Storage benchmark: append and sequential-read throughput of tidelog.storage beside this machine's raw disk.

For each case (record size x batch size) the batch is encoded once with ``records.encode_batch``; the timed
loop then appends that same buffer (``PartitionLog.append`` rewrites its offsets in place each time) until
``--volume-mib`` is written, and a final ``flush()`` fsyncs it. The read pass fetches 1 MiB at a time with
``PartitionLog.read`` and sends every region to /dev/null with ``os.sendfile`` (what the broker does), or
reads it with ``os.pread`` (``--read pread``). The raw baseline writes the same volume to a plain file in
1 MiB ``os.write`` calls with a final fsync, and reads it back the same way.

Reads are cold: after the fsync each file's pages are evicted with ``posix_fadvise(DONTNEED)`` (works
without root, touches nothing else); ``--drop-caches global`` writes ``/proc/sys/vm/drop_caches`` instead
(root; falls back to fadvise), ``--drop-caches none`` reads from a warm page cache. The table says which.
Not a test: nothing is asserted.

    python bench/storage_bench.py                 # 512 MiB per case, in a temp dir under the cwd
    python bench/storage_bench.py --volume-mib 1024 --runs 3 --dir /mnt/disk/bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tidelog.protocol.records import RecordBatchHeader, SimpleRecord, encode_batch, read_batch_header
from tidelog.storage.config import LogConfig
from tidelog.storage.fetch_data import FileRegion
from tidelog.storage.partition_log import PartitionLog

MIB = 1 << 20
READ_CHUNK = MIB


@dataclass
class Result:
    name: str
    records_per_batch: int
    batch_bytes: int
    append_s: float
    append_fsync_s: float
    read_s: float
    volume: int
    records: int


def build_batch(record_size: int, batch_bytes: int) -> tuple[bytearray, RecordBatchHeader]:
    """One uncompressed batch of records with random ``record_size``-byte values (incompressible, like the
    raw file's), as close to ``batch_bytes`` as whole records allow."""
    per_record = record_size + 12  # varints and attributes of a small keyless record
    count = max(1, (batch_bytes - 61) // per_record)
    records = [SimpleRecord(value=os.urandom(record_size), timestamp=1_700_000_000_000) for _ in range(count)]
    data = bytearray(encode_batch(records))
    return data, read_batch_header(data)


def drop_caches(paths: list[Path], how: str) -> str:
    """Evict ``paths`` from the page cache; returns how (for the table title)."""
    if how == "none":
        return "warm (page cache kept)"
    os.sync()
    if how == "global":
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            return "cold (drop_caches)"
        except OSError:
            pass
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "cold (posix_fadvise DONTNEED per file)"


def sender(method: str, sink: int) -> Callable[[int, int, int], None]:
    def send(fd: int, position: int, nbytes: int) -> None:
        while nbytes > 0:
            sent = os.sendfile(sink, fd, position, nbytes)
            position += sent
            nbytes -= sent

    def pread(fd: int, position: int, nbytes: int) -> None:
        while nbytes > 0:
            chunk = os.pread(fd, min(nbytes, READ_CHUNK), position)
            position += len(chunk)
            nbytes -= len(chunk)

    return send if method == "sendfile" else pread


def bench_log(
    root: Path, record_size: int, batch_bytes: int, volume: int, read_method: str, caches: str
) -> tuple[Result, str]:
    directory = root / f"bench-{record_size}-{batch_bytes}-0"
    log = PartitionLog.open(directory, LogConfig(), now_ms=0, clean_shutdown=False)
    data, header = build_batch(record_size, batch_bytes)
    appends = max(1, volume // len(data))
    view = memoryview(data)
    start = time.perf_counter()
    for i in range(appends):
        log.append(view, leader_epoch=0, now_ms=i)
    appended = time.perf_counter()
    log.flush()
    flushed = time.perf_counter()
    written = appends * len(data)
    assert log.size_in_bytes == written
    cache = drop_caches([s.log_path for s in log.segments], caches)
    sink = os.open(os.devnull, os.O_WRONLY)
    send = sender(read_method, sink)
    start_read = time.perf_counter()
    offset, total = 0, 0
    end = log.log_end_offset
    while offset < end:
        fetched = log.read(offset, READ_CHUNK)
        region: FileRegion
        for region in fetched.regions:
            send(region.fileno(), region.position, region.nbytes)
        total += fetched.nbytes
        offset = fetched.next_offset
    read_s = time.perf_counter() - start_read
    os.close(sink)
    assert total == written
    log.close()
    shutil.rmtree(directory)
    name = f"{record_size} B records, {batch_bytes // 1024} KiB batches"
    return (
        Result(
            name,
            header.records_count,
            len(data),
            appended - start,
            flushed - start,
            read_s,
            written,
            appends * header.records_count,
        ),
        cache,
    )


def bench_raw(root: Path, volume: int, read_method: str, caches: str) -> tuple[float, float, str]:
    path = root / "raw.bin"
    block = memoryview(os.urandom(MIB))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    for _ in range(volume // MIB):
        view = block
        while view:
            view = view[os.write(fd, view) :]
    os.fsync(fd)
    write_s = time.perf_counter() - start
    os.close(fd)
    cache = drop_caches([path], caches)
    sink = os.open(os.devnull, os.O_WRONLY)
    send = sender(read_method, sink)
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter()
    size = os.fstat(fd).st_size
    for position in range(0, size, READ_CHUNK):
        send(fd, position, min(READ_CHUNK, size - position))
    read_s = time.perf_counter() - start
    os.close(fd)
    os.close(sink)
    path.unlink()
    return write_s, read_s, cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir in the cwd)"
    )
    parser.add_argument("--volume-mib", type=int, default=512, help="bytes written per case, in MiB (512)")
    parser.add_argument(
        "--record-sizes", type=int, nargs="+", default=[100, 1024], help="value bytes (100 1024)"
    )
    parser.add_argument(
        "--batch-kib", type=int, nargs="+", default=[16, 1024], help="batch sizes in KiB (16 1024)"
    )
    parser.add_argument("--read", choices=["sendfile", "pread"], default="sendfile", help="read method")
    parser.add_argument(
        "--drop-caches",
        choices=["fadvise", "global", "none"],
        default="fadvise",
        help="how reads are made cold (fadvise)",
    )
    parser.add_argument("--runs", type=int, default=1, help="repeat everything, keep each row's median (1)")
    args = parser.parse_args()

    volume = args.volume_mib * MIB
    base = args.dir if args.dir is not None else Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    console = Console(width=max(Console().width, 140))
    raw_runs: list[tuple[float, float]] = []
    runs: dict[str, list[Result]] = {}
    cache = ""
    with tempfile.TemporaryDirectory(prefix="storage-bench-", dir=base) as tmp:
        root = Path(tmp)
        console.print(
            f"writing {args.volume_mib} MiB per case under {root} ({args.read} reads, {args.runs} runs)"
        )
        for _ in range(args.runs):
            write_s, read_s, cache = bench_raw(root, volume, args.read, args.drop_caches)
            raw_runs.append((write_s, read_s))
            for record_size in args.record_sizes:
                for batch_kib in args.batch_kib:
                    result, cache = bench_log(
                        root, record_size, batch_kib * 1024, volume, args.read, args.drop_caches
                    )
                    runs.setdefault(result.name, []).append(result)
                    console.print(f"  done: {result.name}")

    def mbs(nbytes: int, seconds: float) -> str:
        return f"{nbytes / MIB / seconds:,.0f}"

    title = (
        f"tidelog.storage vs a raw file, {args.volume_mib} MiB per case, median of {args.runs}; reads {cache}"
    )
    table = Table(title=title)
    for column in ("case", "rec/batch", "batch B", "append MiB/s", "+fsync MiB/s", "records/s", "appends/s"):
        table.add_column(column, justify="left" if column == "case" else "right")
    table.add_column(f"read MiB/s ({args.read})", justify="right")
    table.add_row(
        "raw file: 1 MiB writes, fsync",
        "",
        "",
        "",
        mbs(volume, statistics.median(w for w, _ in raw_runs)),
        "",
        "",
        mbs(volume, statistics.median(r for _, r in raw_runs)),
    )
    for name, results in runs.items():
        r = results[0]
        append_s = statistics.median(x.append_s for x in results)
        fsync_s = statistics.median(x.append_fsync_s for x in results)
        read_s = statistics.median(x.read_s for x in results)
        table.add_row(
            name,
            f"{r.records_per_batch:,}",
            f"{r.batch_bytes:,}",
            mbs(r.volume, append_s),
            mbs(r.volume, fsync_s),
            f"{r.records / fsync_s:,.0f}",
            f"{r.volume / r.batch_bytes / fsync_s:,.0f}",
            mbs(r.volume, read_s),
        )
    console.print(table)


if __name__ == "__main__":
    main()
