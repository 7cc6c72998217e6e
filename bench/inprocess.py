"""What the in-process benches share (produce_handler_bench, fetch_handler_bench, fanout_wake_bench): a
broker built on a fresh data directory with one topic, no sockets, torn down afterwards, and the process's
CPU time (what they measure)."""

from __future__ import annotations

import resource
import shutil
import tempfile
from pathlib import Path

from tidelog.server.broker import Broker
from tidelog.server.clock import Clock
from tidelog.server.config import load_broker_config


def cpu() -> float:
    """This process's CPU seconds, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def start_broker(topic: str, partitions: int, *, prefix: str, clock: Clock | None = None) -> Broker:
    """A broker on a new temporary data directory holding ``topic`` with ``partitions`` partitions."""
    data = Path(tempfile.mkdtemp(prefix=prefix))
    config, _warnings = load_broker_config(None, {"log.dirs": str(data)})
    broker = Broker(config) if clock is None else Broker(config, clock=clock)
    broker.admin.create_topic_now(topic, partitions, 1, {})
    return broker


def stop_broker(broker: Broker) -> None:
    """Shut the broker's replicas and logs down and remove its data directory."""
    broker.replicas.shutdown()
    broker.logs.shutdown(broker.clock.now_ms())
    for log_dir in broker.config.log_dirs:
        shutil.rmtree(log_dir, ignore_errors=True)
