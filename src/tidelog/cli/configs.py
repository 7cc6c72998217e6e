"""``tidelog configs describe|alter`` for topics and brokers (the jobs of ``kafka-configs.sh``); group
configs with ``tidelog configs --group G`` (configs_groups.py), client quotas with ``--entity-type``
(configs_quotas.py).

Invariants: exactly one of ``--topic`` / ``--broker`` / ``--broker-defaults`` names the resource; describe
shows overrides only (topic: ``DYNAMIC_TOPIC_CONFIG``; broker: anything not ``DEFAULT_CONFIG``) unless
``--all``. ``--broker-defaults`` is the BROKER resource named ``""`` (the dynamic cluster-wide defaults),
which confluent-kafka cannot address: those requests go through :mod:`tidelog.client.wire`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, NotRequired, Protocol, TypedDict, TypeVar

import click

from tidelog.cli._common import (
    ClientOptions,
    alter_configs,
    client_options,
    config_source,
    err_console,
    fail,
    out_console,
    parse_key_values,
    wait_result,
)
from tidelog.cli._common import (
    table as make_table,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from tidelog.protocol.schema import Request, Response

    R = TypeVar("R", bound=Response)

F = TypeVar("F", bound=Callable[..., object])

_BROKER = 4
"""ConfigResource type BROKER on the wire."""


class _Synonym(TypedDict):
    name: str
    value: str | None
    source: str


class _ConfigRow(TypedDict):
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    synonyms: NotRequired[list[_Synonym]]  # dropped from the output without --synonyms


class _ConfigsGroup(click.Group):
    """Remembers the order of the entity options: kafka-configs.sh pairs each name or default with the
    entity type before it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from tidelog.cli.configs_quotas import entity_option_order

        ctx.meta["entity_order"] = entity_option_order(args)
        return super().parse_args(ctx, args)


@click.group("configs", cls=_ConfigsGroup, invoke_without_command=True)
@click.option(
    "--entity-type",
    "entity_types",
    multiple=True,
    metavar="users|clients",
    help="Client quotas: the entity type (repeat for a user and client id).",
)
@click.option(
    "--entity-name", "entity_names", multiple=True, metavar="NAME", help="Client quotas: the entity's name."
)
@click.option("--entity-default", count=True, help="Client quotas: the default entity of the type.")
@click.option(
    "--user", metavar="NAME", help="Client quotas: shorthand for --entity-type users --entity-name NAME."
)
@click.option(
    "--client",
    "client_id",
    metavar="ID",
    help="Client quotas: shorthand for --entity-type clients --entity-name ID.",
)
@click.option("--user-defaults", is_flag=True, help="Client quotas: the default user.")
@click.option("--client-defaults", is_flag=True, help="Client quotas: the default client id.")
@click.option("--alter", is_flag=True, help="Client quotas: alter (with --add-config / --delete-config).")
@click.option("--describe", is_flag=True, help="Client quotas: describe.")
@click.option(
    "--add-config", metavar="K=V[,K=V]", help="Client quotas to set, e.g. 'producer_byte_rate=1024'."
)
@click.option("--delete-config", metavar="K[,K]", help="Client quotas to remove.")
@click.option(
    "--group",
    metavar="GROUP",
    help="Group configs: describe the group's (default) or --alter them with --add-config / --delete-config.",
)
@click.option("--all", "show_all", is_flag=True, help="Group configs: show every config, not only overrides.")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    help="Group configs: output.",
)
@client_options
@click.pass_context
def configs_group(
    ctx: click.Context,
    client: ClientOptions,
    entity_types: tuple[str, ...],
    entity_names: tuple[str, ...],
    entity_default: int,  # noqa: ARG001 - its place among the entity options is read in parse_args
    user: str | None,
    client_id: str | None,
    user_defaults: bool,
    client_defaults: bool,
    alter: bool,
    describe: bool,
    add_config: str | None,
    delete_config: str | None,
    group: str | None,
    show_all: bool,
    fmt: str,
) -> None:
    """Describe and alter topic and broker configs, group configs (``--group G``) and client quotas as
    kafka-configs.sh does (``--entity-type users|clients|groups --entity-name NAME|--entity-default --alter
    --add-config ...``)."""
    if ctx.invoked_subcommand is not None:
        return
    if entity_types == ("groups",) and len(entity_names) == 1 and group is None:
        group, entity_types, entity_names = entity_names[0], (), ()
    if group is not None:
        from tidelog.cli.configs_groups import check_group_options, run_group_configs_command

        check_group_options(
            group,
            bool(
                entity_types or user is not None or client_id is not None or user_defaults or client_defaults
            ),
        )
        if describe and alter:
            raise click.UsageError("give at most one of --alter or --describe")
        run_group_configs_command(
            client,
            group,
            alter=alter,
            add_config=add_config,
            delete_config=delete_config,
            show_all=show_all,
            fmt=fmt,
        )
        return
    if not (entity_types or user is not None or client_id is not None or user_defaults or client_defaults):
        if alter or describe:
            raise click.UsageError(
                "name an entity: --entity-type users|clients with --entity-name or --entity-default"
            )
        click.echo(ctx.get_help())
        return
    from tidelog.cli.configs_quotas import parse_entity, run_quota_command

    entity = parse_entity(
        ctx.meta.get("entity_order", []),
        entity_types,
        entity_names,
        user,
        client_id,
        user_defaults,
        client_defaults,
    )
    run_quota_command(
        client, entity, alter=alter, describe=describe, add_config=add_config, delete_config=delete_config
    )


def _resource(
    client: ClientOptions,
    admin: AdminClient | None,
    topic: str | None,
    broker: str | None,
    broker_defaults: bool = False,
) -> tuple[str, str]:
    """(kind, name) of the resource the options name; ``admin`` is None only with ``broker_defaults``."""
    if [topic is not None, broker is not None, broker_defaults].count(True) != 1:
        raise click.UsageError("give exactly one of --topic NAME, --broker [ID] or --broker-defaults")
    if broker_defaults:
        return "broker", ""
    assert admin is not None
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
    click.option(
        "--broker-defaults",
        is_flag=True,
        help="The cluster-wide default broker configs (dynamic; a broker's own dynamic configs win).",
    ),
]


def _resource_options(func: F) -> F:
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
    client: ClientOptions,
    topic: str | None,
    broker: str | None,
    broker_defaults: bool,
    show_all: bool,
    synonyms: bool,
    fmt: str,
) -> None:
    """Describe the configs of a topic or broker, or the cluster-wide broker defaults."""
    if broker_defaults:
        kind, name = _resource(client, None, topic, broker, broker_defaults)
        described = _describe_broker_defaults(client)
    else:
        admin = client.admin()
        kind, name = _resource(client, admin, topic, broker)
        described = _describe(client, admin, kind, name)
    rows: list[_ConfigRow] = []
    for row in described:
        hidden = row["source"] == "DEFAULT_CONFIG" or (
            kind == "topic" and row["source"] != "DYNAMIC_TOPIC_CONFIG"
        )
        if not show_all and hidden:
            continue
        if not synonyms:
            del row["synonyms"]
        rows.append(row)
    if fmt == "json":
        out_console.print_json(json.dumps({"resource": kind, "name": name, "configs": rows}))
        return
    what = "all configs" if show_all else "overrides"
    title = f"broker defaults: {what}" if broker_defaults else f"{kind} {name}: {what}"
    table = make_table("Name", "Value", "Source", *(["Synonyms"] if synonyms else []), title=title)
    for row in rows:
        cells = [row["name"], "(sensitive)" if row["sensitive"] else str(row["value"]), row["source"]]
        if synonyms:
            cells.append("\n".join(f"{s['source']}:{s['name']}={s['value']}" for s in row["synonyms"]))
        table.add_row(*cells)
    out_console.print(table)


def _describe(client: ClientOptions, admin: AdminClient, kind: str, name: str) -> list[_ConfigRow]:
    """Rows (sorted by name, with synonyms) of a topic or broker, through confluent-kafka."""
    from tidelog.cli._kafka import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC if kind == "topic" else ResourceType.BROKER, name)
    futures = admin.describe_configs([resource], request_timeout=client.timeout)
    entries = wait_result(client, futures[resource], f"cannot describe configs of {kind} {name!r}")
    return [
        {
            "name": config_name,
            "value": None if entry.is_sensitive else entry.value,
            "source": config_source(entry).name,
            "read_only": bool(entry.is_read_only),
            "sensitive": bool(entry.is_sensitive),
            "synonyms": [
                {"name": s.name, "value": s.value, "source": config_source(s).name}
                for s in entry.synonyms.values()
            ],
        }
        for config_name, entry in sorted(entries.items())
    ]


def _describe_broker_defaults(client: ClientOptions) -> list[_ConfigRow]:
    """Rows of the BROKER resource ``""`` (the dynamic cluster-wide defaults), over the wire client."""
    from tidelog.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
    from tidelog.server.config import ConfigSource

    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=_BROKER, resource_name="", configuration_keys=None
    )
    request = DescribeConfigsRequest(resources=[resource], include_synonyms=True)
    result = _wire_call(client, request, DescribeConfigsResponse).results[0]
    _check(result, "cannot describe the broker defaults")
    return [
        {
            "name": entry.name,
            "value": None if entry.is_sensitive else entry.value,
            "source": ConfigSource(entry.config_source).name,
            "read_only": bool(entry.read_only),
            "sensitive": bool(entry.is_sensitive),
            "synonyms": [
                {"name": s.name, "value": s.value, "source": ConfigSource(s.source).name}
                for s in entry.synonyms
            ],
        }
        for entry in sorted(result.configs, key=lambda e: e.name)
    ]


def _alter_broker_defaults(client: ClientOptions, sets: dict[str, str], deletes: tuple[str, ...]) -> None:
    from tidelog.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

    config = IncrementalAlterConfigsRequest.AlterableConfig
    configs = [config(name=k, value=v, config_operation=0) for k, v in sets.items()]
    configs += [config(name=k, value=None, config_operation=1) for k in deletes]
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=_BROKER, resource_name="", configs=configs
    )
    request = IncrementalAlterConfigsRequest(resources=[resource])
    result = _wire_call(client, request, IncrementalAlterConfigsResponse).responses[0]
    _check(result, "cannot alter the broker defaults")
    err_console.print("Updated the broker defaults.")


def _wire_call(client: ClientOptions, request: Request, expect: type[R]) -> R:
    from tidelog.client.wire import WireError, connect

    try:
        security = client.wire_security()
        with connect(
            client.bootstrap_server, timeout=client.timeout, sasl=security.sasl, tls=security.tls
        ) as wire:
            return wire.call(request, expect=expect)
    except WireError as exc:
        fail(str(exc))


class _ResourceAnswer(Protocol):
    @property
    def error_code(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...


def _check(result: _ResourceAnswer, what: str) -> None:
    from tidelog.protocol.errors import ErrorCode

    if result.error_code:
        fail(f"{what}: {result.error_message or ErrorCode(result.error_code).name}")


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
    broker_defaults: bool,
    sets: tuple[str, ...],
    deletes: tuple[str, ...],
) -> None:
    """Set or remove config overrides of a topic or broker, or the cluster-wide broker defaults.

    Only dynamic broker configs can be altered (``configs describe --broker --all`` marks the others
    read-only); a broker's own value wins over the defaults, a topic's override over both.
    """
    values = parse_key_values(sets, "--set")
    if not values and not deletes:
        raise click.UsageError("nothing to alter: give --set KEY=VALUE or --delete KEY")
    if broker_defaults:
        _resource(client, None, topic, broker, broker_defaults)
        _alter_broker_defaults(client, values, deletes)
        return
    admin = client.admin()
    kind, name = _resource(client, admin, topic, broker)
    alter_configs(client, admin, kind, name, values, deletes)
