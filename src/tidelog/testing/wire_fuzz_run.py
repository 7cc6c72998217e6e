"""Send :mod:`tidelog.testing.wire_fuzz` frames to a live broker and judge how it took them.

``python -m tidelog.testing.wire_fuzz_run --frames 20000 --seed 7`` starts a broker (a subprocess in a
temporary directory, ``group.initial.rebalance.delay.ms=0``), creates the generator's topics, takes its RSS
after a warm-up round trip, sends the frames over ``--connections`` concurrent connections, then checks
that a confluent-kafka producer and consumer still round-trip a record, that the RSS is back within
``--rss-slack-mib`` of the start, and that the broker's log holds no traceback and no ERROR line. With
``--bootstrap host:port`` it fuzzes a broker already running (no RSS or log checks). Exit status 0 only when
every check passed; the summary line gives frames, frames per second and the findings.

Invariants:

* Each connection sends bursts of 1-16 frames, then a probe (ApiVersions v0, correlation id -7) and reads
  until the probe's response or the broker's close. A probe unanswered within ``probe_timeout`` is a
  *stall* (the frames of that burst are kept for the report); the connection is then dropped.
* A frame marked ``ends_stream`` ends its burst: the connection is closed right after it.
* Reconnecting is part of the run: a closed connection is replaced and the run goes on to ``frames``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.testing.wire_fuzz import TOPICS, FrameGenerator, FuzzFrame

__all__ = ["FuzzReport", "advertised_versions", "fuzz", "main"]

PROBE_CORRELATION = -7
_PROBE = struct.pack(">ihhih", 10, 18, 0, PROBE_CORRELATION, -1)
_SIZE = struct.Struct(">i")


@dataclass
class FuzzReport:
    """What a run sent and what went wrong."""

    frames: int = 0
    seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    closed_by_broker: int = 0
    stalls: list[list[tuple[str, int, int, str]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        verdict = "OK" if not self.problems and not self.stalls else "FAILED"
        return (
            f"{verdict}: {self.frames} frames in {self.seconds:.1f} s ({self.rate:.0f} frames/s) over "
            f"{self.connections} connections ({self.closed_by_broker} closed by the broker); kinds "
            f"{dict(sorted(self.kinds.items()))}; {len(self.stalls)} stalls; problems: {self.problems or 'none'}; {'; '.join(self.notes)}"
        )


def advertised_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} from the broker's ApiVersions v0 answer."""
    import socket

    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(_PROBE)
        data = b""
        while len(data) < 4 or len(data) < 4 + _SIZE.unpack_from(data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection during ApiVersions")
            data += chunk
    _correlation, error_code, count = struct.unpack_from(">ihi", data, 4)
    if error_code:
        raise ConnectionError(f"ApiVersions answered error {error_code}")
    entries = (struct.unpack_from(">hhh", data, 14 + 6 * i) for i in range(count))
    return {key: (low, high) for key, low, high in entries}


async def _read_until_probe(reader: asyncio.StreamReader) -> bool:
    """Read response frames until the probe's; False when the broker closed the connection first."""
    while True:
        try:
            size_bytes = await reader.readexactly(4)
            (size,) = _SIZE.unpack(size_bytes)
            payload = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        if size >= 4 and _SIZE.unpack_from(payload)[0] == PROBE_CORRELATION:
            return True


async def _connection_loop(
    host: str,
    port: int,
    frames: list[FuzzFrame],
    cursor: list[int],
    report: FuzzReport,
    probe_timeout: float,
    seed: int,
) -> None:
    import random

    rnd = random.Random(seed)
    while cursor[0] < len(frames):
        reader, writer = await asyncio.open_connection(host, port)
        report.connections += 1
        alive = True
        try:
            while alive and cursor[0] < len(frames):
                burst_size = rnd.randint(1, 16)
                burst = frames[cursor[0] : cursor[0] + burst_size]
                cursor[0] += len(burst)
                ended = False
                sent: list[FuzzFrame] = []
                for frame in burst:
                    sent.append(frame)
                    writer.write(frame.data)
                    report.frames += 1
                    report.kinds[frame.kind] += 1
                    if frame.ends_stream:
                        ended = True
                        break
                if len(sent) < len(burst):
                    cursor[0] -= len(burst) - len(sent)
                if ended:
                    with contextlib.suppress(ConnectionError):
                        await writer.drain()
                    alive = False
                    break
                writer.write(_PROBE)
                try:
                    await writer.drain()
                    answered = await asyncio.wait_for(_read_until_probe(reader), probe_timeout)
                except (ConnectionError, OSError):
                    answered = False
                except TimeoutError:
                    report.stalls.append(
                        [(f.kind, f.api_key, f.api_version, f.data[:96].hex()) for f in sent]
                    )
                    answered = False
                if not answered:
                    report.closed_by_broker += 1
                    alive = False
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


async def _fuzz(
    host: str, port: int, frames: list[FuzzFrame], connections: int, probe_timeout: float, seed: int
) -> FuzzReport:
    report = FuzzReport()
    started = time.monotonic()
    shares = [frames[i::connections] for i in range(connections)]
    await asyncio.gather(
        *(
            _connection_loop(host, port, share, [0], report, probe_timeout, seed + i)
            for i, share in enumerate(shares)
        )
    )
    report.seconds = time.monotonic() - started
    return report


def fuzz(
    host: str,
    port: int,
    *,
    frames: int,
    seed: int,
    connections: int = 8,
    probe_timeout: float = 10.0,
    advertised: Mapping[int, tuple[int, int]] | None = None,
) -> FuzzReport:
    """Send ``frames`` frames from ``seed`` to the broker at ``host:port``; the report (no health checks)."""
    versions = dict(advertised) if advertised is not None else advertised_versions(host, port)
    generator = FrameGenerator(seed, versions)
    batch = 20_000
    report = FuzzReport()
    for start in range(0, frames, batch):
        chunk = [generator.next_frame() for _ in range(min(batch, frames - start))]
        part = asyncio.run(_fuzz(host, port, chunk, connections, probe_timeout, seed + start))
        report.frames += part.frames
        report.seconds += part.seconds
        report.kinds.update(part.kinds)
        report.connections += part.connections
        report.closed_by_broker += part.closed_by_broker
        report.stalls.extend(part.stalls)
    return report


# -- the self-contained command: a broker of its own, then the health checks --------------------------


FUZZ_BROKER_CONFIG: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
}


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _round_trip(bootstrap: str, topic: str) -> str | None:
    """None when a confluent-kafka producer and consumer round-trip one record, else what failed."""
    import uuid

    import confluent_kafka

    value = uuid.uuid4().bytes
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "log_level": 3, "message.timeout.ms": 20000}
    )
    reports: list[tuple[object, int | None]] = []
    producer.produce(
        topic, value=value, key=b"k", partition=0, on_delivery=lambda e, m: reports.append((e, m.offset()))
    )
    if producer.flush(30) != 0 or not reports or reports[0][0] is not None:
        return f"produce failed: {reports}"
    offset = reports[0][1]
    if offset is None:
        return "the produce report carries no offset"
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fuzz-health",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                return f"consume failed: {message.error()}"
            if (message.offset(), message.value()) != (offset, value):
                return f"read back {message.offset()}:{message.value()!r}, produced {offset}:{value!r}"
            return None
        return "the produced record was not read back within 20 s"
    finally:
        consumer.close()


def log_problems(log_text: str) -> list[str]:
    """Lines of a broker log showing an exception escaped (a traceback) or an ERROR was logged."""
    return [line for line in log_text.splitlines() if "Traceback" in line or "level=ERROR" in line]


def _distinct_tracebacks(log_text: str) -> str:
    """The first traceback of each distinct exception line in a broker log, with the line before it."""
    lines = log_text.splitlines()
    seen: dict[str, str] = {}
    for i, line in enumerate(lines):
        if "Traceback" in line:
            end = i + 1
            while end < len(lines) and not lines[end][:4].isdigit():
                end += 1
            exception = lines[end - 1] if end - 1 > i else line
            seen.setdefault(exception, "\n".join(lines[max(0, i - 1) : end]))
    return "\n\n".join(seen.values())


def fuzz_own_broker(*, frames: int, seed: int, connections: int = 8, rss_slack_mib: int = 64) -> FuzzReport:
    """The whole check on a fresh broker: fuzz, then round trip, RSS and log (problems in the report)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tidelog.testing import Broker

    with tempfile.TemporaryDirectory(prefix="tidelog-fuzz-") as tmp:
        broker = Broker(FUZZ_BROKER_CONFIG, data_dir=Path(tmp) / "data", run_dir=Path(tmp) / "run")
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
            topics = [
                NewTopic(t, num_partitions=2) for t in TOPICS if t.startswith("fuzz-") and t != "fuzz-compact"
            ]
            topics.append(NewTopic("fuzz-compact", num_partitions=1, config={"cleanup.policy": "compact"}))
            topics.append(NewTopic("fuzz-health", num_partitions=1))
            for future in admin.create_topics(topics).values():
                future.result(timeout=30)
            warm = _round_trip(broker.bootstrap_servers, "fuzz-health")
            if warm is not None:
                raise RuntimeError(f"the broker failed its warm-up round trip: {warm}")
            pid = broker.pid
            assert pid is not None
            rss_before = _rss(pid)
            report = fuzz("127.0.0.1", broker.port, frames=frames, seed=seed, connections=connections)
            if not broker.is_running:
                report.problems.append(f"the broker died: {broker.log_tail(40)}")
                return report
            failed = _round_trip(broker.bootstrap_servers, "fuzz-health")
            if failed is not None:
                report.problems.append(f"round trip after fuzzing: {failed}")
            rss_after = _rss(pid)
            if rss_after - rss_before > rss_slack_mib << 20:
                report.problems.append(
                    f"RSS grew from {rss_before >> 20} MiB to {rss_after >> 20} MiB (slack {rss_slack_mib} MiB)"
                )
            report.notes.append(f"RSS {rss_before >> 20} MiB before, {rss_after >> 20} MiB after")
        finally:
            if broker.is_running:
                broker.stop(timeout=30)
            log_text = broker.log_path.read_text(errors="replace") if broker.log_path.exists() else ""
            broker.close()
        problems = log_problems(log_text)
        if problems:
            report.problems.append(
                f"broker log: {len(problems)} traceback/ERROR lines, first: {problems[:5]}"
            )
            report.notes.append("tracebacks:\n" + _distinct_tracebacks(log_text))
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.testing.wire_fuzz_run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--bootstrap", help="fuzz this running broker (host:port) instead of starting one")
    parser.add_argument("--rss-slack-mib", type=int, default=64)
    args = parser.parse_args(argv)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # "socket.send() raised" on closed sockets
    if args.bootstrap:
        host, _, port = args.bootstrap.rpartition(":")
        report = fuzz(host, int(port), frames=args.frames, seed=args.seed, connections=args.connections)
    else:
        report = fuzz_own_broker(
            frames=args.frames, seed=args.seed, connections=args.connections, rss_slack_mib=args.rss_slack_mib
        )
    sys.stdout.write(report.summary() + "\n")
    for stall in report.stalls[:10]:
        sys.stdout.write(f"stall: {stall}\n")
    return 1 if report.stalls or report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
