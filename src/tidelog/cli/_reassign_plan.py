"""The JSON files of ``tidelog reassign`` in Kafka's formats (``kafka-reassign-partitions.sh``), read and
written without any I/O beyond the file read:

- a plan: ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4],"log_dirs":["any",..]}]}``
  (``log_dirs`` optional; only ``"any"`` is accepted: moving between a broker's disks is not this tool's job);
- topics to move: ``{"version":1,"topics":[{"topic":"t"}]}``.

Invariants: a malformed file raises :class:`PlanError` naming the file and what is wrong (the command turns
it into a usage error, nothing is sent); a plan names each partition at most once, each with a non-empty
replica list; plans are written as Kafka writes them (one line, partitions in topic and partition order).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PlanError", "format_plan", "read_plan", "read_topics_to_move"]

Plan = dict[tuple[str, int], tuple[int, ...]]


class PlanError(ValueError):
    """A plan or topics file that is not in Kafka's format."""


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanError(f"{path}: cannot read it as JSON ({exc})") from None


def read_plan(path: Path) -> Plan:
    """The partitions and their replica lists of a reassignment JSON file."""
    document = _load(path)
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError(
            f'{path}: expected {{"version":1,"partitions":[{{"topic":..,"partition":..,"replicas":[..]}}]}}'
        )
    plan: Plan = {}
    for entry in entries:
        try:
            topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
        except (KeyError, TypeError):
            raise PlanError(
                f"{path}: each partition needs topic, partition and replicas: {entry!r}"
            ) from None
        if (
            not isinstance(topic, str)
            or not isinstance(partition, int)
            or not isinstance(replicas, list)
            or not all(isinstance(r, int) for r in replicas)
        ):
            raise PlanError(f"{path}: bad types in {entry!r}")
        if not replicas:
            raise PlanError(f"{path}: partition {topic}-{partition} has an empty replica list")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (
            not isinstance(log_dirs, list)
            or any(d != "any" for d in log_dirs)
            or len(log_dirs) != len(replicas)
        ):
            raise PlanError(f'{path}: partition {topic}-{partition}: only "any" log dirs are supported')
        if (topic, partition) in plan:
            raise PlanError(f"{path}: partition {topic}-{partition} is listed twice")
        plan[(topic, partition)] = tuple(replicas)
    return plan


def read_topics_to_move(path: Path) -> list[str]:
    """The topic names of a ``--topics-to-move-json-file``."""
    document = _load(path)
    entries = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError(f'{path}: expected {{"version":1,"topics":[{{"topic":..}}]}}')
    topics: list[str] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"{path}: each entry needs a topic name: {entry!r}")
        if topic not in topics:
            topics.append(topic)
    return topics


def format_plan(assignment: Mapping[tuple[str, int], Sequence[int]]) -> str:
    """A plan in Kafka's one-line JSON."""
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "replicas": list(replicas),
            "log_dirs": ["any"] * len(replicas),
        }
        for (topic, partition), replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))
