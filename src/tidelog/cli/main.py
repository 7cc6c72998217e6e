"""The ``tidelog`` console script: ``broker``, ``topics``, ``produce``, ``consume``, ``groups``,
``transactions``, ``configs``, ``pipeline``, ``zookeeper``, ``cluster``, ``doctor``, ``console``, ``users``,
``acls``, ``leader-election``, ``reassign``, ``brokers``.

Invariants: subcommands import their heavy dependencies (the broker, confluent-kafka) only when run, so
``tidelog --help`` is fast; a user error exits non-zero with a one-line message and no traceback.
"""

from __future__ import annotations

import click

from tidelog import __version__
from tidelog.cli.acls import acls_group
from tidelog.cli.broker import broker_command
from tidelog.cli.brokers import brokers_group
from tidelog.cli.cluster import cluster_group
from tidelog.cli.configs import configs_group
from tidelog.cli.console import console_command
from tidelog.cli.consume import consume_command
from tidelog.cli.doctor import doctor_command
from tidelog.cli.groups import groups_group
from tidelog.cli.leader_election import leader_election_command
from tidelog.cli.log_dirs import log_dirs_group
from tidelog.cli.pipeline import pipeline_command
from tidelog.cli.produce import produce_command
from tidelog.cli.reassign import reassign_group
from tidelog.cli.share_groups import share_groups_group
from tidelog.cli.topics import topics_group
from tidelog.cli.transactions import transactions_group
from tidelog.cli.users import users_group
from tidelog.cli.zookeeper import zookeeper_command

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", "-V", prog_name="tidelog")
def cli() -> None:
    """tidelog: a Kafka-compatible, durable, partitioned commit log.

    Every Kafka client works against it; these commands are its broker and console tools.
    """


cli.add_command(broker_command)
cli.add_command(topics_group)
cli.add_command(produce_command)
cli.add_command(consume_command)
cli.add_command(groups_group)
cli.add_command(share_groups_group)
cli.add_command(transactions_group)
cli.add_command(configs_group)
cli.add_command(acls_group)
cli.add_command(pipeline_command)
cli.add_command(zookeeper_command)
cli.add_command(cluster_group)
cli.add_command(users_group)
cli.add_command(doctor_command)
cli.add_command(console_command)
cli.add_command(leader_election_command)
cli.add_command(reassign_group)
cli.add_command(brokers_group)
cli.add_command(log_dirs_group)  # issue 15 hook: JBOD


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="tidelog")
