"""``tidelog consume``: print messages of a topic (the job of ``kafka-console-consumer.sh``).

Without ``--group`` the partitions are assigned directly (no consumer group, nothing committed); with
``--group`` the consumer subscribes and commits like any group member.

Output: ``--format text`` writes the raw value bytes (optionally ``headers<TAB>key<SEP>value``) and a
newline; ``--format json`` writes one JSON object per message with topic, partition, offset, timestamp,
timestamp_type, key, value, headers. Keys, values and header values that are valid UTF-8 appear as strings,
anything else as ``{"base64": "..."}``; null stays null.

Invariants: stops after ``--max-messages`` or ``--idle-timeout`` seconds without a message (else runs until
Ctrl-C, exit 0), and always reports ``Processed a total of N messages`` on stderr.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import click
from rich.progress import Progress, TaskID

from tidelog.cli._common import (
    ClientOptions,
    client_options,
    err_console,
    fail,
    kafka_error_text,
    print_warning,
)
from tidelog.cli._progress import progress_bar, show_progress
from tidelog.cli.produce import unescape

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message
    from confluent_kafka.admin import ClusterMetadata

_TIMESTAMP_TYPES = {0: None, 1: "CreateTime", 2: "LogAppendTime"}


def _json_bytes(data: bytes | None) -> str | dict[str, str] | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _headers(message: Message) -> list[tuple[str, bytes | None]]:
    """A consumed message's headers: librdkafka hands back (name, bytes or None) pairs (confluent-kafka's
    header type also covers the dict and str values a producer may pass)."""
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in pairs]


def format_json(message: Message) -> bytes:
    timestamp_type, timestamp = message.timestamp()
    headers = _headers(message)
    record = {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp": timestamp if timestamp_type else None,
        "timestamp_type": _TIMESTAMP_TYPES.get(timestamp_type),
        "key": _json_bytes(message.key()),
        "value": _json_bytes(message.value()),
        "headers": [[name, _json_bytes(value)] for name, value in headers],
    }
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


class TextFormat:
    def __init__(self, print_key: bool, key_separator: str, print_headers: bool) -> None:
        self.print_key = print_key
        self.key_separator = unescape(key_separator).encode()
        self.print_headers = print_headers

    def __call__(self, message: Message) -> bytes:
        parts: list[bytes] = []
        if self.print_headers:
            headers = _headers(message)
            text = b",".join(name.encode() + b":" + (b"null" if v is None else v) for name, v in headers)
            parts.append((text or b"NO_HEADERS") + b"\t")
        if self.print_key:
            key = message.key()
            parts.append((b"null" if key is None else key) + self.key_separator)
        value = message.value()
        parts.append(b"null" if value is None else value)
        return b"".join(parts)


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date-time (local time if no zone is given)."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 date-time"
        ) from None


@click.command("consume")
@click.argument("topic")
@click.option(
    "--from-beginning", is_flag=True, help="Start at the earliest offset (default: only new messages)."
)
@click.option(
    "--offset",
    "-o",
    "start_offset",
    metavar="earliest|latest|N",
    help="Start at this offset in each partition.",
)
@click.option("--timestamp", metavar="MS|ISO-8601", help="Start at the first message at or after this time.")
@click.option(
    "--partition",
    "-p",
    "partitions",
    multiple=True,
    type=click.IntRange(min=0),
    help="Only these partitions (repeatable).",
)
@click.option("--max-messages", "-n", type=click.IntRange(min=1), help="Exit after this many messages.")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Exit after this many seconds without a message.",
)
@click.option("--group", "-g", help="Consume as a member of this consumer group (commits offsets).")
@click.option("--format", "-f", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--print-key", is_flag=True, help="Text format: print key<SEP>value.")
@click.option(
    "--key-separator", default=r"\t", show_default=True, help="Text format: separator after the key."
)
@click.option(
    "--print-headers", is_flag=True, help="Text format: print k1:v1,k2:v2<TAB> before each message."
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_uncommitted",
    show_default=True,
)
@client_options
def consume_command(
    client: ClientOptions,
    topic: str,
    from_beginning: bool,
    start_offset: str | None,
    timestamp: str | None,
    partitions: tuple[int, ...],
    max_messages: int | None,
    idle_timeout: float | None,
    group: str | None,
    fmt: str,
    print_key: bool,
    key_separator: str,
    print_headers: bool,
    isolation_level: str,
) -> None:
    """Print messages from TOPIC to stdout."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer

    starts = [
        name
        for name, given in (
            ("--from-beginning", from_beginning),
            ("--offset", start_offset),
            ("--timestamp", timestamp),
        )
        if given
    ]
    if len(starts) > 1:
        raise click.UsageError(f"{' and '.join(starts)} cannot be used together")
    if group is not None and (start_offset is not None or timestamp is not None or partitions):
        raise click.UsageError("--group cannot be combined with --offset, --timestamp or --partition")
    start: int = OFFSET_BEGINNING if from_beginning else OFFSET_END
    if start_offset is not None:
        if start_offset in ("earliest", "latest"):
            start = OFFSET_BEGINNING if start_offset == "earliest" else OFFSET_END
        elif start_offset.isdigit():
            start = int(start_offset)
        else:
            raise click.BadParameter(
                f"{start_offset!r} is not earliest, latest or a non-negative offset", param_hint="--offset"
            )
    start_ms = parse_timestamp(timestamp) if timestamp is not None else None

    config = client.base_config()
    config.update(
        {
            "group.id": group or f"tidelog-console-consumer-{os.getpid()}",
            "enable.auto.commit": group is not None,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "isolation.level": isolation_level,
            "enable.partition.eof": False,
        }
    )
    consumer = Consumer(config)
    render = format_json if fmt == "json" else TextFormat(print_key, key_separator, print_headers)
    progress = _Progress()
    try:
        available = _partitions(client, consumer, topic)
        for p in partitions:
            if p not in available:
                fail(f"topic {topic!r} has no partition {p} (it has {len(available)})")
        if group is not None:
            consumer.subscribe([topic])
        else:
            _assign(client, consumer, topic, sorted(partitions or available), start, start_ms)
        progress.started = True
        # A bar only for a known amount written somewhere else than the terminal (consume ... > file).
        show = max_messages is not None and show_progress() and not sys.stdout.isatty()
        with progress_bar("msg", show=show) as bar:
            progress.bar = bar
            progress.task = bar.add_task(f"consuming {topic}", total=max_messages)
            _loop(consumer, render, max_messages, idle_timeout, progress)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        _silence_stdout()
    finally:
        consumer.close()
        if progress.started:
            err_console.print(f"Processed a total of {progress.processed} messages")


def _partitions(client: ClientOptions, consumer: Consumer, topic: str) -> list[int]:
    from confluent_kafka import KafkaException

    try:
        # all topics: asking for one may create it
        metadata: ClusterMetadata = consumer.list_topics(timeout=client.timeout)
    except KafkaException as exc:
        client.unreachable(kafka_error_text(exc), consumer)
    meta = metadata.topics.get(topic)
    if meta is None:
        fail(f"unknown topic {topic!r}")
    if meta.error is not None:
        fail(f"topic {topic!r}: {kafka_error_text(meta.error)}")
    return sorted(meta.partitions)


def _assign(
    client: ClientOptions,
    consumer: Consumer,
    topic: str,
    partitions: list[int],
    start: int,
    start_ms: int | None,
) -> None:
    from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

    if start_ms is not None:
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, start_ms) for p in partitions], timeout=client.timeout
            )
        except KafkaException as exc:
            fail(f"cannot look up offsets for timestamp {start_ms}: {kafka_error_text(exc)}")
        assignment = [
            TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found
        ]
    else:
        assignment = [TopicPartition(topic, p, start) for p in partitions]
    consumer.assign(assignment)


class _Progress:
    __slots__ = ("bar", "processed", "started", "task")

    def __init__(self) -> None:
        self.processed = 0
        self.started = False
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def advance(self) -> None:
        self.processed += 1
        if self.bar is not None and self.task is not None and self.processed % 64 == 0:
            self.bar.update(self.task, completed=self.processed)


def _loop(
    consumer: Consumer,
    render: Callable[[Message], bytes],
    max_messages: int | None,
    idle_timeout: float | None,
    progress: _Progress,
) -> None:
    out = sys.stdout.buffer
    last = time.monotonic()
    while max_messages is None or progress.processed < max_messages:
        message = consumer.poll(0.2)
        now = time.monotonic()
        if message is None:
            if idle_timeout is not None and now - last >= idle_timeout:
                break
            continue
        error = message.error()
        if error is not None:
            if error.fatal() or error.name() in ("UNKNOWN_TOPIC_OR_PART", "TOPIC_AUTHORIZATION_FAILED"):
                fail(kafka_error_text(error))
            print_warning(kafka_error_text(error))
            continue
        last = now
        out.write(render(message) + b"\n")
        out.flush()
        progress.advance()


def _silence_stdout() -> None:
    """After the reader of our stdout went away (``| head``), stop Python complaining at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
