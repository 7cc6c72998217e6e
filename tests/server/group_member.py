"""One consumer-group member in its own process, driven over stdin/stdout (for the group tests).

Usage: ``python tests/server/group_member.py '<json settings>'`` where the settings are
``{"client": "confluent-kafka" | "kafka-python" | "aiokafka", "bootstrap": ..., "group": ...,
"topics": [...], "config": {...}}``; ``config`` holds client-native settings (librdkafka keys for
confluent-kafka, keyword arguments otherwise; ``partition_assignment_strategy`` is given by assignor names).

The member subscribes, then polls in a loop (100 ms) and prints one JSON object per line:

- ``{"e": "assignment", "partitions": [[topic, partition], ...]}`` whenever its assignment changes;
- ``{"e": "assign" | "revoke", "partitions": [...]}`` from the rebalance listener;
- ``{"e": "msg", "t": topic, "p": partition, "o": offset, "v": value}`` for each record;
- ``{"e": "error", "name": ..., "msg": ...}`` for an error the client reports while polling;
- answers to commands (one JSON object per line on stdin):
  ``{"cmd": "commit"}`` (consumed positions) or ``{"cmd": "commit", "offsets": [[t, p, o], ...]}``
  -> ``{"e": "committed", "error": null | name}``; ``{"cmd": "committed", "partitions": [[t, p], ...]}``
  -> ``{"e": "committed_offsets", "offsets": [[t, p, o | null], ...]}``; ``{"cmd": "seek", "t": .., "p": ..,
  "o": ..}`` -> ``{"e": "seeked"}``; ``{"cmd": "position", "partitions": [[t, p], ...]}`` ->
  ``{"e": "positions", "offsets": [[t, p, o | null], ...]}`` (null: not known yet); ``{"cmd": "close"}`` -> ``{"e": "closed"}`` and exit 0.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import os
import queue
import signal
import sys
import threading
import traceback
from typing import Any


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def stdin_commands() -> queue.Queue[dict[str, Any]]:
    commands: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            if line.strip():
                commands.put(json.loads(line))
        commands.put({"cmd": "eof"})

    threading.Thread(target=read, daemon=True).start()
    return commands


def _tp_list(parts: Any) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in parts)


# ---- confluent-kafka ------------------------------------------------------------------------------------


def run_confluent(settings: dict[str, Any]) -> None:
    import confluent_kafka
    from confluent_kafka import TopicPartition

    conf = {
        "bootstrap.servers": settings["bootstrap"],
        "group.id": settings["group"],
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "log_level": 3,
        **settings.get("config", {}),
    }
    consumer = confluent_kafka.Consumer(conf)
    consumer.subscribe(
        settings["topics"],
        on_assign=lambda c, parts: emit({"e": "assign", "partitions": _tp_list(parts)}),
        on_revoke=lambda c, parts: emit({"e": "revoke", "partitions": _tp_list(parts)}),
    )
    commands = stdin_commands()
    last: list[list[Any]] | None = None
    while True:
        msg = consumer.poll(0.1)
        if msg is not None:
            if msg.error():
                emit({"e": "error", "name": msg.error().name(), "msg": msg.error().str()})
            else:
                value = msg.value()
                emit(
                    {
                        "e": "msg",
                        "t": msg.topic(),
                        "p": msg.partition(),
                        "o": msg.offset(),
                        "v": None if value is None else value.decode(),
                    }
                )
        current = _tp_list(consumer.assignment())
        if current != last:
            last = current
            emit({"e": "assignment", "partitions": current})
        while not commands.empty():
            cmd = commands.get()
            name = cmd["cmd"]
            if name == "commit":
                try:
                    if "offsets" in cmd:
                        offsets = [TopicPartition(t, p, o) for t, p, o in cmd["offsets"]]
                        result = consumer.commit(offsets=offsets, asynchronous=False)
                    else:
                        result = consumer.commit(asynchronous=False)
                    errors = [tp.error.name() for tp in result or [] if tp.error is not None]
                    emit({"e": "committed", "error": errors[0] if errors else None})
                except confluent_kafka.KafkaException as exc:
                    emit({"e": "committed", "error": exc.args[0].name()})
            elif name == "committed":
                parts = consumer.committed([TopicPartition(t, p) for t, p in cmd["partitions"]], timeout=20)
                emit(
                    {
                        "e": "committed_offsets",
                        "offsets": [
                            [tp.topic, tp.partition, tp.offset if tp.offset >= 0 else None] for tp in parts
                        ],
                    }
                )
            elif name == "seek":
                consumer.seek(TopicPartition(cmd["t"], cmd["p"], cmd["o"]))
                emit({"e": "seeked"})
            elif name == "position":
                parts = consumer.position([TopicPartition(t, p) for t, p in cmd["partitions"]])
                emit(
                    {
                        "e": "positions",
                        "offsets": [
                            [tp.topic, tp.partition, tp.offset if tp.offset >= 0 else None] for tp in parts
                        ],
                    }
                )
            elif name in ("close", "eof"):
                consumer.close()
                emit({"e": "closed"})
                return


# ---- kafka-python -----------------------------------------------------------------------------------------


def run_kafka_python(settings: dict[str, Any]) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    config = dict(settings.get("config", {}))
    if "partition_assignment_strategy" in config:
        config["partition_assignment_strategy"] = [
            assignors[n] for n in config["partition_assignment_strategy"]
        ]
    consumer = KafkaConsumer(
        bootstrap_servers=settings["bootstrap"],
        group_id=settings["group"],
        enable_auto_commit=False,
        **{"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, **config},
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit({"e": "revoke", "partitions": _tp_list(revoked)})

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit({"e": "assign", "partitions": _tp_list(assigned)})

    # Metadata first: a kafka-python 3.0.12 leader that assigned before it knew the topics rejoins when
    # they arrive, and if that JoinGroup outlasts poll(timeout_ms) the finished join is never applied
    # (need_rejoin() turns False, so the completed join task is never awaited): the member keeps an
    # empty assignment with heartbeats off until its session expires. Knowing the topics up front
    # avoids that metadata-change rejoin.
    for topic in settings["topics"]:
        consumer.partitions_for_topic(topic)
    consumer.subscribe(settings["topics"], listener=Listener())
    commands = stdin_commands()
    last: list[list[Any]] | None = None
    while True:
        try:
            batches = consumer.poll(timeout_ms=100)
        except KafkaError as exc:
            emit({"e": "error", "name": type(exc).__name__, "msg": str(exc)})
            batches = {}
        for tp, records in sorted(batches.items()):
            for record in records:
                value = record.value
                emit(
                    {
                        "e": "msg",
                        "t": tp.topic,
                        "p": tp.partition,
                        "o": record.offset,
                        "v": None if value is None else value.decode(),
                    }
                )
        current = _tp_list(consumer.assignment())
        if current != last:
            last = current
            emit({"e": "assignment", "partitions": current})
        while not commands.empty():
            cmd = commands.get()
            name = cmd["cmd"]
            if name == "commit":
                try:
                    if "offsets" in cmd:
                        consumer.commit(
                            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for t, p, o in cmd["offsets"]}
                        )
                    else:
                        consumer.commit()
                    emit({"e": "committed", "error": None})
                except KafkaError as exc:
                    emit({"e": "committed", "error": type(exc).__name__})
            elif name == "committed":
                offsets = [[t, p, consumer.committed(TopicPartition(t, p))] for t, p in cmd["partitions"]]
                emit({"e": "committed_offsets", "offsets": offsets})
            elif name == "seek":
                consumer.seek(TopicPartition(cmd["t"], cmd["p"]), cmd["o"])
                emit({"e": "seeked"})
            elif name == "position":
                offsets = [[t, p, consumer.position(TopicPartition(t, p))] for t, p in cmd["partitions"]]
                emit({"e": "positions", "offsets": offsets})
            elif name in ("close", "eof"):
                consumer.close()
                emit({"e": "closed"})
                return


# ---- aiokafka ---------------------------------------------------------------------------------------------


async def run_aiokafka(settings: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
    }
    config = dict(settings.get("config", {}))
    if "partition_assignment_strategy" in config:
        config["partition_assignment_strategy"] = tuple(
            assignors[n] for n in config["partition_assignment_strategy"]
        )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings["bootstrap"],
        group_id=settings["group"],
        enable_auto_commit=False,
        **{"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, **config},
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit({"e": "revoke", "partitions": _tp_list(revoked)})

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit({"e": "assign", "partitions": _tp_list(assigned)})

    consumer.subscribe(settings["topics"], listener=Listener())
    await consumer.start()
    commands = stdin_commands()
    last: list[list[Any]] | None = None
    while True:
        try:
            batches = await consumer.getmany(timeout_ms=100)
        except KafkaError as exc:
            emit({"e": "error", "name": type(exc).__name__, "msg": str(exc)})
            batches = {}
        for tp, records in sorted(batches.items()):
            for record in records:
                value = record.value
                emit(
                    {
                        "e": "msg",
                        "t": tp.topic,
                        "p": tp.partition,
                        "o": record.offset,
                        "v": None if value is None else value.decode(),
                    }
                )
        current = _tp_list(consumer.assignment())
        if current != last:
            last = current
            emit({"e": "assignment", "partitions": current})
        while not commands.empty():
            cmd = commands.get()
            name = cmd["cmd"]
            if name == "commit":
                try:
                    if "offsets" in cmd:
                        await consumer.commit(
                            {TopicPartition(t, p): OffsetAndMetadata(o, "") for t, p, o in cmd["offsets"]}
                        )
                    else:
                        await consumer.commit()
                    emit({"e": "committed", "error": None})
                except KafkaError as exc:
                    emit({"e": "committed", "error": type(exc).__name__})
            elif name == "committed":
                offsets = [
                    [t, p, await consumer.committed(TopicPartition(t, p))] for t, p in cmd["partitions"]
                ]
                emit({"e": "committed_offsets", "offsets": offsets})
            elif name == "seek":
                consumer.seek(TopicPartition(cmd["t"], cmd["p"]), cmd["o"])
                emit({"e": "seeked"})
            elif name == "position":
                offsets = [
                    [t, p, await consumer.position(TopicPartition(t, p))] for t, p in cmd["partitions"]
                ]
                emit({"e": "positions", "offsets": offsets})
            elif name in ("close", "eof"):
                await consumer.stop()
                emit({"e": "closed"})
                return


def main() -> None:
    settings = json.loads(sys.argv[1])
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks to stderr, for a stuck client
    if os.environ.get("GROUP_MEMBER_LOG"):
        logging.basicConfig(
            level=os.environ["GROUP_MEMBER_LOG"].upper(),
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
        )
    client = settings["client"]
    try:
        if client == "confluent-kafka":
            run_confluent(settings)
        elif client == "kafka-python":
            run_kafka_python(settings)
        elif client == "aiokafka":
            asyncio.run(run_aiokafka(settings))
        else:
            raise SystemExit(f"unknown client {client!r}")
    except Exception as exc:
        emit({"e": "crash", "name": type(exc).__name__, "msg": str(exc), "tb": traceback.format_exc()})
        raise


if __name__ == "__main__":
    main()
