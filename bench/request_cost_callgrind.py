"""Instructions per request of a live broker under callgrind (issue 17): a deterministic count on a busy machine.

    .venv/bin/python bench/request_cost_callgrind.py [--fetches 3000] [--produces 2000] [--connections 32]
        [--out DIR]

A broker (``tidelog.testing.Broker``, its defaults) runs under ``valgrind --tool=callgrind``. After a
warm-up, the counters are zeroed (``callgrind_control -z``), a fixed number of requests is answered, and the
counters are dumped (``callgrind_control -d``); the dump's total instructions over the requests answered is
the figure. Two phases, as in ``request_cost_bench.py``:

- **empty fetch**: CONNECTIONS connections each keep one Fetch v12 for an idle partition in flight
  (``max_wait_ms=1``), the next sent as soon as the answer is read;
- **tiny produce**: one connection, Produce v9 acks=1 with one 100-byte record, one request at a time.

The counts include everything the process runs while the phase lasts (the loop, background tasks), as the
CPU figures do; under valgrind the broker runs about 50 times slower, so timers fire at other moments than
natively (an empty fetch always waits out its 1 ms). Compare runs of the same phase sizes. The dumps stay
in DIR (``callgrind_annotate`` reads them) when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from request_cost_bench import IDLE_TOPIC, idle_fetch_frame
from request_cost_raw import TOPIC, produce_frame, roundtrip
from scale_bench import create_topic
from tidelog.testing import Broker

_SIZE = struct.Struct(">i")


class Fetchers:
    """``connections`` connections to ``address``, each sending Fetch for its own idle partition."""

    def __init__(self, address: tuple[str, int], connections: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.sockets: list[socket.socket] = []
        for index in range(connections):
            sock = socket.create_connection(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            frame = idle_fetch_frame(index)
            roundtrip(sock, frame)
            sock.setblocking(False)
            self.sockets.append(sock)
            self.selector.register(sock, selectors.EVENT_READ, (frame, bytearray()))

    def run(self, count: int) -> int:
        """Send ``count`` fetches, at most one in flight per connection, and read every answer."""
        sent = 0
        for sock in self.sockets:
            if sent < count:
                sock.send(self.selector.get_key(sock).data[0])
                sent += 1
        answers = 0
        while answers < count:
            for key, _ in self.selector.select(10.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                frame, buffer = key.data
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("the broker closed a connection")
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + _SIZE.unpack_from(buffer)[0]:
                    del buffer[: 4 + _SIZE.unpack_from(buffer)[0]]
                    answers += 1
                    if sent < count:
                        sock.send(frame)
                        sent += 1
        return answers

    def close(self) -> None:
        self.selector.close()
        for sock in self.sockets:
            sock.close()


def produces(sock: socket.socket, count: int) -> int:
    frame = produce_frame()
    for _ in range(count):
        roundtrip(sock, frame)
    return count


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, stdout=subprocess.DEVNULL, timeout=300)


def total_instructions(out: Path, pid: int, before: set[Path]) -> int:
    """The instruction total of the newest dump of ``pid`` (written since ``before``)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dumps = sorted(set(out.glob(f"callgrind.out.{pid}*")) - before, key=lambda p: p.stat().st_mtime)
        for dump in reversed(dumps):
            for line in dump.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        time.sleep(0.5)
    raise RuntimeError("no callgrind dump")


def measure(out: Path, pid: int, run: Callable[[], int]) -> tuple[int, int, float]:
    """(instructions, requests, seconds) of ``run``."""
    control("-z", str(pid))
    before = set(out.glob(f"callgrind.out.{pid}*"))
    started = time.monotonic()
    requests = run()
    elapsed = time.monotonic() - started
    control("-d", str(pid))
    return total_instructions(out, pid, before), requests, elapsed


def idle(seconds: float) -> int:
    time.sleep(seconds)
    return 0


def report(name: str, figures: tuple[int, int, float], idle_per_s: float) -> None:
    instructions, requests, elapsed = figures
    less_idle = (instructions - idle_per_s * elapsed) / requests
    print(
        f"{name}: {instructions / requests:,.0f} instructions/request, {less_idle:,.0f} less the idle rate "
        f"({requests:,} requests in {elapsed:.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetches", type=int, default=3000)
    parser.add_argument("--produces", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="the idle phase (its rate is subtracted)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="request-cost-callgrind-"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONHASHSEED"] = "0"  # the broker's dicts and sets laid out alike from run to run
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/callgrind.out.%p"]
    with Broker(
        {"num.partitions": 1}, command_prefix=prefix, startup_timeout=900, stop_timeout=300
    ) as broker:
        create_topic(broker.bootstrap_servers, TOPIC, 1)
        create_topic(broker.bootstrap_servers, IDLE_TOPIC, args.connections)
        assert broker.pid is not None
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        address = (host, int(port))
        fetchers = Fetchers(address, args.connections)
        producer = socket.create_connection(address)
        producer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            fetchers.run(args.connections * 10)  # warm-up
            produces(producer, 200)
            instructions, _, elapsed = measure(out, broker.pid, lambda: idle(args.idle_seconds))
            idle_per_s = instructions / elapsed
            print(f"idle: {idle_per_s:,.0f} instructions/s")
            report(
                f"empty fetch, {args.connections} connections",
                measure(out, broker.pid, lambda: fetchers.run(args.fetches)),
                idle_per_s,
            )
            report(
                "tiny produce",
                measure(out, broker.pid, lambda: produces(producer, args.produces)),
                idle_per_s,
            )
        finally:
            fetchers.close()
            producer.close()


if __name__ == "__main__":
    main()
