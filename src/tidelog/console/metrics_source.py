"""Reading a broker's Prometheus endpoint (``metrics.listener``) for the overview's throughput and topic sizes.

Invariants: only reads the text exposition format; a series is found by the name the Prometheus JMX
exporter gives Kafka's MBeans (``kafka_server_brokertopicmetrics_messagesin_total{topic=...}``,
``kafka_log_log_size{topic=...,partition=...}``), so a Kafka broker behind the JMX exporter serves too; an
unreachable or malformed endpoint yields None, never an exception.
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict
from dataclasses import dataclass

__all__ = ["MetricsSnapshot", "parse", "scrape"]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
LOG_SIZE = "kafka_log_log_size"


@dataclass(frozen=True)
class MetricsSnapshot:
    """Counters summed over every scraped broker: per topic, and the broker-wide totals."""

    messages_in: dict[str, float]
    bytes_in: dict[str, float]
    bytes_out: dict[str, float]
    log_size: dict[str, float]  # bytes on disk per topic (one replica's copy per broker, summed)

    @property
    def total_messages_in(self) -> float:
        return sum(self.messages_in.values())

    @property
    def total_bytes_in(self) -> float:
        return sum(self.bytes_in.values())


def parse(text: str) -> MetricsSnapshot:
    series: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    wanted = {MESSAGES_IN, BYTES_IN, BYTES_OUT, LOG_SIZE}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None or match.group(1) not in wanted:
            continue
        labels = dict(_LABEL.findall(match.group(3) or ""))
        topic = labels.get("topic")
        if not topic:
            continue  # the broker-wide series (no topic label) would count everything twice
        try:
            series[match.group(1)][topic] += float(match.group(4))
        except ValueError:
            continue
    return MetricsSnapshot(
        dict(series[MESSAGES_IN]), dict(series[BYTES_IN]), dict(series[BYTES_OUT]), dict(series[LOG_SIZE])
    )


def scrape(urls: list[str], timeout: float = 2.0) -> MetricsSnapshot | None:
    """The sum of every URL's snapshot; None when any is unreachable (rates then come from offsets)."""
    snapshots = []
    for url in urls:
        target = url.rstrip("/")
        if not target.endswith("/metrics"):
            target += "/metrics"
        if not target.startswith(("http://", "https://")):
            return None
        try:
            with urllib.request.urlopen(target, timeout=timeout) as response:  # noqa: S310 - http(s) only
                snapshots.append(parse(response.read().decode("utf-8", errors="replace")))
        except (OSError, ValueError):
            return None
    if not snapshots:
        return None
    merged: list[dict[str, float]] = [defaultdict(float) for _ in range(4)]
    for snap in snapshots:
        for index, part in enumerate((snap.messages_in, snap.bytes_in, snap.bytes_out, snap.log_size)):
            for topic, value in part.items():
                merged[index][topic] += value
    return MetricsSnapshot(*(dict(m) for m in merged))
