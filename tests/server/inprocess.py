"""An in-process broker for tests that drive handlers and coordinator runtimes directly, without sockets.

``make_broker`` builds a :class:`Broker` on a data dir (topic ``t`` with one partition, unless told
otherwise), ``stop_broker`` shuts it down; ``handle`` answers a request as the dispatcher would; ``running`` starts the group and transaction runtimes' loader and clock tasks as
``Broker.start`` does and stops them, then the logs, cleanly; ``ctx`` is a request context; ``until``
polls a condition on the event loop with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tidelog.server.broker import Broker
from tidelog.server.clock import Clock, ManualClock
from tidelog.server.config import load_broker_config
from tidelog.server.dispatch import RequestContext


def make_broker(
    data: Path, *, topic: str | None = "t", clock: Clock | None = None, **overrides: str
) -> Broker:
    config, _warnings = load_broker_config(None, {"log.dirs": str(data), **overrides})
    broker = Broker(config) if clock is None else Broker(config, clock=clock)
    if topic is not None and broker.metadata.topic(topic) is None:
        broker.admin.create_topic_now(topic, 1, 1, {})
    return broker


def stop_broker(broker: Broker) -> None:
    """Shut a broker :func:`make_broker` built down: its replicas (their purgatories), then its logs."""
    broker.replicas.shutdown()
    broker.logs.shutdown(broker.clock.now_ms())


def handle(broker: Broker, context: RequestContext, request: Any) -> Any:
    """What the broker's dispatcher answers ``request`` with (the response, or an awaitable of it)."""
    route = broker.dispatcher.route_for(context.api_key, context.api_version)
    assert route is not None, f"no route for api key {context.api_key} v{context.api_version}"
    return route.handler(context, request)


def ctx(api_key: int, version: int, client_id: str = "inprocess-test") -> RequestContext:
    return RequestContext(
        api_key=api_key,
        api_version=version,
        correlation_id=1,
        client_id=client_id,
        client_host="127.0.0.1",
        connection_id=1,
    )


@contextlib.asynccontextmanager
async def running(broker: Broker, *, transactions: bool = True) -> AsyncIterator[list[asyncio.Task[None]]]:
    """The coordinator runtimes' loader and clock tasks (the transaction runtime's too unless told not to),
    as Broker.start runs them; afterwards the runtimes, the tasks and the logs are shut down."""
    runtimes = [broker.groups, broker.transactions] if transactions else [broker.groups]
    tasks: list[asyncio.Task[None]] = []
    for runtime in runtimes:
        runtime.start()
        tasks += [asyncio.create_task(runtime.run_loader()), asyncio.create_task(runtime.run_clock())]
    try:
        yield tasks
    finally:
        for runtime in reversed(runtimes):
            runtime.shutdown()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        broker.logs.shutdown(broker.clock.now_ms())


async def until(condition: Callable[[], object], limit_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def expired(broker: Broker, parked: Any, advance_ms: int) -> Any:
    """Move ``broker``'s :class:`~tidelog.server.clock.ManualClock` ``advance_ms`` on (past ``parked``'s wait)
    and let the fetch purgatory's clock task expire it: its answer (``parked`` must still be waiting)."""
    assert isinstance(parked, asyncio.Future)
    assert not parked.done()
    clock = broker.clock
    assert isinstance(clock, ManualClock)
    clock.advance(advance_ms)
    task = asyncio.create_task(broker.fetch_purgatory.run())
    try:
        return await asyncio.wait_for(parked, 10)
    finally:
        task.cancel()
