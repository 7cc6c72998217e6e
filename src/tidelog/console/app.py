"""The console's Starlette application and :func:`serve`, which runs it under uvicorn.

Invariants: binds 127.0.0.1 unless told otherwise; the sampler thread runs for the application's lifetime
(started and stopped by its lifespan); a Kafka failure renders an error page (502) and a refused write a
403 page, never a traceback; static assets come from the package (vendored, nothing from a CDN).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tidelog.console import (
    views_groups,
    views_messages,
    views_security,
    views_share_groups,
    views_topics,
    views_transactions,
)
from tidelog.console.kafka import BadRequestError, ConsoleError, KafkaGateway, NotFoundError
from tidelog.console.sampler import Sampler
from tidelog.console.web import ConsoleState, SecurityHeaders, WriteRefused, page

__all__ = ["LOOPBACK_HOSTS", "build", "create_app", "serve"]


async def _console_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, BadRequestError):
        return page(request, "message.html", status_code=400, title="Cannot do that", detail=str(exc))
    if isinstance(exc, NotFoundError):
        return page(request, "message.html", status_code=404, title="Not found", detail=str(exc))
    return page(request, "message.html", status_code=502, title="Kafka said no", detail=str(exc))


async def _write_refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, WriteRefused)
    return page(request, "message.html", status_code=403, title=exc.title, detail=exc.detail)


LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


def create_app(console: ConsoleState, allowed_hosts: list[str] | None = None) -> Starlette:
    """``allowed_hosts``: the Host headers served (others get 400: a DNS-rebinding page cannot read the
    console through its own name); None serves any."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        console.sampler.start()
        try:
            yield
        finally:
            console.sampler.stop()
            console.gateway.close()

    static = StaticFiles(directory=str(resources.files("tidelog.console") / "static"))
    routes = [
        Route("/", views_topics.overview),
        Route("/api/throughput", views_topics.throughput_api),
        Route("/topics", views_topics.topics),
        Route("/topics/new", views_topics.confirm_create_topic, methods=["GET"]),
        Route("/topics/new", views_topics.create_topic, methods=["POST"]),
        Route("/topics/{topic}", views_topics.topic_detail),
        Route("/topics/{topic}/delete", views_topics.confirm_delete_topic, methods=["GET"]),
        Route("/topics/{topic}/delete", views_topics.delete_topic, methods=["POST"]),
        Route("/topics/{topic}/config", views_topics.confirm_alter_config, methods=["GET"]),
        Route("/topics/{topic}/config", views_topics.alter_config, methods=["POST"]),
        Route("/topics/{topic}/messages", views_messages.messages),
        Route("/topics/{topic}/messages.jsonl", views_messages.download),
        Route("/topics/{topic}/produce", views_messages.produce, methods=["POST"]),
        Route("/groups", views_groups.groups),
        Route("/group", views_groups.group_detail),
        Route("/group/reset", views_groups.reset_preview, methods=["GET"]),
        Route("/group/reset", views_groups.reset_execute, methods=["POST"]),
        Route("/api/group/lag", views_groups.lag_api),
        Route("/share-groups", views_share_groups.share_groups),
        Route("/share-group", views_share_groups.share_group_detail),
        Route("/transactions", views_transactions.transactions),
        Route("/users", views_security.users, methods=["GET"]),
        Route("/users", views_security.add_user, methods=["POST"]),
        Route("/users/{user}/delete", views_security.confirm_delete_user, methods=["GET"]),
        Route("/users/{user}/delete", views_security.delete_user, methods=["POST"]),
        Route("/acls", views_security.acls),
        Route("/acls/new", views_security.confirm_create_acl, methods=["GET"]),
        Route("/acls/new", views_security.create_acl, methods=["POST"]),
        Route("/acls/delete", views_security.confirm_delete_acl, methods=["GET"]),
        Route("/acls/delete", views_security.delete_acl, methods=["POST"]),
        Mount("/static", app=static, name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or ["*"]),
            Middleware(SecurityHeaders),
        ],
        exception_handlers={ConsoleError: _console_error, WriteRefused: _write_refused},
        lifespan=lifespan,
    )
    app.state.console = console
    return app


def build(
    config: Mapping[str, object],
    *,
    timeout: float = 10.0,
    allow_writes: bool = False,
    metrics_urls: list[str] | None = None,
    sample_interval: float = 5.0,
    hanging_after_s: float = 900.0,
    allowed_hosts: list[str] | None = None,
) -> Starlette:
    gateway = KafkaGateway(config, timeout=timeout)
    urls = list(metrics_urls or [])
    sampler = Sampler(gateway, urls, interval=sample_interval)
    return create_app(ConsoleState(gateway, sampler, allow_writes, urls, hanging_after_s), allowed_hosts)


def serve(
    config: Mapping[str, object],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    timeout: float = 10.0,
    allow_writes: bool = False,
    metrics_urls: list[str] | None = None,
    sample_interval: float = 5.0,
    hanging_after_s: float = 900.0,
    log_level: str = "info",
) -> None:
    """Run the console until interrupted."""
    import uvicorn

    app = build(
        config,
        timeout=timeout,
        allow_writes=allow_writes,
        metrics_urls=metrics_urls,
        sample_interval=sample_interval,
        hanging_after_s=hanging_after_s,
        # bound to loopback: only loopback names (a page on another site that rebinds its name to
        # 127.0.0.1 is refused); bound elsewhere, the operator chose who reaches it
        allowed_hosts=LOOPBACK_HOSTS if host in LOOPBACK_HOSTS else None,
    )
    # info: uvicorn's startup line names the address (the port, when 0 picked one); no access log
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, server_header=False)
