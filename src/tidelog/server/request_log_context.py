"""The request being served, for log records: client id, API and correlation id on every line logged
while a connection handles it (issue 14's structured logs).

Invariants: :data:`current_request` is set by the connection around a handler's synchronous part and
around the write of its response; a delayed operation's task is created while it is set, so it inherits
it (contextvars are copied into tasks). :class:`RequestLogFilter` only adds attributes; it never drops a
record. Outside a request the attributes are absent.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Final

from .dispatch import RequestContext

__all__ = ["REQUEST_FIELDS", "RequestLogFilter", "current_request"]

current_request: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "tidelog_current_request", default=None
)

REQUEST_FIELDS: Final = ("client_id", "api", "correlation_id", "api_version", "client_host", "listener")
"""The attributes :class:`RequestLogFilter` puts on a record logged while a request is served."""


class RequestLogFilter(logging.Filter):
    """Adds the current request's fields to each record (install it on a handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_request.get()
        if ctx is not None and not hasattr(record, "correlation_id"):
            from .metrics.request_metrics import api_name

            record.client_id = ctx.client_id
            record.api = api_name(ctx.api_key)
            record.api_version = ctx.api_version
            record.correlation_id = ctx.correlation_id
            record.client_host = ctx.client_host
            record.listener = ctx.listener_name
        return True
