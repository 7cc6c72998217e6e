"""The Security pages: SCRAM users (list, add, delete) and ACLs (filter, create, delete).

Invariants: reads are plain GETs; adding a user is a POST of a form whose password field is of type
password (never in a URL, never rendered back), through :func:`~tidelog.console.web.check_write`; deleting
a user and creating or deleting an ACL go through a confirmation page (a GET that changes nothing) and a
POST from it; after a change the browser is redirected (303). A cluster without an authorizer shows the
ACL page with SECURITY_DISABLED and an empty list instead of an error page.
"""

from __future__ import annotations

import urllib.parse

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tidelog.console.kafka import BadRequestError
from tidelog.console.security import (
    MECHANISMS,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    AclFilter,
    AclView,
    SecurityAdmin,
    SecurityDisabledError,
    acl_binding,
)
from tidelog.console.web import check_write, page, state

__all__ = [
    "acls",
    "add_user",
    "confirm_create_acl",
    "confirm_delete_acl",
    "confirm_delete_user",
    "create_acl",
    "delete_acl",
    "delete_user",
    "users",
]

_ACL_FIELDS = ("principal", "host", "resource_type", "name", "pattern_type", "operation", "permission")


def _admin(request: Request) -> SecurityAdmin:
    gateway = state(request).gateway
    return SecurityAdmin(gateway.admin, gateway.timeout, gateway.settings)


def users(request: Request) -> Response:
    return page(
        request,
        "users.html",
        users=_admin(request).users(),
        mechanisms=list(MECHANISMS),
        done=request.query_params.get("done", ""),
    )


async def add_user(request: Request) -> Response:
    form = await check_write(request)
    user = str(form.get("user", "")).strip()
    mechanism = str(form.get("mechanism", ""))
    try:
        iterations = int(str(form.get("iterations", "8192")))
    except ValueError as exc:
        raise BadRequestError("iterations must be a whole number") from exc
    password = str(form.get("password", ""))
    await run_in_threadpool(_admin(request).upsert_user, user, mechanism, password, iterations)
    return RedirectResponse(
        "/users?done=" + urllib.parse.quote(f"{mechanism} set for {user}"), status_code=303
    )


def confirm_delete_user(request: Request) -> Response:
    user = request.path_params["user"]
    found = {u.user: u for u in _admin(request).users()}.get(user)
    if found is None:
        raise BadRequestError(f"{user!r} has no SCRAM credentials")
    return page(
        request,
        "confirm.html",
        title=f"Delete user {user}?",
        lines=[
            "Its SCRAM credentials are deleted: " + ", ".join(m for m, _ in found.mechanisms) + ".",
            "Its open connections stay; it cannot log in again. ACLs naming it are not removed.",
        ],
        action=f"/users/{urllib.parse.quote(user, safe='')}/delete",
        fields={},
        button="Delete user",
        danger=True,
        back="/users",
    )


async def delete_user(request: Request) -> Response:
    await check_write(request)
    user = request.path_params["user"]
    await run_in_threadpool(_admin(request).delete_user, user)
    return RedirectResponse("/users?done=" + urllib.parse.quote(f"{user} deleted"), status_code=303)


def _acl_filter(values: dict[str, str]) -> AclFilter:
    where = AclFilter(
        principal=values.get("principal", "").strip(),
        resource_type=values.get("resource_type", "").strip(),
        name=values.get("name", "").strip(),
        pattern_type=values.get("pattern_type", "").strip(),
    )
    if where.resource_type and where.resource_type not in RESOURCE_TYPES:
        raise BadRequestError(f"{where.resource_type!r} is not a resource type")
    if where.pattern_type and where.pattern_type not in PATTERN_TYPES:
        raise BadRequestError(f"{where.pattern_type!r} is not a pattern type")
    return where


def _acl(values: dict[str, str]) -> AclView:
    return AclView(**{field: values.get(field, "").strip() for field in _ACL_FIELDS})


def _acl_line(acl: AclView) -> str:
    return (
        f"{acl.permission} {acl.principal} from host {acl.host or '*'} to {acl.operation} "
        f"{acl.resource_type} {acl.name!r} ({acl.pattern_type})"
    )


def acls(request: Request) -> Response:
    where = _acl_filter(dict(request.query_params))
    disabled = ""
    rows: list[AclView] = []
    try:
        rows = _admin(request).acls(where)
    except SecurityDisabledError as exc:
        disabled = str(exc)
    return page(
        request,
        "acls.html",
        acls=rows,
        where=where,
        disabled=disabled,
        resource_types=list(RESOURCE_TYPES),
        pattern_types=list(PATTERN_TYPES),
        operations=list(OPERATIONS),
        permissions=list(PERMISSIONS),
        query=lambda acl: urllib.parse.urlencode({f: getattr(acl, f) for f in _ACL_FIELDS}),
        done=request.query_params.get("done", ""),
    )


def _confirm_acl(request: Request, *, delete: bool) -> Response:
    acl = _acl(dict(request.query_params))
    acl_binding(acl)  # checks the fields before anything is asked
    verb = "Delete" if delete else "Create"
    return page(
        request,
        "confirm.html",
        title=f"{verb} this ACL?",
        lines=[_acl_line(acl)],
        action="/acls/delete" if delete else "/acls/new",
        fields={field: getattr(acl, field) for field in _ACL_FIELDS},
        button=f"{verb} ACL",
        danger=delete,
        back="/acls",
    )


def confirm_create_acl(request: Request) -> Response:
    return _confirm_acl(request, delete=False)


def confirm_delete_acl(request: Request) -> Response:
    return _confirm_acl(request, delete=True)


async def create_acl(request: Request) -> Response:
    form = await check_write(request)
    acl = _acl({k: str(v) for k, v in form.items()})
    await run_in_threadpool(_admin(request).create_acl, acl)
    return RedirectResponse("/acls?done=created", status_code=303)


async def delete_acl(request: Request) -> Response:
    form = await check_write(request)
    acl = _acl({k: str(v) for k, v in form.items()})
    deleted = await run_in_threadpool(_admin(request).delete_acl, acl)
    return RedirectResponse(f"/acls?done=deleted+{deleted}", status_code=303)
