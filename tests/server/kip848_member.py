"""A confluent-kafka consumer with ``group.protocol=consumer`` (KIP-848) in its own process, for tests.

Usage: ``python tests/server/kip848_member.py '<json>'`` with ``{"bootstrap": ..., "group": ...,
"topics": [...], "config": {librdkafka settings}}``. It subscribes and polls (100 ms), printing one JSON
object per line:

- ``{"e": "assignment", "partitions": [[topic, partition], ...]}`` whenever its assignment changes;
- ``{"e": "msg", "t": topic, "p": partition, "o": offset, "v": value}`` for each record;
- ``{"e": "error", "name": ..., "msg": ...}`` for an error the client reports while polling;
- answers to commands on stdin (one JSON object per line): ``{"cmd": "commit"}`` (consumed positions,
  synchronously) -> ``{"e": "committed", "error": null | name, "offsets": [[t, p, o], ...]}``;
  ``{"cmd": "close"}`` -> ``{"e": "closed"}`` and exit 0.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from typing import Any

import confluent_kafka


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(settings: dict[str, Any]) -> None:
    conf = {
        "bootstrap.servers": settings["bootstrap"],
        "group.id": settings["group"],
        "group.protocol": "consumer",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 3,
        **settings.get("config", {}),
    }
    consumer = confluent_kafka.Consumer(conf)
    consumer.subscribe(settings["topics"])
    commands: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            if line.strip():
                commands.put(json.loads(line))
        commands.put({"cmd": "close"})

    threading.Thread(target=read, daemon=True).start()
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
        current = sorted([tp.topic, tp.partition] for tp in consumer.assignment())
        if current != last:
            last = current
            emit({"e": "assignment", "partitions": current})
        while not commands.empty():
            cmd = commands.get()
            if cmd["cmd"] == "commit":
                try:
                    result = consumer.commit(asynchronous=False) or []
                    errors = [tp.error.name() for tp in result if tp.error is not None]
                    emit(
                        {
                            "e": "committed",
                            "error": errors[0] if errors else None,
                            "offsets": sorted([tp.topic, tp.partition, tp.offset] for tp in result),
                        }
                    )
                except confluent_kafka.KafkaException as exc:
                    emit({"e": "committed", "error": exc.args[0].name(), "offsets": []})
            elif cmd["cmd"] == "close":
                consumer.close()
                emit({"e": "closed"})
                return


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
