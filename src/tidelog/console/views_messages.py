"""The message browser page, its JSON-lines download and the produce form.

Invariants: a browse reads a bounded page (:mod:`tidelog.console.browse`); the download is an attachment
of ASCII-only JSON lines (``application/x-ndjson``), never HTML; record contents reach the page only
through the autoescaping templates.
"""

from __future__ import annotations

from collections.abc import Iterator

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse

from tidelog.console.browse import (
    MAX_LIMIT,
    BrowseQuery,
    Format,
    browse,
    parse_timestamp_ms,
    record_json,
    render,
)
from tidelog.console.kafka import BadRequestError
from tidelog.console.web import check_write, page, state

__all__ = ["download", "messages", "produce", "query_from"]


def _int(params: QueryParams, name: str, default: int) -> int:
    raw = params.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise BadRequestError(f"{name} must be a whole number, not {raw!r}") from exc


def query_from(topic: str, params: QueryParams, default_limit: int = 50) -> BrowseQuery:
    partition_text = params.get("partition", "all")
    mode = params.get("mode", "latest")
    if mode not in ("latest", "offset", "timestamp"):
        raise BadRequestError(f"unknown mode {mode!r}")
    return BrowseQuery(
        topic=topic,
        partition=None if partition_text in ("", "all") else _int(params, "partition", 0),
        mode=mode,  # type: ignore[arg-type]  # checked above
        offset=_int(params, "offset", 0),
        timestamp_ms=parse_timestamp_ms(params.get("timestamp", "")),
        limit=max(1, min(_int(params, "limit", default_limit), MAX_LIMIT)),
        key_filter=params.get("key", ""),
        value_filter=params.get("value", ""),
        header_filter=params.get("header", ""),
    )


def messages(request: Request) -> Response:
    console = state(request)
    name = request.path_params["topic"]
    topic = console.gateway.topic(name)
    query = query_from(name, request.query_params)
    fmt: Format = "hex" if request.query_params.get("format") == "hex" else "text"
    result = browse(console.gateway, query)
    rows = []
    for record in result.records:
        key, _ = render(record.key, fmt)
        value, is_json = render(record.value, fmt)
        headers = [(k, render(v, fmt)[0]) for k, v in record.headers]
        rows.append({"record": record, "key": key, "value": value, "is_json": is_json, "headers": headers})
    params = dict(request.query_params)
    return page(
        request,
        "messages.html",
        topic=topic,
        query=query,
        fmt=fmt,
        rows=rows,
        result=result,
        params=params,
        timestamp_text=request.query_params.get("timestamp", ""),
        max_limit=MAX_LIMIT,
        produced=request.query_params.get("produced", ""),
    )


def download(request: Request) -> Response:
    console = state(request)
    name = request.path_params["topic"]
    query = query_from(name, request.query_params, default_limit=MAX_LIMIT)
    result = browse(console.gateway, query)

    def lines() -> Iterator[bytes]:
        for record in result.records:
            yield (record_json(name, record) + "\n").encode("ascii")

    return StreamingResponse(
        lines(),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'},
    )


def _headers(text: str) -> list[tuple[str, bytes]]:
    result = []
    for line in text.splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep:
                raise BadRequestError(f"header line {line!r} is not key=value")
            result.append((key.strip(), value.encode()))
    return result


async def produce(request: Request) -> Response:
    form = await check_write(request)
    console = state(request)
    name = request.path_params["topic"]
    partition_text = str(form.get("partition", "")).strip()
    key = str(form.get("key", ""))
    value = str(form.get("value", ""))
    partition, offset = await run_in_threadpool(
        console.gateway.produce,
        name,
        key.encode() if key else None,
        value.encode(),
        _headers(str(form.get("headers", ""))),
        int(partition_text) if partition_text.isdigit() else None,
    )
    return RedirectResponse(
        f"/topics/{name}/messages?mode=offset&partition={partition}&offset={offset}&produced={partition}/{offset}",
        status_code=303,
    )
