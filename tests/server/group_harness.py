"""Test side of ``group_member.py``: start a member process, send it commands, wait for what it reports.

A :class:`Member` collects the member's JSON events in a reader thread; ``wait_*`` helpers block until
a condition holds (or fail the test with the member's recent events and stderr). Members are killed
when the test ends (``MemberPool``), so a failing test never leaves consumers behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka

from tidelog.protocol import codec
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription, RequestHeader
from tidelog.protocol.schema import Request

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")
ROOT = Path(__file__).resolve().parents[2]

CONFLUENT = "confluent-kafka"
KAFKA_PYTHON = "kafka-python"
AIOKAFKA = "aiokafka"
CLIENTS = (CONFLUENT, KAFKA_PYTHON, AIOKAFKA)

Partition = tuple[str, int]


def client_config(client: str, **settings: Any) -> dict[str, Any]:
    """Settings named once, in each client's own spelling: ``reset``, ``assignors``, ``instance_id``,
    ``session_ms``, ``heartbeat_ms``, ``max_poll_ms``."""
    names = {
        CONFLUENT: {
            "reset": "auto.offset.reset",
            "assignors": "partition.assignment.strategy",
            "instance_id": "group.instance.id",
            "session_ms": "session.timeout.ms",
            "heartbeat_ms": "heartbeat.interval.ms",
            "max_poll_ms": "max.poll.interval.ms",
            "client_id": "client.id",
        },
        KAFKA_PYTHON: {
            "reset": "auto_offset_reset",
            "assignors": "partition_assignment_strategy",
            "instance_id": "group_instance_id",
            "session_ms": "session_timeout_ms",
            "heartbeat_ms": "heartbeat_interval_ms",
            "max_poll_ms": "max_poll_interval_ms",
            "client_id": "client_id",
        },
    }
    names[AIOKAFKA] = names[KAFKA_PYTHON]
    config: dict[str, Any] = {}
    for key, value in settings.items():
        if value is None:
            continue
        if key == "reset" and client == CONFLUENT and value == "none":
            value = "error"  # librdkafka's name for "no reset: report an error"
        if key == "assignors" and client == CONFLUENT:
            value = ",".join(value)
        config[names[client][key]] = value
    return config


class Member:
    """One consumer process in a group."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topics: list[str],
        *,
        name: str = "",
        **settings: Any,
    ) -> None:
        self.client = client
        self.name = name or client
        payload = {
            "client": client,
            "bootstrap": bootstrap,
            "group": group,
            "topics": topics,
            "config": client_config(client, **settings),
        }
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by cleanup()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), json.dumps(payload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=ROOT,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"e": "exit"})
            self._cond.notify_all()

    # -- observing -----------------------------------------------------------------------------------

    @property
    def assignment(self) -> set[Partition]:
        """The latest assignment this member reported."""
        with self._cond:
            for event in reversed(self.events):
                if event["e"] == "assignment":
                    return {(t, p) for t, p in event["partitions"]}
        return set()

    def messages(self) -> list[tuple[str, int, int, str | None]]:
        with self._cond:
            return [(e["t"], e["p"], e["o"], e["v"]) for e in self.events if e["e"] == "msg"]

    def count(self, kind: str) -> int:
        with self._cond:
            return sum(1 for e in self.events if e["e"] == kind)

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], Any], timeout: float = 30.0, what: str = ""
    ) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = predicate(self.events)
                if found:
                    return found
                if any(e["e"] in ("exit", "crash") for e in self.events):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
        raise AssertionError(f"{self.name}: timed out waiting for {what or predicate}\n{self.describe()}")

    def wait_event(self, kind: str, after: int = 0, timeout: float = 30.0) -> dict[str, Any]:
        """The first event of ``kind`` at index ``after`` or later."""

        def find(events: list[dict[str, Any]]) -> dict[str, Any] | None:
            return next((e for e in events[after:] if e["e"] == kind), None)

        return self.wait_for(find, timeout, f"event {kind!r}")  # type: ignore[no-any-return]

    def wait_messages(self, count: int, timeout: float = 30.0) -> list[tuple[str, int, int, str | None]]:
        self.wait_for(
            lambda events: sum(1 for e in events if e["e"] == "msg") >= count, timeout, f"{count} messages"
        )
        return self.messages()

    def describe(self) -> str:
        with self._cond:
            tail = self.events[-25:]
        self._stderr.seek(0)
        err = self._stderr.read().decode(errors="replace")[-3000:]
        return f"last events: {json.dumps(tail, indent=None)}\nstderr:\n{err}"

    # -- commands --------------------------------------------------------------------------------------

    def send(self, command: dict[str, Any]) -> int:
        """Send a command; returns the event index from which its answer will appear."""
        with self._cond:
            mark = len(self.events)
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()
        return mark

    def commit(self, offsets: list[tuple[str, int, int]] | None = None) -> str | None:
        """Commit (the consumed positions, or ``offsets``); the client's error name or None."""
        command: dict[str, Any] = {"cmd": "commit"}
        if offsets is not None:
            command["offsets"] = [list(o) for o in offsets]
        return self.wait_event("committed", self.send(command))["error"]  # type: ignore[no-any-return]

    def committed(self, partitions: list[Partition]) -> dict[Partition, int | None]:
        mark = self.send({"cmd": "committed", "partitions": [list(p) for p in partitions]})
        return {(t, p): o for t, p, o in self.wait_event("committed_offsets", mark)["offsets"]}

    def positions(self, partitions: list[Partition]) -> dict[Partition, int | None]:
        mark = self.send({"cmd": "position", "partitions": [list(p) for p in partitions]})
        return {(t, p): o for t, p, o in self.wait_event("positions", mark)["offsets"]}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.wait_event("seeked", self.send({"cmd": "seek", "t": topic, "p": partition, "o": offset}))

    def close(self, timeout: float = 30.0) -> None:
        """Close the consumer the client's way (LeaveGroup unless static) and wait for the process."""
        self.wait_event("closed", self.send({"cmd": "close"}), timeout)
        self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the member vanishes without a LeaveGroup."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def cleanup(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr.close()


class MemberPool:
    """Starts members for one test and kills whatever is left at its end."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.members: list[Member] = []

    def start(self, client: str, group: str, topics: list[str], **settings: Any) -> Member:
        member = Member(client, self.bootstrap, group, topics, **settings)
        self.members.append(member)
        return member

    def close(self) -> None:
        for member in self.members:
            member.cleanup()


def wait_assignments(
    members: list[Member],
    expected: Callable[[list[set[Partition]]], bool],
    timeout: float = 40.0,
    what: str = "",
) -> list[set[Partition]]:
    """Wait until the members' latest reported assignments satisfy ``expected``."""
    deadline = time.monotonic() + timeout
    while True:
        current = [m.assignment for m in members]
        if expected(current):
            return current
        if time.monotonic() > deadline:
            details = "\n".join(f"--- {m.name}: {sorted(m.assignment)}\n{m.describe()}" for m in members)
            raise AssertionError(f"assignments never became {what}: {current}\n{details}")
        time.sleep(0.1)


def wait_settled(members: list[Member], quiet: float = 1.5, timeout: float = 30.0) -> None:
    """Until no member has started a rebalance (assign/revoke) for ``quiet`` seconds: a client may still
    rejoin on its own after the first assignment (kafka-python's leader does when its topic metadata
    arrives only after it assigned)."""
    deadline = time.monotonic() + timeout
    counts = [m.count("assign") + m.count("revoke") for m in members]
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet:
        assert time.monotonic() < deadline, "the group never settled"
        time.sleep(0.1)
        now = [m.count("assign") + m.count("revoke") for m in members]
        if now != counts:
            counts, quiet_since = now, time.monotonic()


def partitions_of(topic: str, count: int) -> set[Partition]:
    return {(topic, p) for p in range(count)}


def split_evenly(everything: set[Partition]) -> Callable[[list[set[Partition]]], bool]:
    """The members' assignments are disjoint, cover ``everything``, and differ in size by at most one."""

    def check(assignments: list[set[Partition]]) -> bool:
        union: set[Partition] = set()
        for a in assignments:
            if union & a:
                return False
            union |= a
        sizes = [len(a) for a in assignments]
        return union == everything and max(sizes) - min(sizes) <= 1 and min(sizes) >= 1

    return check


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, per_partition: dict[int, list[str]]) -> None:
    """Values to each partition, in order (offsets 0..n-1 on a fresh topic)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3})
    for partition, values in per_partition.items():
        for value in values:
            producer.produce(topic, value.encode(), partition=partition)
    assert producer.flush(30) == 0


# ---- the wire ---------------------------------------------------------------------------------------


class Wire:
    """A raw Kafka connection speaking tidelog's codec; requests may be sent ahead of their answers."""

    def __init__(self, bootstrap: str, client_id: str = "wire-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.client_id = client_id
        self.correlation_id = 0
        self._sent: list[tuple[int, int, int]] = []  # (correlation id, api key, version) in flight

    def _recv_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return bytes(data)

    def send(self, body: Request, version: int) -> None:
        self.correlation_id += 1
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=self.correlation_id,
            client_id=self.client_id,
        )
        self.sock.sendall(encode_request(header, body))
        self._sent.append((self.correlation_id, body.API_KEY, version))

    def receive(self) -> Any:
        correlation_id, api_key, version = self._sent.pop(0)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        header, response = decode_response(self._recv_exact(size), api_key, version)
        assert header.correlation_id == correlation_id
        return response

    def call(self, body: Request, version: int) -> Any:
        assert not self._sent, "answers still pending"
        self.send(body, version)
        return self.receive()

    def close(self) -> None:
        self.sock.close()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocol version 0 + ConsumerProtocolSubscription v0 (what JoinGroup metadata carries)."""
    return struct.pack(">h", 0) + codec.encode(ConsumerProtocolSubscription(topics=list(topics)), 0)


def assignment(topic: str, partitions: list[int]) -> bytes:
    body = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=partitions)]
    )
    return struct.pack(">h", 0) + codec.encode(body, 0)
