"""``python -m tidelog.testing.jepsen --seed S --cycles N``: run the checker against a fresh broker;
exit 0 with no anomalies, 1 with the report of what was found (it starts with the seed)."""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from pathlib import Path

from tidelog.testing.jepsen.faults import FAULTS
from tidelog.testing.jepsen.runner import CLIENTS, RunConfig, run


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.testing.jepsen", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault schedule (default: random)")
    parser.add_argument("--cycles", type=int, default=5, help="faults to inject (default 5)")
    parser.add_argument(
        "--faults", default=",".join(FAULTS), help=f"comma-separated, of: {', '.join(FAULTS)}"
    )
    parser.add_argument(
        "--clients", default=",".join(CLIENTS), help=f"idempotent producers, of: {', '.join(CLIENTS)}"
    )
    parser.add_argument("--no-transactions", action="store_true", help="leave out the transactional producer")
    parser.add_argument("--history", type=Path, default=None, help="write the history here (JSON lines)")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="the broker's log.dirs (default: a temp dir)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a broker config (repeatable)"
    )
    args = parser.parse_args(argv)
    for noisy in ("kafka", "aiokafka"):  # their retries during faults are expected, not news
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    broker_config = dict(item.split("=", 1) for item in args.set)
    config = RunConfig(
        seed=seed,
        cycles=args.cycles,
        faults=[f for f in args.faults.split(",") if f],
        clients=[c for c in args.clients.split(",") if c],
        transactions=not args.no_transactions,
        broker_config=broker_config,
    )
    with tempfile.TemporaryDirectory(prefix="tidelog-jepsen-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        report = run(config, data_dir=data_dir, history_path=args.history, log=_say)
    _say(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
