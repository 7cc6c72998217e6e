"""What every console page shares: the templates, the console's state, the write guard, CSRF tokens, headers.

Invariants: Jinja2 autoescapes everything it renders (message contents are untrusted); every response
carries a Content-Security-Policy that allows scripts only from the console's own /static (no inline
script can run, whatever a record holds); a request that changes anything is a POST that passes
:func:`check_write` -- refused with 403 unless the console runs with ``--allow-writes``, and refused unless
its form carries the session's CSRF token (double-submit: the token is also in a SameSite=Strict cookie).
"""

from __future__ import annotations

import hmac
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from starlette.datastructures import FormData
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.templating import Jinja2Templates

from tidelog import __version__
from tidelog.console.kafka import KafkaGateway
from tidelog.console.sampler import Sampler

__all__ = [
    "CSRF_COOKIE",
    "ConsoleState",
    "SecurityHeaders",
    "WriteRefused",
    "check_write",
    "page",
    "state",
    "templates",
]

CSRF_COOKIE = "tidelog_console_csrf"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@dataclass
class ConsoleState:
    gateway: KafkaGateway
    sampler: Sampler
    allow_writes: bool
    metrics_urls: list[str]
    hanging_after_s: float = 900.0  # a transaction open longer is shown as hanging


def _format_ts(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _environment() -> jinja2.Environment:
    folder = resources.files("tidelog.console") / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        autoescape=True,  # every template, whatever its name: nothing is rendered unescaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ts"] = _format_ts
    env.filters["bytes"] = _format_bytes
    env.filters["q"] = lambda value: urllib.parse.quote(str(value), safe="")
    env.filters["num"] = lambda value: f"{value:,}" if isinstance(value, int) else value
    return env


templates = Jinja2Templates(env=_environment())


def state(request: Request) -> ConsoleState:
    result: ConsoleState = request.app.state.console
    return result


def csrf_token(request: Request) -> str:
    token: str = request.state.csrf_token
    return token


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    started = getattr(request.state, "started", time.monotonic())
    context.update(
        request=request,
        csrf_token=csrf_token(request),
        allow_writes=state(request).allow_writes,
        bootstrap=state(request).gateway.bootstrap_servers,
        version=__version__,
        render_ms=(time.monotonic() - started) * 1000,
        refresh_ms=max(500, int(state(request).sampler.interval * 1000)),
    )
    response = templates.TemplateResponse(request, template, context, status_code=status_code)
    assert isinstance(response, HTMLResponse)
    return response


class WriteRefused(Exception):  # noqa: N818 - a refusal, shown as a 403 page
    def __init__(self, title: str, detail: str) -> None:
        super().__init__(detail)
        self.title = title
        self.detail = detail


async def check_write(request: Request) -> FormData:
    """The form of a write request, after the write guard and the CSRF check (raises :class:`WriteRefused`)."""
    if not state(request).allow_writes:
        raise WriteRefused(
            "Read-only console",
            "This console was started without --allow-writes, so it changes nothing on the cluster. "
            "Restart it with `tidelog console --allow-writes` to create or delete topics, alter configs, "
            "produce messages, reset offsets or change users and ACLs.",
        )
    form = await request.form()
    sent = form.get("csrf_token")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not isinstance(sent, str) or not cookie or not hmac.compare_digest(sent, cookie):
        raise WriteRefused(
            "Form expired",
            "The form's CSRF token is missing or does not match this session; reload the page.",
        )
    return form


class SecurityHeaders(BaseHTTPMiddleware):
    """CSP and friends on every response; a CSRF token per browser session (set once, in a cookie)."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        request.state.started = time.monotonic()
        cookie = request.cookies.get(CSRF_COOKIE)
        request.state.csrf_token = cookie if cookie and len(cookie) == 43 else secrets.token_urlsafe(32)
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        # pages show live state (never cached); the packaged assets change only with the package
        static = request.url.path.startswith("/static/")
        response.headers.setdefault("Cache-Control", "public, max-age=3600" if static else "no-store")
        if cookie != request.state.csrf_token:
            response.set_cookie(CSRF_COOKIE, request.state.csrf_token, httponly=True, samesite="strict")
        return response
