"""The transactions page: open transactions of every broker, those open longer than a threshold marked hanging.

Invariants: reads only (ListTransactions, DescribeTransactions); "hanging" is a display rule -- open longer
than ``hanging_after`` seconds (a query parameter, default the console's ``--hanging-after``); aborting
one is left to ``tidelog transactions abort``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from tidelog.console.kafka import BadRequestError
from tidelog.console.transactions import now_ms, open_transactions
from tidelog.console.web import page, state

__all__ = ["transactions"]


def transactions(request: Request) -> Response:
    console = state(request)
    raw = request.query_params.get("hanging_after", "").strip()
    try:
        hanging_after_s = float(raw) if raw else console.hanging_after_s
    except ValueError as exc:
        raise BadRequestError(f"hanging_after must be seconds, not {raw!r}") from exc
    cluster = console.gateway.cluster(with_offsets=False)
    found = open_transactions(
        [(b.node_id, b.host, b.port) for b in cluster.brokers],
        console.gateway.settings,
        console.gateway.timeout,
    )
    now = now_ms()
    rows = []
    for t in found:
        duration = t.duration_ms(now)
        rows.append(
            {
                "t": t,
                "duration_s": None if duration is None else duration / 1000,
                "hanging": duration is not None and duration > hanging_after_s * 1000,
            }
        )
    return page(
        request,
        "transactions.html",
        rows=rows,
        hanging_after_s=hanging_after_s,
        hanging=sum(1 for r in rows if r["hanging"]),
    )
