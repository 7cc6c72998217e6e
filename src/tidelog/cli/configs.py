"""``tidelog configs describe|alter`` for topics and brokers (the jobs of ``kafka-configs.sh``).

Invariants: exactly one of ``--topic`` / ``--broker`` names the resource; describe shows overrides only
(topic: ``DYNAMIC_TOPIC_CONFIG``; broker: anything not ``DEFAULT_CONFIG``) unless ``--all``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from tidelog.cli._common import (
    ClientOptions,
    alter_configs,
    client_options,
    config_source,
    fail,
    out_console,
    parse_key_values,
    wait_result,
)
from tidelog.cli._common import (
    table as make_table,
)


@click.group("configs")
def configs_group() -> None:
    """Describe and alter topic and broker configs."""


def _resource(client: ClientOptions, admin: Any, topic: str | None, broker: str | None) -> tuple[str, str]:
    if (topic is None) == (broker is None):
        raise click.UsageError("give exactly one of --topic NAME or --broker [ID]")
    metadata = client.cluster_metadata(admin)
    if topic is not None:
        if topic not in metadata.topics:
            fail(f"unknown topic {topic!r}")
        return "topic", topic
    assert broker is not None
    if broker == "":
        if not metadata.brokers:
            fail("the cluster reported no brokers")
        return "broker", str(min(metadata.brokers))
    if not broker.isdigit():
        raise click.UsageError(f"--broker expects a broker id, got {broker!r}")
    return "broker", broker


_RESOURCE_OPTIONS = [
    click.option("--topic", "-t", help="The topic whose configs to use."),
    click.option(
        "--broker",
        is_flag=False,
        flag_value="",
        default=None,
        metavar="[ID]",
        help="The broker whose configs to use (default: the first broker).",
    ),
]


def _resource_options(func: Any) -> Any:
    for option in reversed(_RESOURCE_OPTIONS):
        func = option(func)
    return func


@configs_group.command("describe")
@_resource_options
@click.option("--all", "show_all", is_flag=True, help="Show every config, not only the overrides.")
@click.option("--synonyms", is_flag=True, help="Show where each value comes from (synonym chain).")
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@client_options
def describe_command(
    client: ClientOptions, topic: str | None, broker: str | None, show_all: bool, synonyms: bool, fmt: str
) -> None:
    """Describe the configs of a topic or broker."""
    from tidelog.cli._kafka import ConfigResource, ConfigSource, ResourceType

    admin = client.admin()
    kind, name = _resource(client, admin, topic, broker)
    resource = ConfigResource(ResourceType.TOPIC if kind == "topic" else ResourceType.BROKER, name)
    futures = admin.describe_configs([resource], request_timeout=client.timeout)
    entries = wait_result(client, futures[resource], f"cannot describe configs of {kind} {name!r}")
    hidden = ConfigSource.DEFAULT_CONFIG if kind == "broker" else None
    rows = []
    for config_name, entry in sorted(entries.items()):
        source = config_source(entry)
        if not show_all and (
            source is hidden or (kind == "topic" and source is not ConfigSource.DYNAMIC_TOPIC_CONFIG)
        ):
            continue
        rows.append(
            {
                "name": config_name,
                "value": None if entry.is_sensitive else entry.value,
                "source": source.name,
                "read_only": bool(entry.is_read_only),
                "sensitive": bool(entry.is_sensitive),
                **(
                    {
                        "synonyms": [
                            {"name": s.name, "value": s.value, "source": config_source(s).name}
                            for s in entry.synonyms.values()
                        ]
                    }
                    if synonyms
                    else {}
                ),
            }
        )
    if fmt == "json":
        out_console.print_json(json.dumps({"resource": kind, "name": name, "configs": rows}))
        return
    what = "all configs" if show_all else "overrides"
    table = make_table(
        "Name", "Value", "Source", *(["Synonyms"] if synonyms else []), title=f"{kind} {name}: {what}"
    )
    for row in rows:
        cells = [row["name"], "(sensitive)" if row["sensitive"] else str(row["value"]), row["source"]]
        if synonyms:
            cells.append("\n".join(f"{s['source']}:{s['name']}={s['value']}" for s in row["synonyms"]))
        table.add_row(*cells)
    out_console.print(table)


@configs_group.command("alter")
@_resource_options
@click.option("--set", "-s", "sets", multiple=True, metavar="KEY=VALUE", help="Set a config (repeatable).")
@click.option(
    "--delete", "-d", "deletes", multiple=True, metavar="KEY", help="Remove an override (repeatable)."
)
@client_options
def alter_command(
    client: ClientOptions,
    topic: str | None,
    broker: str | None,
    sets: tuple[str, ...],
    deletes: tuple[str, ...],
) -> None:
    """Set or remove config overrides of a topic or broker."""
    values = parse_key_values(sets, "--set")
    if not values and not deletes:
        raise click.UsageError("nothing to alter: give --set KEY=VALUE or --delete KEY")
    admin = client.admin()
    kind, name = _resource(client, admin, topic, broker)
    alter_configs(client, admin, kind, name, values, deletes)
