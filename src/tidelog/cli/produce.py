"""``tidelog produce``: one message per input line (the job of ``kafka-console-producer.sh``).

A line is ``[headers<headers-delimiter>][key<key-separator>]value`` with headers parsed only under
``--parse-headers`` (``k1:v1,k2:v2``) and a key only under ``--key-separator``. Lines are bytes: nothing is
decoded, so any payload but a newline round-trips through ``tidelog consume``.

Invariants: every line read is either acknowledged or reported as failed before the command exits; exit
code 0 only if all were acknowledged. ``--rate`` caps messages per second.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from tidelog.cli._common import (
    ClientOptions,
    client_options,
    err_console,
    fail,
    kafka_error_text,
    parse_key_values,
)
from tidelog.cli._progress import progress_bar

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer
    from confluent_kafka.admin import ClusterMetadata

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\"}


def unescape(text: str) -> str:
    r"""Decode ``\t \n \r \0 \\`` in a separator given on the command line."""
    out: list[str] = []
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "\\")
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
        else:
            out.append(ch)
    return "".join(out)


class LineFormat:
    """How a line splits into headers, key and value."""

    def __init__(
        self,
        key_separator: str | None,
        parse_headers: bool,
        headers_delimiter: str,
        headers_separator: str,
        headers_key_separator: str,
    ) -> None:
        self.key_separator = unescape(key_separator).encode() if key_separator is not None else None
        self.parse_headers = parse_headers
        self.headers_delimiter = unescape(headers_delimiter).encode()
        self.headers_separator = unescape(headers_separator).encode()
        self.headers_key_separator = unescape(headers_key_separator).encode()
        for name, sep in (
            ("--key-separator", self.key_separator),
            ("--headers-delimiter", self.headers_delimiter),
            ("--headers-separator", self.headers_separator),
            ("--headers-key-separator", self.headers_key_separator),
        ):
            if sep is not None and not sep:
                raise click.UsageError(f"{name} must not be empty")

    def split(self, line: bytes, lineno: int) -> tuple[list[tuple[str, bytes]], bytes | None, bytes]:
        headers: list[tuple[str, bytes]] = []
        rest = line
        if self.parse_headers:
            head, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                fail(f"line {lineno}: no headers delimiter {self.headers_delimiter.decode()!r} found")
            for item in head.split(self.headers_separator) if head else []:
                name, sep, value = item.partition(self.headers_key_separator)
                if not sep:
                    fail(
                        f"line {lineno}: header {item.decode(errors='replace')!r} has no {self.headers_key_separator.decode()!r}"
                    )
                headers.append((name.decode("utf-8", errors="replace"), value))
        key: bytes | None = None
        if self.key_separator is not None:
            key, sep, rest = rest.partition(self.key_separator)
            if not sep:
                fail(f"line {lineno}: no key separator {self.key_separator.decode()!r} found")
        return headers, key, rest


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for raw in stream:
        yield raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw


class _Delivery:
    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:  # noqa: ARG002 - librdkafka callback signature
        if error is None:
            self.acked += 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = kafka_error_text(error)


@click.command("produce")
@click.argument("topic")
@click.option(
    "--file",
    "-f",
    "input_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read lines from FILE instead of stdin.",
)
@click.option(
    "--key-separator",
    "-K",
    help=r"Split each line into key and value at the first SEP (escapes like \t allowed).",
)
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="Header added to every message (repeatable).",
)
@click.option("--parse-headers", is_flag=True, help="Each line starts with headers: k1:v1,k2:v2<TAB>...")
@click.option(
    "--headers-delimiter", default=r"\t", show_default=True, help="Ends the headers part of a line."
)
@click.option("--headers-separator", default=",", show_default=True, help="Separates headers.")
@click.option(
    "--headers-key-separator", default=":", show_default=True, help="Separates a header's key and value."
)
@click.option(
    "--partition",
    "-p",
    type=click.IntRange(min=0),
    help="Produce to this partition (default: by key / sticky).",
)
@click.option(
    "--compression",
    "-z",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), default="all", show_default=True)
@click.option(
    "--rate", type=click.FloatRange(min=0, min_open=True), help="At most this many messages per second."
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress line [default: when stderr is a terminal].",
)
@client_options
def produce_command(
    client: ClientOptions,
    topic: str,
    input_file: Path | None,
    key_separator: str | None,
    headers: tuple[str, ...],
    parse_headers: bool,
    headers_delimiter: str,
    headers_separator: str,
    headers_key_separator: str,
    partition: int | None,
    compression: str,
    acks: str,
    rate: float | None,
    progress: bool | None,
) -> None:
    """Send each line of stdin (or --file) as a message to TOPIC."""
    from confluent_kafka import Producer

    line_format = LineFormat(
        key_separator, parse_headers, headers_delimiter, headers_separator, headers_key_separator
    )
    static_headers = [(k, v.encode()) for k, v in parse_key_values(headers, "--header").items()]
    config = client.base_config()
    config.update({"acks": "all" if acks == "-1" else acks, "compression.type": compression, "linger.ms": 5})
    config.setdefault("message.timeout.ms", int(max(30.0, client.timeout * 3) * 1000))
    producer = Producer(config)
    _check_topic(client, producer, topic, partition)

    delivery = _Delivery()
    stream: BinaryIO = input_file.open("rb") if input_file is not None else sys.stdin.buffer
    # By default a progress line only when stderr is a terminal and nobody is typing the input.
    interactive = input_file is None and sys.stdin.isatty()
    show = progress if progress is not None else (err_console.is_terminal and not interactive)
    total = input_file.stat().st_size if input_file is not None else None
    bar = progress_bar("msg", show=show, in_bytes=True)
    sent = 0
    started = time.monotonic()
    interrupted = False
    try:
        with bar:
            task = bar.add_task("0 messages", total=total)
            for lineno, line in enumerate(_lines(stream), start=1):
                line_headers, key, value = line_format.split(line, lineno)
                if rate is not None:
                    delay = started + sent / rate - time.monotonic()
                    if delay > 0:
                        producer.poll(0)
                        time.sleep(delay)
                message_headers: list[tuple[str, str | bytes | None]] = [*static_headers, *line_headers]
                _produce(producer, topic, value, key, message_headers, partition, delivery)
                sent += 1
                bar.update(task, advance=len(line) + 1, description=f"{sent:,} messages")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
        remaining = producer.flush(max(client.timeout, 30.0))
    if remaining:
        fail(
            f"{remaining} of {sent} messages were not acknowledged in time (is the broker reachable at {client.bootstrap_server}?)"
        )
    if delivery.failed:
        fail(f"{delivery.failed} of {sent} messages failed: {delivery.first_error}")
    err_console.print(f"Produced {delivery.acked} message(s) to {topic}.")
    if interrupted:
        raise SystemExit(130)


def _produce(
    producer: Producer,
    topic: str,
    value: bytes,
    key: bytes | None,
    headers: list[tuple[str, str | bytes | None]],
    partition: int | None,
    delivery: _Delivery,
) -> None:
    """Produce one message (to ``partition``, else the partitioner's choice), waiting while the local
    queue is full."""
    while True:
        try:
            producer.produce(
                topic,
                value=value,
                key=key,
                partition=-1 if partition is None else partition,  # -1: librdkafka's "unassigned"
                on_delivery=delivery,
                headers=headers or None,
            )
        except BufferError:
            producer.poll(0.1)  # local queue full: wait for deliveries
            continue
        producer.poll(0)
        return


def _check_topic(client: ClientOptions, producer: Producer, topic: str, partition: int | None) -> None:
    """Fail early: unreachable broker, unknown topic (after letting the broker auto-create it), bad partition."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + client.timeout
    while True:
        try:
            metadata: ClusterMetadata = producer.list_topics(
                topic=topic, timeout=max(0.1, deadline - time.monotonic())
            )
        except KafkaException as exc:
            client.unreachable(kafka_error_text(exc), producer)
        meta = metadata.topics.get(topic)
        transient = meta is not None and meta.error is not None and meta.error.retriable()
        if not transient or time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # e.g. LEADER_NOT_AVAILABLE right after auto-creation
    if meta is None or meta.error is not None:
        reason = kafka_error_text(meta.error) if meta is not None and meta.error is not None else "not found"
        fail(f"unknown topic {topic!r} ({reason}); create it with: tidelog topics create {topic}")
    if partition is not None and partition not in meta.partitions:
        fail(f"topic {topic!r} has no partition {partition} (it has {len(meta.partitions)})")
