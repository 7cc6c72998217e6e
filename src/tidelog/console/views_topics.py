"""Pages about the cluster and its topics: overview, topic list, topic detail, create / delete / alter config.

Invariants: every change is a GET that renders a confirmation page (which changes nothing) followed by a
POST from that page through :func:`~tidelog.console.web.check_write`; after a change the browser is
redirected (303) so a reload never repeats it.
"""

from __future__ import annotations

import re

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from tidelog.console.kafka import BadRequestError
from tidelog.console.web import check_write, page, state

__all__ = [
    "alter_config",
    "confirm_alter_config",
    "confirm_create_topic",
    "confirm_delete_topic",
    "create_topic",
    "delete_topic",
    "overview",
    "throughput_api",
    "topic_detail",
    "topics",
]

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def overview(request: Request) -> Response:
    console = state(request)
    cluster = console.gateway.cluster(with_offsets=False)
    groups = console.gateway.groups()
    return page(
        request,
        "overview.html",
        cluster=cluster,
        group_count=len(groups),
        source=console.sampler.source,
        metrics_urls=console.metrics_urls,
    )


def throughput_api(request: Request) -> Response:
    sampler = state(request).sampler
    points = sampler.throughput_series()
    return JSONResponse(
        {
            "source": sampler.source,
            "points": [
                {"t": p.time_ms, "messages_per_s": round(p.messages_per_s, 2), "bytes_per_s": p.bytes_per_s}
                for p in points
            ],
        }
    )


def topics(request: Request) -> Response:
    console = state(request)
    show_internal = request.query_params.get("internal") == "1"
    cluster = console.gateway.cluster()
    rows = [t for t in cluster.topics if show_internal or not t.internal]
    return page(
        request,
        "topics.html",
        topics=rows,
        rates=console.sampler.topic_rates,
        sizes=console.sampler.topic_sizes,
        show_internal=show_internal,
        brokers=len(cluster.brokers),
    )


def topic_detail(request: Request) -> Response:
    console = state(request)
    name = request.path_params["topic"]
    topic = console.gateway.topic(name)
    configs = console.gateway.topic_configs(name)
    return page(
        request,
        "topic.html",
        topic=topic,
        configs=configs,
        rate=console.sampler.topic_rates.get(name),
        size=console.sampler.topic_sizes.get(name),
    )


def _topic_form(values: dict[str, str]) -> tuple[str, int, int, dict[str, str]]:
    name = values.get("name", "").strip()
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise BadRequestError(
            f"{name!r} is not a legal topic name (letters, digits, '.', '_', '-'; at most 249)"
        )
    try:
        partitions = int(values.get("partitions", "1"))
        replication = int(values.get("replication", "1"))
    except ValueError as exc:
        raise BadRequestError("partitions and replication factor must be whole numbers") from exc
    if partitions < 1 or replication < 1:
        raise BadRequestError("partitions and replication factor must be at least 1")
    configs: dict[str, str] = {}
    for line in values.get("configs", "").splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise BadRequestError(f"config line {line!r} is not key=value")
            configs[key.strip()] = value.strip()
    return name, partitions, replication, configs


def confirm_create_topic(request: Request) -> Response:
    name, partitions, replication, configs = _topic_form(dict(request.query_params))
    return page(
        request,
        "confirm.html",
        title=f"Create topic {name}?",
        lines=[f"{partitions} partition(s), replication factor {replication}"]
        + [f"{k} = {v}" for k, v in configs.items()],
        action="/topics/new",
        fields={
            "name": name,
            "partitions": str(partitions),
            "replication": str(replication),
            "configs": "\n".join(f"{k}={v}" for k, v in configs.items()),
        },
        button="Create topic",
        danger=False,
        back="/topics",
    )


async def create_topic(request: Request) -> Response:
    form = await check_write(request)
    name, partitions, replication, configs = _topic_form({k: str(v) for k, v in form.items()})
    console = state(request)
    await run_in_threadpool(console.gateway.create_topic, name, partitions, replication, configs)
    return RedirectResponse(f"/topics/{name}?done=created", status_code=303)


def confirm_delete_topic(request: Request) -> Response:
    name = request.path_params["topic"]
    topic = state(request).gateway.topic(name)
    return page(
        request,
        "confirm.html",
        title=f"Delete topic {name}?",
        lines=[
            f"{len(topic.partitions)} partition(s) and {topic.messages:,} message(s) are deleted for good.",
            "Type the topic's name to confirm.",
        ],
        action=f"/topics/{name}/delete",
        fields={},
        typed_confirmation=name,
        button="Delete topic",
        danger=True,
        back=f"/topics/{name}",
    )


async def delete_topic(request: Request) -> Response:
    form = await check_write(request)
    name = request.path_params["topic"]
    if form.get("confirm_name") != name:
        raise BadRequestError("the typed name does not match the topic: nothing was deleted")
    await run_in_threadpool(state(request).gateway.delete_topic, name)
    return RedirectResponse("/topics?done=deleted", status_code=303)


def confirm_alter_config(request: Request) -> Response:
    name = request.path_params["topic"]
    key = request.query_params.get("key", "").strip()
    if not key:
        raise BadRequestError("name the config to change")
    reset = request.query_params.get("reset") == "1"
    value = request.query_params.get("value", "")
    current = {k: v for k, v, _, _ in state(request).gateway.topic_configs(name)}
    return page(
        request,
        "confirm.html",
        title=f"Change {key} of topic {name}?",
        lines=[
            f"current value: {current.get(key, '(not set)')}",
            "new value: (the broker's default)" if reset else f"new value: {value}",
        ],
        action=f"/topics/{name}/config",
        fields={"key": key, "value": value, "reset": "1" if reset else "0"},
        button="Change config",
        danger=False,
        back=f"/topics/{name}",
    )


async def alter_config(request: Request) -> Response:
    form = await check_write(request)
    name = request.path_params["topic"]
    key = str(form.get("key", ""))
    value = None if form.get("reset") == "1" else str(form.get("value", ""))
    await run_in_threadpool(state(request).gateway.alter_topic_config, name, key, value)
    return RedirectResponse(f"/topics/{name}?done=config", status_code=303)
