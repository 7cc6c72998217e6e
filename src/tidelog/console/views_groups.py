"""Consumer group pages: the list with lag, one group's members, assignment and lag over time, offset resets.

Invariants: a reset is always previewed first (a GET that computes the new offsets and changes nothing);
the POST that executes recomputes them from the same parameters and writes them with
AlterConsumerGroupOffsets (Kafka refuses while the group has members, and the page says so); the group id
travels as a query parameter (any string is a legal group id).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from tidelog.console.browse import parse_timestamp_ms
from tidelog.console.kafka import BadRequestError, ConsoleError, GroupOffsetView, KafkaGateway
from tidelog.console.web import check_write, page, state

__all__ = ["group_detail", "groups", "lag_api", "plan_reset", "reset_execute", "reset_preview"]

STRATEGIES = ("earliest", "latest", "to-offset", "shift-by", "to-datetime")


def _lag(gateway: KafkaGateway, group_id: str) -> int | None:
    try:
        return sum(o.lag for o in gateway.group_offsets(group_id))
    except ConsoleError:
        return None


def groups(request: Request) -> Response:
    gateway = state(request).gateway
    listed = gateway.groups()
    with ThreadPoolExecutor(max_workers=8) as pool:
        lags = list(pool.map(lambda g: _lag(gateway, g.group_id), listed[:100]))
    return page(request, "groups.html", groups=listed, lags=lags)


def _group_id(request: Request) -> str:
    group_id = request.query_params.get("id")
    if not group_id:
        raise BadRequestError("no group id")
    return group_id


def group_detail(request: Request) -> Response:
    console = state(request)
    group_id = _group_id(request)
    group = console.gateway.group(group_id)
    console.sampler.watch(group_id)
    topics = sorted({o.topic for o in group.offsets})
    return page(
        request, "group.html", group=group, topics=topics, strategies=STRATEGIES, plan=None, params={}
    )


def lag_api(request: Request) -> Response:
    console = state(request)
    group_id = _group_id(request)
    console.sampler.watch(group_id)
    return JSONResponse(
        {
            "group": group_id,
            "interval_s": console.sampler.interval,
            "points": [
                {"t": p.time_ms, "lag": p.total, "partitions": p.partitions}
                for p in console.sampler.lag_series(group_id)
            ],
        }
    )


def plan_reset(
    gateway: KafkaGateway, group_id: str, params: dict[str, str]
) -> list[tuple[GroupOffsetView, int]]:
    """(current, new offset) per partition in scope, as ``kafka-consumer-groups --reset-offsets`` would."""
    strategy = params.get("strategy", "")
    if strategy not in STRATEGIES:
        raise BadRequestError(f"choose a strategy: {', '.join(STRATEGIES)}")
    topic = params.get("topic", "").strip()
    current = {(o.topic, o.partition): o for o in gateway.group_offsets(group_id)}
    if topic:
        partitions = [(topic, p.partition) for p in gateway.topic(topic).partitions]
    else:
        partitions = sorted(current)
    if not partitions:
        raise BadRequestError("the group has no committed offsets: name a topic to reset")
    marks = gateway.watermarks(partitions)
    amount_text = params.get("amount", "").strip()
    amount = 0
    if strategy in ("to-offset", "shift-by"):
        try:
            amount = int(amount_text)
        except ValueError as exc:
            raise BadRequestError(f"{strategy} needs a whole number, not {amount_text!r}") from exc
    by_time: dict[tuple[str, int], int] = {}
    if strategy == "to-datetime":
        by_time = gateway.offsets_for_time(partitions, parse_timestamp_ms(params.get("datetime", "")))
    plan = []
    for pair in partitions:
        low, high = marks[pair]
        view = current.get(pair) or GroupOffsetView(pair[0], pair[1], -1, high)
        if strategy == "earliest":
            new = low
        elif strategy == "latest":
            new = high
        elif strategy == "to-offset":
            new = amount
        elif strategy == "shift-by":
            new = (view.committed if view.committed >= 0 else low) + amount
        else:
            new = by_time[pair] if by_time[pair] >= 0 else high
        plan.append((view, min(max(new, low), high)))
    return plan


def reset_preview(request: Request) -> Response:
    console = state(request)
    group_id = _group_id(request)
    params = dict(request.query_params)
    group = console.gateway.group(group_id)
    plan = plan_reset(console.gateway, group_id, params)
    topics = sorted({o.topic for o in group.offsets})
    return page(
        request, "group.html", group=group, topics=topics, strategies=STRATEGIES, plan=plan, params=params
    )


async def reset_execute(request: Request) -> Response:
    form = await check_write(request)
    console = state(request)
    group_id = str(form.get("id", ""))
    params = {k: str(v) for k, v in form.items()}
    plan = await run_in_threadpool(plan_reset, console.gateway, group_id, params)
    offsets = {(view.topic, view.partition): new for view, new in plan}
    await run_in_threadpool(console.gateway.alter_group_offsets, group_id, offsets)
    from urllib.parse import quote

    return RedirectResponse(f"/group?id={quote(group_id, safe='')}&done=reset", status_code=303)
