"""``tidelog leader-election``: the job of ``kafka-leader-election.sh`` (KIP-460), with its option names, over
AdminClient's ElectLeaders.

Invariants:

- Exactly one way to name partitions: ``--topic`` (with ``--partition``, else every partition of the topic),
  ``--all-topic-partitions``, or ``--path-to-json-file`` (Kafka's ``{"partitions": [{"topic": ..,
  "partition": ..}]}``); anything else is a usage error (exit 2) and nothing is sent.
- ``--election-type`` is PREFERRED or UNCLEAN (case-insensitive). UNCLEAN may elect a replica outside the
  ISR and lose acknowledged records: it is only ever done when asked for here.
- The output groups partitions as Kafka's tool does: elected, already led by the right replica, failed
  (each with the broker's reason). Any failure other than "election not needed" is exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tidelog.cli._common import ClientOptions, client_options, fail, kafka_error_text, out_console

if TYPE_CHECKING:
    from confluent_kafka import TopicPartition

__all__ = ["leader_election_command"]


@click.command("leader-election")
@click.option(
    "--election-type",
    required=True,
    type=click.Choice(["PREFERRED", "UNCLEAN"], case_sensitive=False),
    help="PREFERRED: move leadership to each partition's first replica. UNCLEAN: elect a live replica "
    "outside the ISR where no ISR member is alive (may lose acknowledged records).",
)
@click.option("--topic", help="Topic whose partitions to elect (with --partition: only that one).")
@click.option("--partition", type=click.IntRange(min=0), help="Partition of --topic.")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of the cluster.")
@click.option(
    "--path-to-json-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='Kafka\'s JSON: {"partitions": [{"topic": "t", "partition": 0}, ...]}.',
)
@client_options
def leader_election_command(
    client: ClientOptions,
    election_type: str,
    topic: str | None,
    partition: int | None,
    all_topic_partitions: bool,
    path_to_json_file: Path | None,
) -> None:
    """Elect partition leaders (kafka-leader-election.sh)."""
    from confluent_kafka import ElectionType, KafkaException

    chosen = [bool(topic), all_topic_partitions, path_to_json_file is not None]
    if sum(chosen) != 1:
        raise click.UsageError(
            "name the partitions with exactly one of --topic, --all-topic-partitions, --path-to-json-file"
        )
    if partition is not None and not topic:
        raise click.UsageError("--partition needs --topic")
    kind = election_type.upper()
    admin = client.admin()
    partitions: list[TopicPartition] | None
    if path_to_json_file is not None:
        partitions = _from_json(path_to_json_file)
    elif topic:
        partitions = _of_topic(client, admin, topic, partition)
    else:
        partitions = None
    # confluent-kafka 2.16.1's elect_leaders breaks on any timeout keyword (TypeError / SystemError in its
    # C argument parsing): the admin client's own defaults (socket.timeout.ms) apply
    future = admin.elect_leaders(ElectionType[kind], partitions)
    try:
        results = future.result(timeout=client.timeout + 5)
    except KafkaException as exc:
        fail(f"leader election ({kind}) failed: {kafka_error_text(exc)}")
    except TimeoutError:
        client.unreachable("request timed out")
    elected, not_needed, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if error is None:
            elected.append(name)
        elif "ELECTION_NOT_NEEDED" in _error_name(error):
            not_needed.append(name)
        else:
            failed.append(f"{name}: {kafka_error_text(error)}")
    console = out_console
    if elected:
        console.print(f"Successfully completed leader election ({kind}) for partitions {', '.join(elected)}")
    if not_needed:
        console.print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    if not results:
        console.print("No partitions needed a leader election")
    if failed:
        fail(f"Error completing leader election ({kind}) for partitions: " + "; ".join(failed))


def _error_name(error: object) -> str:
    inner = error.args[0] if isinstance(error, Exception) and error.args else error
    name = getattr(inner, "name", None)
    return str(name()) if callable(name) else str(inner)


def _from_json(path: Path) -> list[TopicPartition]:
    from confluent_kafka import TopicPartition

    try:
        document = json.loads(path.read_text())
        entries = document["partitions"]
        partitions = [TopicPartition(str(e["topic"]), int(e["partition"])) for e in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise click.UsageError(
            f'--path-to-json-file {path}: expected {{"partitions": [{{"topic": ..., "partition": ...}}]}} ({exc})'
        ) from None
    if not partitions:
        raise click.UsageError(f"--path-to-json-file {path}: no partitions listed")
    return partitions


def _of_topic(
    client: ClientOptions, admin: object, topic: str, partition: int | None
) -> list[TopicPartition]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    assert isinstance(admin, AdminClient)
    if partition is not None:
        return [TopicPartition(topic, partition)]
    metadata = client.cluster_metadata(admin, topic)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        fail(f"topic {topic!r} does not exist")
    return [TopicPartition(topic, p) for p in sorted(described.partitions)]
