"""KIP-848 consumer groups with librdkafka (confluent-kafka, ``group.protocol=consumer``) against a broker.

Each consumer is its own process (``kip848_member.py``), so it can be killed:

- two members split a 6-partition topic 3/3; a third joins and each has 2; the third closes (its
  heartbeat with epoch -1) and its partitions move at once; one is SIGKILLed and its partitions move
  once its session (``group.consumer.session.timeout.ms``) expires;
- consumption resumes exactly after the committed offsets (OffsetCommit v9 with the member epoch) when
  the group's only member restarts, and after the broker itself is killed and restarted;
- ``AdminClient.describe_consumer_groups`` (ConsumerGroupDescribe) and ``list_consumer_groups`` show the
  group, its type, state, members and assignments;
- ``group.remote.assignor=range`` gives each member a range.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

SESSION_MS = 6000
BROKER_CONFIG = {
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.session.timeout.ms": SESSION_MS,
}
MEMBER_SCRIPT = Path(__file__).with_name("kip848_member.py")
ROOT = Path(__file__).resolve().parents[2]

Partition = tuple[str, int]


class Member:
    """One consumer process; its JSON events are collected by a reader thread."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **config: Any) -> None:
        payload = {"bootstrap": bootstrap, "group": group, "topics": topics, "config": config}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in cleanup()
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), json.dumps(payload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()
        with self._cond:
            self.events.append({"e": "exit"})
            self._cond.notify_all()

    @property
    def assignment(self) -> set[Partition]:
        with self._cond:
            for event in reversed(self.events):
                if event["e"] == "assignment":
                    return {(t, p) for t, p in event["partitions"]}
        return set()

    def messages(self) -> list[tuple[str, int, int, str | None]]:
        with self._cond:
            return [(e["t"], e["p"], e["o"], e["v"]) for e in self.events if e["e"] == "msg"]

    def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], Any], timeout: float = 30, what: str = ""
    ) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = predicate(self.events)
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"member never {what}: last events {self.events[-10:]}\n{self.stderr()}")
                self._cond.wait(min(left, 0.5))

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        self.process.stdin.flush()

    def commit(self) -> dict[str, Any]:
        before = sum(1 for e in list(self.events) if e["e"] == "committed")
        self.send({"cmd": "commit"})
        event: dict[str, Any] = self.wait_for(
            lambda events: [e for e in events if e["e"] == "committed"][before:][:1], what="committed"
        )[0]
        return event

    def close(self) -> None:
        if self.process.poll() is None:
            self.send({"cmd": "close"})
            self.wait_for(lambda events: any(e["e"] in ("closed", "exit") for e in events), what="closed")
            self.process.wait(timeout=30)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-3000:]

    def cleanup(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr.close()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    try:
        yield started
    finally:
        for member in started:
            member.cleanup()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def wait_split(
    group: list[Member], everything: set[Partition], timeout: float = 30, what: str = ""
) -> list[set[Partition]]:
    """Until the members' assignments are disjoint, cover ``everything`` and differ in size by at most one."""
    deadline = time.monotonic() + timeout
    while True:
        assignments = [m.assignment for m in group]
        sizes = [len(a) for a in assignments]
        union = set().union(*assignments)
        if union == everything and sum(sizes) == len(everything) and max(sizes) - min(sizes) <= 1:
            return assignments
        if time.monotonic() > deadline:
            pytest.fail(f"no even split ({what}): {assignments}\n" + "\n".join(m.stderr() for m in group))
        time.sleep(0.1)


def test_members_split_join_close_and_die(broker: Broker, members: list[Member]) -> None:
    topic, group = "kip848-membership", "kip848-membership"
    create_topic(broker.bootstrap_servers, topic, 6)
    everything = {(topic, p) for p in range(6)}

    def start() -> Member:
        member = Member(broker.bootstrap_servers, group, [topic])
        members.append(member)
        return member

    a, b = start(), start()
    assert sorted(len(x) for x in wait_split([a, b], everything, what="3/3")) == [3, 3]
    c = start()
    assert [len(x) for x in wait_split([a, b, c], everything, what="2/2/2")] == [2, 2, 2]
    c.close()
    closed_at = time.monotonic()
    assert sorted(len(x) for x in wait_split([a, b], everything, what="3/3 after a close")) == [3, 3]
    assert time.monotonic() - closed_at < SESSION_MS / 1000  # the leave heartbeat, not a timeout
    b.kill()
    killed_at = time.monotonic()
    wait_split([a], everything, timeout=SESSION_MS / 1000 + 20, what="everything after a SIGKILL")
    assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1.5  # b's session had to run out


def test_consumption_resumes_after_the_commit(fresh_broker: Broker, members: list[Member]) -> None:
    topic, group = "kip848-resume", "kip848-resume"
    bootstrap = fresh_broker.bootstrap_servers
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3, 30)
    first = Member(bootstrap, group, [topic])
    members.append(first)
    first.wait_for(lambda events: sum(e["e"] == "msg" for e in events) >= 30, what="consumed 30")
    committed = first.commit()
    assert committed["error"] is None
    assert committed["offsets"] == [[topic, 0, 10], [topic, 1, 10], [topic, 2, 10]]
    first.close()

    produce(bootstrap, topic, 3, 30)  # m0..m29 again, at offsets 10..19 of each partition
    second = Member(bootstrap, group, [topic])
    members.append(second)
    second.wait_for(lambda events: sum(e["e"] == "msg" for e in events) >= 30, what="consumed the next 30")
    time.sleep(1)  # nothing else may arrive
    got = sorted((p, o) for _, p, o, _ in second.messages())
    assert got == [(p, o) for p in range(3) for o in range(10, 20)]  # exactly after the commit
    assert second.commit()["offsets"] == [[topic, 0, 20], [topic, 1, 20], [topic, 2, 20]]
    second.close()

    # The broker dies (SIGKILL) and comes back: the group and its offsets were in __consumer_offsets.
    fresh_broker.kill()
    fresh_broker.restart()
    bootstrap = fresh_broker.bootstrap_servers
    produce(bootstrap, topic, 3, 3)
    third = Member(bootstrap, group, [topic])
    members.append(third)
    third.wait_for(lambda events: sum(e["e"] == "msg" for e in events) >= 3, timeout=60, what="consumed 3")
    time.sleep(1)
    assert sorted((p, o) for _, p, o, _ in third.messages()) == [(0, 20), (1, 20), (2, 20)]
    third.close()


def test_describe_and_list_consumer_groups(broker: Broker, members: list[Member]) -> None:
    topic, group = "kip848-describe", "kip848-describe"
    create_topic(broker.bootstrap_servers, topic, 4)
    everything = {(topic, p) for p in range(4)}
    a = Member(broker.bootstrap_servers, group, [topic], **{"client.id": "alpha"})
    b = Member(broker.bootstrap_servers, group, [topic], **{"client.id": "beta"})
    members.extend([a, b])
    wait_split([a, b], everything, what="2/2")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    deadline = time.monotonic() + 20
    while True:  # the coordinator is Stable once both members acknowledged their assignments
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        if described.state == ConsumerGroupState.STABLE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert described.group_id == group
    assert described.type == ConsumerGroupType.CONSUMER
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "uniform"
    by_client = {m.client_id: m for m in described.members}
    assert set(by_client) == {"alpha", "beta"}
    assigned = {
        client: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
        for client, m in by_client.items()
    }
    assert assigned == {"alpha": a.assignment, "beta": b.assignment}
    listed = admin.list_consumer_groups().result(timeout=30)
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1
    assert mine[0].type == ConsumerGroupType.CONSUMER
    assert mine[0].state == ConsumerGroupState.STABLE


def test_range_assignor(broker: Broker, members: list[Member]) -> None:
    topic, group = "kip848-range", "kip848-range"
    create_topic(broker.bootstrap_servers, topic, 5)
    everything = {(topic, p) for p in range(5)}
    a = Member(broker.bootstrap_servers, group, [topic], **{"group.remote.assignor": "range"})
    b = Member(broker.bootstrap_servers, group, [topic], **{"group.remote.assignor": "range"})
    members.extend([a, b])
    assignments = wait_split([a, b], everything, what="ranges")
    ranges = sorted(sorted(p for _, p in x) for x in assignments)
    assert ranges == [[0, 1, 2], [3, 4]]  # consecutive ranges, the first one partition more
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    with contextlib.suppress(Exception):
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert described.partition_assignor == "range"
