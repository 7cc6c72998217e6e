"""Delayed delivery (tidelog's extension to share groups): when a record may first be acquired.

A record carrying the header ``tidelog.deliver.at`` (epoch milliseconds, ASCII decimal) is not acquired
before that time; one carrying ``tidelog.deliver.after.ms`` (milliseconds, ASCII decimal) not before its own
timestamp plus that delay. If both are present, ``tidelog.deliver.at`` wins. A header that does not parse
is ignored (the record is delivered at once). Classic consumers see the log in offset order regardless.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DELIVER_AFTER_MS", "DELIVER_AT", "deliver_at"]

DELIVER_AT = "tidelog.deliver.at"
DELIVER_AFTER_MS = "tidelog.deliver.after.ms"


def _number(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None


def deliver_at(headers: Iterable[tuple[str, bytes | None]], timestamp_ms: int) -> int | None:
    """The time a record with ``headers`` and ``timestamp_ms`` becomes deliverable, None if at once."""
    at: int | None = None
    after: int | None = None
    for key, value in headers:
        if key == DELIVER_AT:
            at = _number(value)
        elif key == DELIVER_AFTER_MS:
            after = _number(value)
    if at is not None:
        return at
    if after is not None and after > 0:
        return timestamp_ms + after
    return None
