"""``tidelog acls add|remove|list``: the jobs of ``kafka-acls.sh``, with its option names, over AdminClient.

Invariants:

- ``add`` creates, for every resource named (``--topic``, ``--group``, ``--cluster``, ``--transactional-id``,
  each repeatable) and every principal, host and operation given, one ACL: ALLOW for ``--allow-principal``
  (from each ``--allow-host``, default ``*``), DENY for ``--deny-principal`` (from each ``--deny-host``).
  ``--operation`` defaults to All. ``--producer`` stands for WRITE, DESCRIBE and CREATE on the topics (WRITE
  and DESCRIBE on the transactional ids, IDEMPOTENT_WRITE on the cluster with ``--idempotent``),
  ``--consumer`` for READ and DESCRIBE on the topics and READ on the groups, as in kafka-acls.sh. An
  operation a resource type does not support is a usage error (exit 2) and nothing is created.
- ``remove`` deletes exactly the ACLs ``add`` with the same options would create; with no principal, every
  ACL of the named resources (of the pattern type). ``list`` shows the ACLs of the named resources (all
  without one), of ``--resource-pattern-type`` (default ``any`` for list, ``literal`` otherwise), of
  ``--principal`` if given.
- A refusal by the broker (no authorizer: SECURITY_DISABLED; no ALTER on the cluster) is exit 1 with the
  broker's message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tidelog.cli._common import ClientOptions, client_options, out_console, wait_result
from tidelog.cli._common import table as make_table

if TYPE_CHECKING:
    from confluent_kafka.admin import AclBinding, AclBindingFilter

__all__ = ["acls_group"]

F = TypeVar("F", bound=Callable[..., object])

CLUSTER_NAME = "kafka-cluster"

_SUPPORTED = {
    "TOPIC": {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "ALL"},
    "GROUP": {"READ", "DESCRIBE", "DELETE", "ALL"},
    "BROKER": {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE", "ALL"},
    "TRANSACTIONAL_ID": {"DESCRIBE", "WRITE", "ALL"},
}  # fmt: skip
"""Operations per resource type (confluent-kafka names the cluster resource type BROKER)."""
_OPERATIONS = sorted({op for ops in _SUPPORTED.values() for op in ops})


def _op_name(text: str) -> str:
    """``Read``, ``read``, ``IdempotentWrite``, ``idempotent-write`` -> ``READ``, ``IDEMPOTENT_WRITE``."""
    out = ""
    for i, ch in enumerate(text.replace("-", "_")):
        if ch.isupper() and i and text[i - 1].islower():
            out += "_"
        out += ch
    return out.upper()


def _parse_operations(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    parsed = tuple(_op_name(v) for v in values)
    for given, op in zip(values, parsed, strict=True):
        if op not in _OPERATIONS:
            raise click.BadParameter(f"unknown operation {given!r}; one of {', '.join(_OPERATIONS)}")
    return parsed


@click.group("acls")
def acls_group() -> None:
    """Add, remove and list ACLs (the broker needs authorizer.class.name set)."""


def _resource_options(func: F) -> F:
    for option in reversed(
        [
            click.option(
                "--topic", "topics", multiple=True, metavar="NAME", help="Topic (repeatable; * = all)."
            ),
            click.option(
                "--group", "groups", multiple=True, metavar="NAME", help="Consumer group (repeatable)."
            ),
            click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster)."),
            click.option(
                "--transactional-id",
                "transactional_ids",
                multiple=True,
                metavar="ID",
                help="Transactional id (repeatable).",
            ),
            click.option(
                "--resource-pattern-type",
                "pattern",
                type=click.Choice(["literal", "prefixed", "any", "match"], case_sensitive=False),
                default=None,
                help="How resource names match: literal (default for add/remove), prefixed; any or match to list.",
            ),
        ]
    ):
        func = option(func)
    return func


def _entry_options(func: F) -> F:
    for option in reversed(
        [
            click.option(
                "--allow-principal",
                "allow_principals",
                multiple=True,
                metavar="TYPE:NAME",
                help="Principal to allow (User:alice).",
            ),
            click.option(
                "--deny-principal",
                "deny_principals",
                multiple=True,
                metavar="TYPE:NAME",
                help="Principal to deny.",
            ),
            click.option(
                "--allow-host",
                "allow_hosts",
                multiple=True,
                metavar="IP",
                help="Host the allowed principals may come from (default *).",
            ),
            click.option(
                "--deny-host",
                "deny_hosts",
                multiple=True,
                metavar="IP",
                help="Host the denied principals are denied from (default *).",
            ),
            click.option(
                "--operation",
                "operations",
                multiple=True,
                metavar="OP",
                callback=_parse_operations,
                help=f"Operation, as kafka-acls.sh names it (Read, IdempotentWrite, ...; repeatable; default All): {', '.join(_OPERATIONS)}.",
            ),
            click.option(
                "--producer",
                is_flag=True,
                help="Convenience: WRITE, DESCRIBE, CREATE on the topics (and transactional ids).",
            ),
            click.option(
                "--consumer",
                is_flag=True,
                help="Convenience: READ, DESCRIBE on the topics, READ on the groups.",
            ),
            click.option(
                "--idempotent", is_flag=True, help="With --producer: IDEMPOTENT_WRITE on the cluster."
            ),
        ]
    ):
        func = option(func)
    return func


@dataclass(frozen=True)
class _Resource:
    kind: str  # confluent-kafka ResourceType name
    name: str


def _resources(
    topics: Iterable[str], groups: Iterable[str], cluster: bool, transactional_ids: Iterable[str]
) -> list[_Resource]:
    found = [_Resource("TOPIC", t) for t in topics]
    found += [_Resource("GROUP", g) for g in groups]
    found += [_Resource("TRANSACTIONAL_ID", t) for t in transactional_ids]
    if cluster:
        found.append(_Resource("BROKER", CLUSTER_NAME))
    return found


def _operations_for(
    resource: _Resource, operations: tuple[str, ...], producer: bool, consumer: bool, idempotent: bool
) -> list[str]:
    ops: list[str] = list(operations)
    if producer:
        ops += {"TOPIC": ["WRITE", "DESCRIBE", "CREATE"], "TRANSACTIONAL_ID": ["WRITE", "DESCRIBE"]}.get(
            resource.kind, []
        )
        if idempotent and resource.kind == "BROKER":
            ops.append("IDEMPOTENT_WRITE")
    if consumer:
        ops += {"TOPIC": ["READ", "DESCRIBE"], "GROUP": ["READ"]}.get(resource.kind, [])
    if not ops and not (producer or consumer):
        ops = ["ALL"]
    unsupported = [op for op in ops if op not in _SUPPORTED[resource.kind]]
    if unsupported:
        kind = "CLUSTER" if resource.kind == "BROKER" else resource.kind
        raise click.UsageError(
            f"ResourceType {kind} only supports operations {', '.join(sorted(_SUPPORTED[resource.kind]))}; "
            f"not {', '.join(unsupported)}"
        )
    return list(dict.fromkeys(ops))


def _bindings(
    resources: list[_Resource],
    pattern: str,
    entries: dict[str, Any],
    *,
    producer: bool,
    consumer: bool,
    idempotent: bool,
) -> list[AclBinding]:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    if producer and idempotent and not any(r.kind == "BROKER" for r in resources):
        resources = [*resources, _Resource("BROKER", CLUSTER_NAME)]
    bindings: list[AclBinding] = []
    for resource in resources:
        for op in _operations_for(resource, entries["operations"], producer, consumer, idempotent):
            for permission, principals, hosts in (
                ("ALLOW", entries["allow_principals"], entries["allow_hosts"] or ("*",)),
                ("DENY", entries["deny_principals"], entries["deny_hosts"] or ("*",)),
            ):
                bindings.extend(
                    AclBinding(
                        ResourceType[resource.kind],
                        resource.name,
                        ResourcePatternType[pattern.upper()],
                        principal,
                        host,
                        AclOperation[op],
                        AclPermissionType[permission],
                    )
                    for principal in principals
                    for host in hosts
                )
    return bindings


def _check_principals(principals: Iterable[str]) -> None:
    for principal in principals:
        if ":" not in principal:
            raise click.UsageError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")


@acls_group.command("add")
@_resource_options
@_entry_options
@client_options
def add_command(client: ClientOptions, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
                transactional_ids: tuple[str, ...], pattern: str | None, producer: bool, consumer: bool,
                idempotent: bool, **entries: Any) -> None:  # fmt: skip
    """Add ACLs."""
    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --cluster or --transactional-id")
    if not entries["allow_principals"] and not entries["deny_principals"]:
        raise click.UsageError("give --allow-principal or --deny-principal")
    _check_principals([*entries["allow_principals"], *entries["deny_principals"]])
    if (pattern or "literal").lower() not in ("literal", "prefixed"):
        raise click.UsageError("--resource-pattern-type must be literal or prefixed to add ACLs")
    bindings = _bindings(
        resources, pattern or "literal", entries, producer=producer, consumer=consumer, idempotent=idempotent
    )
    admin = client.admin()
    futures = admin.create_acls(bindings, request_timeout=client.timeout)
    for binding in bindings:
        wait_result(client, futures[binding], f"cannot add {_describe(binding)}")
    out_console.print(f"Added {len(bindings)} ACL(s).")
    _print(_rows(bindings), "table", "ACLs added")


@acls_group.command("remove")
@_resource_options
@_entry_options
@client_options
def remove_command(client: ClientOptions, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
                   transactional_ids: tuple[str, ...], pattern: str | None, producer: bool, consumer: bool,
                   idempotent: bool, **entries: Any) -> None:  # fmt: skip
    """Remove ACLs (all ACLs of the named resources when no principal is given)."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --cluster or --transactional-id")
    _check_principals([*entries["allow_principals"], *entries["deny_principals"]])
    pattern = pattern or "literal"
    filters: list[AclBindingFilter]
    if entries["allow_principals"] or entries["deny_principals"]:
        filters = [
            AclBindingFilter(
                b.restype,
                b.name,
                b.resource_pattern_type,
                b.principal,
                b.host,
                b.operation,
                b.permission_type,
            )
            for b in _bindings(
                resources, pattern, entries, producer=producer, consumer=consumer, idempotent=idempotent
            )
        ]
    else:
        filters = [
            _filter(
                ResourceType[r.kind],
                r.name,
                ResourcePatternType[pattern.upper()],
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
            for r in resources
        ]
    admin = client.admin()
    futures = admin.delete_acls(filters, request_timeout=client.timeout)
    removed: list[AclBinding] = []
    for acl_filter in filters:
        removed += wait_result(client, futures[acl_filter], "cannot remove ACLs")
    out_console.print(f"Removed {len(removed)} ACL(s).")
    if removed:
        _print(_rows(removed), "table", "ACLs removed")


@acls_group.command("list")
@_resource_options
@click.option("--principal", default=None, metavar="TYPE:NAME", help="Only ACLs of this principal.")
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@client_options
def list_command(client: ClientOptions, topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
                 transactional_ids: tuple[str, ...], pattern: str | None, principal: str | None,
                 fmt: str) -> None:  # fmt: skip
    """List ACLs."""
    from confluent_kafka.admin import (
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    kinds = _resources(topics, groups, cluster, transactional_ids) or [_Resource("ANY", "")]
    pattern_type = ResourcePatternType[(pattern or "any").upper()]
    admin = client.admin()
    found: list[AclBinding] = []
    for resource in kinds:
        acl_filter = _filter(
            ResourceType[resource.kind],
            resource.name or None,
            pattern_type,
            principal,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        found += wait_result(
            client, admin.describe_acls(acl_filter, request_timeout=client.timeout), "cannot list ACLs"
        )
    _print(_rows(found), fmt, f"{len(found)} ACL(s) on {client.bootstrap_server}")


def _describe(binding: AclBinding) -> str:
    row = _row(binding)
    return f"{row['permission']} {row['principal']} {row['operation']} on {row['resource_type']}:{row['name']} ({row['pattern_type']}) from {row['host']}"


def _name(value: object) -> str:
    return str(getattr(value, "name", value))


def _row(binding: AclBinding) -> dict[str, str]:
    kind = _name(binding.restype)
    return {
        "resource_type": "CLUSTER" if kind == "BROKER" else kind,
        "name": binding.name,
        "pattern_type": _name(binding.resource_pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": _name(binding.operation),
        "permission": _name(binding.permission_type),
    }


def _filter(*fields: Any) -> AclBindingFilter:
    """An AclBindingFilter; None fields match anything (confluent-kafka's stubs say str)."""
    from confluent_kafka.admin import AclBindingFilter

    return AclBindingFilter(*fields)


def _rows(bindings: Iterable[AclBinding]) -> list[dict[str, str]]:
    return sorted((_row(b) for b in bindings), key=lambda r: tuple(r.values()))


def _print(rows: list[dict[str, str]], fmt: str, title: str) -> None:
    if fmt == "json":
        out_console.print_json(json.dumps(rows))
        return
    table = make_table(
        "Resource", "Name", "Pattern", "Principal", "Host", "Operation", "Permission", title=title
    )
    for row in rows:
        table.add_row(*row.values())
    out_console.print(table)
