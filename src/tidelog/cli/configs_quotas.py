"""``tidelog configs --entity-type users|clients ...``: client quotas, as ``kafka-configs.sh`` manages them.

Invariants: the entity is named as ``kafka-configs.sh`` names it: ``--entity-type users|clients`` each
followed by ``--entity-name NAME`` or ``--entity-default`` (a name or default belongs to the type given
before it; a user and a client id together name a (user, client-id) entity), or the shorthands ``--user`` / ``--client`` / ``--user-defaults`` /
``--client-defaults``. ``--alter`` takes ``--add-config 'k=v,k2=v2'`` and ``--delete-config 'k,k2'`` and
sends one AlterClientQuotas; ``--describe`` sends a strict DescribeClientQuotas (an entity type without a
name matches every name of that type). The broker's refusal is printed with its message and exits 1.
"""

from __future__ import annotations

import click

from tidelog.cli._common import ClientOptions, err_console, fail, out_console

__all__ = ["ENTITY_OPTIONS", "Entity", "entity_option_order", "parse_entity", "run_quota_command"]

_TYPES = {"users": "user", "clients": "client-id"}
_SHOWN = {"user": "user-principal", "client-id": "client-id"}
_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2

Entity = list[tuple[str, str | None, bool]]
"""(wire entity type, name, is default) per entity type named on the command line."""


ENTITY_OPTIONS = ("--entity-type", "--entity-name", "--entity-default")


def entity_option_order(args: list[str]) -> list[str]:
    """The entity options in the order given (each name or default belongs to the type before it)."""
    return [a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in ENTITY_OPTIONS]


def parse_entity(
    order: list[str],
    entity_types: tuple[str, ...],
    entity_names: tuple[str, ...],
    user: str | None,
    client: str | None,
    user_defaults: bool,
    client_defaults: bool,
) -> Entity:
    """The entity the options name (see the module invariants); raises a usage error otherwise.

    ``order`` is :func:`entity_option_order` of the command line: ``--entity-type users --entity-default
    --entity-type clients --entity-name c1`` names the default user with client id c1.
    """
    entity: list[list[object]] = []
    types, names = list(entity_types), list(entity_names)
    for option in order:
        if option == "--entity-type":
            entity_type = types.pop(0)
            wire = _TYPES.get(entity_type)
            if wire is None:
                raise click.UsageError(f"--entity-type {entity_type!r}: client quotas take users or clients")
            entity.append([wire, None, False])
            continue
        if not entity or entity[-1][1] is not None or entity[-1][2]:
            raise click.UsageError(f"{option} needs an --entity-type before it")
        if option == "--entity-name":
            entity[-1][1] = names.pop(0)
        else:
            entity[-1][2] = True
    parsed: Entity = [(str(t), None if n is None else str(n), bool(d)) for t, n, d in entity]
    if user is not None or user_defaults:
        parsed.append(("user", user, user is None))
    if client is not None or client_defaults:
        parsed.append(("client-id", client, client is None))
    if not parsed:
        raise click.UsageError(
            "name an entity: --entity-type users|clients with --entity-name or --entity-default"
        )
    if len({t for t, _, _ in parsed}) != len(parsed):
        raise click.UsageError("each entity type may be named once")
    return parsed


def _split_configs(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def run_quota_command(
    client: ClientOptions,
    entity: Entity,
    *,
    alter: bool,
    describe: bool,
    add_config: str | None,
    delete_config: str | None,
) -> None:
    if alter == describe:
        raise click.UsageError("give exactly one of --alter or --describe")
    if alter:
        _alter(client, entity, add_config, delete_config)
    else:
        if add_config or delete_config:
            raise click.UsageError("--add-config and --delete-config go with --alter")
        _describe(client, entity)


def _alter(client: ClientOptions, entity: Entity, add_config: str | None, delete_config: str | None) -> None:
    from tidelog.protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse

    ops = []
    for item in _split_configs(add_config):
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.UsageError(f"--add-config expects KEY=VALUE[,KEY=VALUE...], got {item!r}")
        try:
            value = float(raw)
        except ValueError:
            raise click.UsageError(f"{key.strip()}: {raw!r} is not a number") from None
        ops.append(AlterClientQuotasRequest.OpData(key=key.strip(), value=value, remove=False))
    ops += [
        AlterClientQuotasRequest.OpData(key=k, value=0.0, remove=True) for k in _split_configs(delete_config)
    ]
    if not ops:
        raise click.UsageError("nothing to alter: give --add-config and/or --delete-config")
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[
                    AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n, _ in entity
                ],
                ops=ops,
            )
        ],
        validate_only=False,
    )
    from tidelog.cli.configs import _wire_call
    from tidelog.protocol.errors import ErrorCode

    result = _wire_call(client, request, AlterClientQuotasResponse).entries[0]
    if result.error_code:
        fail(
            f"cannot alter the quotas of {_shown(entity)}: {result.error_message or ErrorCode(result.error_code).name}"
        )
    err_console.print(f"Completed updating quota configs for {_shown(entity)}.")


def _describe(client: ClientOptions, entity: Entity) -> None:
    from tidelog.cli.configs import _wire_call
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import DescribeClientQuotasRequest, DescribeClientQuotasResponse

    components = []
    for entity_type, name, default in entity:
        match_type = _DEFAULT if default else _EXACT if name is not None else _SPECIFIED
        components.append(
            DescribeClientQuotasRequest.ComponentData(
                entity_type=entity_type, match_type=match_type, match=name
            )
        )
    request = DescribeClientQuotasRequest(components=components, strict=True)
    response = _wire_call(client, request, DescribeClientQuotasResponse)
    if response.error_code or response.entries is None:
        fail(f"cannot describe quotas: {response.error_message or ErrorCode(response.error_code).name}")
    lines = []
    for entry in response.entries:
        described: Entity = [(e.entity_type, e.entity_name, e.entity_name is None) for e in entry.entity]
        values = ", ".join(f"{v.key}={v.value}" for v in sorted(entry.values, key=lambda v: v.key))
        lines.append(f"Quota configs for {_shown(described)} are {values}")
    for line in sorted(lines):
        out_console.print(line, highlight=False, markup=False, soft_wrap=True)


def _shown(entity: Entity) -> str:
    return ", ".join(
        f"the default {_SHOWN[t]}"
        if default
        else f"{_SHOWN[t]} '{name}'"
        if name is not None
        else f"every {_SHOWN[t]}"
        for t, name, default in entity
    )
