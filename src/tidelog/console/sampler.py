"""The console's background sampler: throughput over time and, for groups someone is looking at, lag over time.

Invariants: one daemon thread samples every ``interval`` seconds and keeps at most ``history`` points per
series (memory is bounded whatever runs); throughput comes from the brokers' Prometheus endpoints when
they answer, else from the high watermarks' growth (which works against any Kafka); a group is sampled
while its page was viewed within ``watch_seconds``; a failed sample is skipped, never fatal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from tidelog.console.kafka import ConsoleError, KafkaGateway
from tidelog.console.metrics_source import MetricsSnapshot, scrape

__all__ = ["LagPoint", "RatePoint", "Sampler"]

log = logging.getLogger("tidelog.console")


@dataclass(frozen=True)
class RatePoint:
    time_ms: int
    messages_per_s: float
    bytes_per_s: float | None  # known only from the metrics endpoint


@dataclass(frozen=True)
class LagPoint:
    time_ms: int
    total: int
    partitions: dict[str, int]  # "topic/partition" -> lag


class Sampler:
    def __init__(
        self,
        gateway: KafkaGateway,
        metrics_urls: list[str],
        interval: float = 5.0,
        history: int = 720,
        watch_seconds: float = 600.0,
    ) -> None:
        self.gateway = gateway
        self.metrics_urls = metrics_urls
        self.interval = interval
        self.watch_seconds = watch_seconds
        self.throughput: deque[RatePoint] = deque(maxlen=history)
        self.topic_rates: dict[str, float] = {}
        self.topic_sizes: dict[str, float] = {}
        self.source = "offsets"  # or "metrics" once the endpoint answered
        self._history = history
        self._lag: dict[str, deque[LagPoint]] = {}
        self._watched: dict[str, float] = {}
        self._previous: tuple[float, dict[str, float], float | None] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidelog-console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 10)

    def watch(self, group_id: str) -> None:
        """Sample ``group_id`` from now on (for ``watch_seconds``); the first sample is taken at once."""
        with self._lock:
            new = group_id not in self._watched
            self._watched[group_id] = time.monotonic()
        if new:
            self._sample_group(group_id)

    def lag_series(self, group_id: str) -> list[LagPoint]:
        with self._lock:
            return list(self._lag.get(group_id, ()))

    def throughput_series(self) -> list[RatePoint]:
        with self._lock:
            return list(self.throughput)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:
                log.warning("console sample failed", exc_info=True)
            self._stop.wait(self.interval)

    def sample_once(self) -> None:
        self._sample_throughput()
        now = time.monotonic()
        with self._lock:
            for group_id, seen in list(self._watched.items()):
                if now - seen > self.watch_seconds:
                    del self._watched[group_id]
            groups = list(self._watched)
        for group_id in groups:
            self._sample_group(group_id)

    def _sample_group(self, group_id: str) -> None:
        try:
            offsets = self.gateway.group_offsets(group_id)
        except ConsoleError:
            return
        point = LagPoint(
            int(time.time() * 1000),
            sum(o.lag for o in offsets),
            {f"{o.topic}/{o.partition}": o.lag for o in offsets},
        )
        with self._lock:
            self._lag.setdefault(group_id, deque(maxlen=self._history)).append(point)

    def _counters(self) -> tuple[dict[str, float], float | None, MetricsSnapshot | None]:
        snapshot = scrape(self.metrics_urls) if self.metrics_urls else None
        if snapshot is not None:
            return snapshot.messages_in, snapshot.total_bytes_in, snapshot
        cluster = self.gateway.cluster()
        return {t.name: float(t.high_watermark_sum) for t in cluster.topics if not t.internal}, None, None

    def _sample_throughput(self) -> None:
        now = time.monotonic()
        counters, total_bytes, snapshot = self._counters()
        source = "metrics" if snapshot is not None else "offsets"
        previous = self._previous
        self._previous = (now, counters, total_bytes)
        with self._lock:
            if snapshot is not None:
                self.topic_sizes = dict(snapshot.log_size)
            if previous is None or self.source != source:
                self.source = source
                return
            elapsed = now - previous[0]
            if elapsed <= 0:
                return
            rates = {
                topic: max(0.0, (value - previous[1].get(topic, value)) / elapsed)
                for topic, value in counters.items()
            }
            self.topic_rates = rates
            bytes_rate = None
            if total_bytes is not None and previous[2] is not None:
                bytes_rate = max(0.0, (total_bytes - previous[2]) / elapsed)
            self.throughput.append(RatePoint(int(time.time() * 1000), sum(rates.values()), bytes_rate))
