"""``tidelog configs --group G [--describe] | --alter --add-config k=v[,k=v] --delete-config k[,k]``: group
configs (Kafka 4's ``kafka-configs.sh --entity-type groups``), through confluent-kafka's GROUP resources.

Invariants: describe shows the group's overrides (source ``GROUP_CONFIG``), or every group config with
``--all``; alter sends one IncrementalAlterConfigs (SET for each ``--add-config`` pair, DELETE for each
``--delete-config`` key), so the broker validates the group's whole result at once and stores all or
nothing. A refusal is printed with the broker's message (it names the key) and exits 1.
"""

from __future__ import annotations

import json

import click

from tidelog.cli._common import (
    ClientOptions,
    alter_configs,
    config_source,
    fail,
    out_console,
    wait_result,
)
from tidelog.cli._common import table as make_table

__all__ = ["run_group_configs_command"]


def _items(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def run_group_configs_command(
    client: ClientOptions,
    group: str,
    *,
    alter: bool,
    add_config: str | None,
    delete_config: str | None,
    show_all: bool,
    fmt: str,
) -> None:
    if not group:
        raise click.UsageError("--group needs a group id")
    if alter:
        _alter(client, group, add_config, delete_config)
        return
    if add_config or delete_config:
        raise click.UsageError("--add-config and --delete-config go with --alter")
    _describe(client, group, show_all=show_all, fmt=fmt)


def _alter(client: ClientOptions, group: str, add_config: str | None, delete_config: str | None) -> None:
    sets: dict[str, str] = {}
    for item in _items(add_config):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--add-config expects KEY=VALUE[,KEY=VALUE...], got {item!r}")
        sets[key.strip()] = value.strip()
    deletes = tuple(_items(delete_config))
    if not sets and not deletes:
        raise click.UsageError("nothing to alter: give --add-config and/or --delete-config")
    alter_configs(client, client.admin(), "group", group, sets, deletes)


def _describe(client: ClientOptions, group: str, *, show_all: bool, fmt: str) -> None:
    from tidelog.cli._kafka import ConfigResource, ResourceType

    admin = client.admin()
    resource = ConfigResource(ResourceType.GROUP, group)
    futures = admin.describe_configs([resource], request_timeout=client.timeout)
    entries = wait_result(client, futures[resource], f"cannot describe configs of group {group!r}")
    rows = [
        {"name": name, "value": entry.value, "source": config_source(entry).name}
        for name, entry in sorted(entries.items())
        if show_all or config_source(entry).name == "GROUP_CONFIG"
    ]
    if fmt == "json":
        out_console.print_json(json.dumps({"resource": "group", "name": group, "configs": rows}))
        return
    what = "all configs" if show_all else "overrides"
    table = make_table("Name", "Value", "Source", title=f"group {group}: {what}")
    for row in rows:
        table.add_row(row["name"], str(row["value"]), row["source"])
    if not rows:
        out_console.print(f"group {group} has no config overrides (--all shows the defaults)")
        return
    out_console.print(table)


def check_group_options(group: str | None, others: bool) -> None:
    """``--group`` names the resource alone (no quota entity beside it)."""
    if group is not None and others:
        fail("--group cannot be combined with a client quota entity")
