"""The broker's log line formats (``log.format``): ``text`` (key=value) or ``json`` (one object per line).

Invariants:
- A JSON line is one object with ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger`` and
  ``message``; ``exc`` holds a traceback when there is one; a record logged while a request is served
  also carries the request's ``client_id``, ``api``, ``api_version``, ``correlation_id``, ``client_host``
  and ``listener`` (:mod:`.request_log_context`). Non-JSON values are written as strings, never dropped.
- A text line is ``<time> level=... logger=... msg=...`` followed by the same request fields as
  ``key=value`` pairs when present.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Final, TextIO

from .request_log_context import REQUEST_FIELDS, RequestLogFilter

__all__ = ["LOG_FORMATS", "JsonFormatter", "TextFormatter", "log_handler"]

LOG_FORMATS: Final = ("text", "json")


def _utc(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _utc(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in REQUEST_FIELDS:
            if hasattr(record, field):
                entry[field] = getattr(record, field)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``asctime level=... logger=... msg=...`` plus the request's fields when a request is served."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{f}={getattr(record, f)}" for f in REQUEST_FIELDS if hasattr(record, f))
        if not extra:
            return line
        head, newline, rest = line.partition("\n")  # a traceback stays below the fields
        return f"{head} {extra}{newline}{rest}"


def log_handler(stream: TextIO, fmt: str) -> logging.Handler:
    """A handler writing ``fmt`` lines to ``stream``, with the current request's fields on its records."""
    handler: logging.StreamHandler[TextIO] = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RequestLogFilter())
    return handler
