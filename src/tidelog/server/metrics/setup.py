"""Turning a broker's metrics on: the registry, its collectors, the endpoint (``metrics.listener``).

Invariant: a broker without ``metrics.listener`` gets no :class:`BrokerMetrics` (no counting on its hot
path) and binds nothing; one with it counts from construction and serves from :meth:`Broker.start` to
:meth:`Broker.stop`. Each broker has its own registry (several brokers can share a process in tests).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from prometheus_client import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from tidelog.server.config.metrics_listener import parse_metrics_listener

from .collector import BrokerCollector, BrokerMetrics
from .endpoint import MetricsEndpoint

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.config import BrokerConfig

__all__ = ["metrics_for", "start_metrics_endpoint"]

log = logging.getLogger("tidelog.metrics")


def metrics_for(config: BrokerConfig) -> BrokerMetrics | None:
    """The counters a broker with ``config`` keeps: None when ``metrics.listener`` is unset."""
    return BrokerMetrics() if parse_metrics_listener(config.metrics_listener) is not None else None


async def start_metrics_endpoint(broker: Broker, metrics: BrokerMetrics) -> MetricsEndpoint:
    """Bind and serve ``broker``'s ``/metrics`` (the listener its config names)."""
    listener = parse_metrics_listener(broker.config.metrics_listener)
    assert listener is not None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker, metrics))
    ProcessCollector(registry=registry)
    endpoint = MetricsEndpoint(registry, listener.host, listener.port)
    try:
        await endpoint.start()
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(f"metrics.listener {listener}: cannot bind: {why}") from exc
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    log.info("metrics on http://%s:%d/metrics", host, endpoint.port)
    return endpoint
