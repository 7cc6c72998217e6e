"""``tidelog users add|delete|list``: SCRAM users, as ``kafka-configs.sh --entity-type users`` and
``kafka-storage.sh format --add-scram`` manage them.

Invariants:

- A password never comes from the command line (it would show in ``ps``): a prompt asked twice, or one
  line on stdin with ``--password-stdin``.
- Against a running broker, ``add`` sends AlterUserScramCredentials through confluent-kafka, which salts
  and hashes the password client-side (the broker never sees it); ``--command-config`` / ``-X`` carry the
  CLI's own login.
- ``--data-dir DIR`` (single node, broker stopped) and ``--zookeeper HOST:PORT`` (cluster) write the
  credential without a broker, for the first admin user; both store the same salted keys in Kafka's
  format (``SCRAM-SHA-512=salt=...,stored_key=...,server_key=...,iterations=...``).
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from pathlib import Path

import click

from tidelog.cli._common import ClientOptions, client_options, fail, out_console, table, wait_result

__all__ = ["users_group"]

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@click.group("users")
def users_group() -> None:
    """Manage SCRAM users (credentials for SASL/SCRAM and SASL/PLAIN logins)."""


def _read_password(password_stdin: bool) -> str:
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != password:
            fail("the passwords differ")
    if not password:
        fail("the password is empty")
    return password


@users_group.command("add")
@click.argument("name")
@click.option(
    "--mechanism",
    type=click.Choice(_MECHANISMS),
    multiple=True,
    help="SCRAM mechanism(s) to set (repeatable; default both). PLAIN logins are checked against these.",
)
@click.option(
    "--iterations",
    type=click.IntRange(4096, 16384),
    default=8192,
    show_default=True,
    help="PBKDF2 iterations.",
)
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write to a stopped single-node broker's first log dir instead of over the network.",
)
@click.option("--zookeeper", metavar="HOST:PORT[/chroot]", help="Write to the cluster's ZooKeeper directly.")
@client_options
def add_command(
    client: ClientOptions,
    name: str,
    mechanism: tuple[str, ...],
    iterations: int,
    password_stdin: bool,
    data_dir: Path | None,
    zookeeper: str | None,
) -> None:
    """Create user NAME or change its password."""
    mechanisms = mechanism or _MECHANISMS
    password = _read_password(password_stdin)
    if data_dir is not None or zookeeper is not None:
        from tidelog.protocol.scram import SCRAM_MECHANISMS, ScramCredential

        credentials = {
            m: ScramCredential.from_password(SCRAM_MECHANISMS[m], password, iterations=iterations).to_config()
            for m in mechanisms
        }
        _offline_alter(name, credentials, (), data_dir, zookeeper)
    else:
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialAlteration,
            UserScramCredentialUpsertion,
        )

        upsertions: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(
                name, ScramCredentialInfo(ScramMechanism[m.replace("-", "_")], iterations), password.encode()
            )
            for m in mechanisms
        ]
        admin = client.admin()
        futures = admin.alter_user_scram_credentials(upsertions, request_timeout=client.timeout)
        for future in futures.values():
            wait_result(client, future, f"cannot set the credentials of user {name}")
    out_console.print(f"user {name}: {', '.join(mechanisms)} set ({iterations} iterations)")


@users_group.command("delete")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(_MECHANISMS), multiple=True, help="Only these (default: all).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), help="As for add.")
@click.option("--zookeeper", metavar="HOST:PORT[/chroot]", help="As for add.")
@client_options
def delete_command(
    client: ClientOptions, name: str, mechanism: tuple[str, ...], data_dir: Path | None, zookeeper: str | None
) -> None:
    """Delete user NAME's SCRAM credentials."""
    if data_dir is not None or zookeeper is not None:
        _offline_alter(name, {}, mechanism or _MECHANISMS, data_dir, zookeeper)
        out_console.print(f"user {name}: deleted")
        return
    from confluent_kafka.admin import (
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialDeletion,
    )

    admin = client.admin()
    if mechanism:
        existing = list(mechanism)
    else:
        by_user = admin.describe_user_scram_credentials([name], request_timeout=client.timeout)
        assert isinstance(by_user, dict)  # a dict of futures when users are named
        described = wait_result(client, by_user[name], f"cannot delete user {name}")
        existing = [info.mechanism.name.replace("_", "-") for info in described.scram_credential_infos]
    deletions: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(name, ScramMechanism[m.replace("-", "_")]) for m in existing
    ]
    futures = admin.alter_user_scram_credentials(deletions, request_timeout=client.timeout)
    for future in futures.values():
        wait_result(client, future, f"cannot delete user {name}")
    out_console.print(f"user {name}: deleted {', '.join(existing)}")


@users_group.command("list")
@click.argument("names", nargs=-1)
@client_options
def list_command(client: ClientOptions, names: tuple[str, ...]) -> None:
    """List SCRAM users (all, or NAMES) with their mechanisms and iterations; never salts or keys."""
    admin = client.admin()
    if names:
        futures = admin.describe_user_scram_credentials(list(names), request_timeout=client.timeout)
        assert isinstance(futures, dict)  # a dict of futures when users are named
        described = {
            user: wait_result(client, f, f"cannot describe user {user}") for user, f in futures.items()
        }
    else:
        future = admin.describe_user_scram_credentials(request_timeout=client.timeout)
        assert not isinstance(future, dict)  # one future of every user when none is named
        described = wait_result(client, future, "cannot list users")
    rows = table("user", "mechanism", "iterations", title="SCRAM users")
    for user in sorted(described):
        for info in described[user].scram_credential_infos:
            rows.add_row(user, info.mechanism.name.replace("_", "-"), str(info.iterations))
    out_console.print(rows)


def _offline_alter(
    name: str, set_: dict[str, str], delete: tuple[str, ...], data_dir: Path | None, zookeeper: str | None
) -> None:
    from tidelog.server.entity_configs import EntityConfigsError, FileEntityConfigs, entity_path

    if data_dir is not None and zookeeper is not None:
        fail("give --data-dir or --zookeeper, not both")
    path = entity_path(user=name)
    if data_dir is not None:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)  # a first admin before the broker ever ran
            FileEntityConfigs(data_dir).alter_now(path, set_, delete)
        except (EntityConfigsError, OSError) as exc:
            fail(str(exc))
        return
    assert zookeeper is not None
    asyncio.run(_zk_alter(zookeeper, path, set_, delete))


async def _zk_alter(connect: str, path: str, set_: dict[str, str], delete: tuple[str, ...]) -> None:
    from tidelog.server.entity_configs import ZkEntityConfigs
    from tidelog.server.zk.client import KafkaZkClient

    try:
        zk = await asyncio.wait_for(KafkaZkClient.connect(connect), timeout=30)
    except (OSError, TimeoutError) as exc:
        fail(f"cannot reach ZooKeeper at {connect}: {exc}")
    try:
        await zk.create_top_level_paths()
        await ZkEntityConfigs(zk).alter(path, set_, delete)
    finally:
        await zk.close()
