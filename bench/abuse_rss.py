"""Broker RSS under each abuse case, in one run: the memory-bound, decompression-bomb and slow-disk tests
(tests/server/test_memory_bounds.py, test_decompression_bombs.py, test_slow_disk.py) run under pytest
with ``TIDELOG_RSS_REPORT`` set, each case noting its broker's RSS before and at its peak (or after, for
the cases that hold their load), and a table of them is printed.

    .venv/bin/python bench/abuse_rss.py [--soak]

``--soak`` adds the soak sizes (10,000 idle connections, 256 MiB to the slow disk). The slow-disk cases
need root (a loop device and the blkio cgroup) and are skipped otherwise. Each module starts its own
broker, so "before" is that broker's RSS at the start of the case, not a fresh process's. Not a test:
the tests assert the bounds; this prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = [
    "tests/server/test_memory_bounds.py",
    "tests/server/test_decompression_bombs.py",
    "tests/server/test_slow_disk.py",
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--soak", action="store_true", help="add the soak sizes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="abuse-rss-") as tmp:
        report = Path(tmp) / "rss.jsonl"
        env = {**os.environ, "TIDELOG_RSS_REPORT": str(report)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *MODULES]
        if args.soak:
            command.append("--soak")
        done = subprocess.run(command, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
        lines = report.read_text().splitlines() if report.exists() else []
    print(f"{'case':<62} {'before MiB':>10} {'peak MiB':>9} {'rose MiB':>9}  other")
    for line in lines:
        row = json.loads(line)
        case, before, after = row.pop("case"), row.pop("before_mib"), row.pop("after_mib")
        other = ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        print(f"{case:<62} {before:>10.1f} {after:>9.1f} {after - before:>9.1f}  {other}")
    print(f"\npytest: {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.returncode}")
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
        sys.exit(done.returncode)


if __name__ == "__main__":
    main()
