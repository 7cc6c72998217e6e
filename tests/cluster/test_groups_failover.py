"""Consumer groups across the failover of their coordinator's broker, under continuous load: the classic
protocol and KIP-848's (``group.protocol=consumer``), two confluent-kafka members committing synchronously
as they go. The coordinator's broker (the leader of the group's ``__consumer_offsets`` partition) is
killed with kill -9; the group coordinator moves with that partition's leadership. Afterwards:

- every offset commit acknowledged before the kill is still committed (OffsetFetch from the new
  coordinator answers at least it, for every partition);
- every acknowledged message was consumed by the group at least once, nothing consumed was never sent;
- once the members close, the committed offsets are the high watermarks;
- the checker's data properties hold for the topic (what the members read is still there).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tests.cluster.harness import Scenario
from tests.cluster.workload import ClientThread, ProducerSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "events"
PARTITIONS = 6
GROUP = "billing"
OFFSETS_TOPIC = "__consumer_offsets"
KIP848_CONFIG = {
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": 10_000,
    "group.consumer.min.session.timeout.ms": 10_000,
}


class Member(ClientThread):
    """One group member in a thread: consumes, commits synchronously every 50 messages or 0.5 s."""

    def __init__(self, scenario: Scenario, name: str, protocol: str, commits: dict[int, int]) -> None:
        super().__init__(f"member-{name}")
        self.scenario = scenario
        self.name = name
        self.protocol = protocol
        self.commits = commits  # shared: partition -> highest acknowledged committed offset
        self.consumed: list[bytes] = []
        self.commit_errors: list[str] = []
        self._lock = threading.Lock()

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.scenario.bootstrap,
            "group.id": GROUP,
            "client.id": self.name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 2000,
            "log_level": 3,
        }
        if self.protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            config |= {"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000}
        return config

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        history = self.scenario.history
        consumer = Consumer(self._config())
        consumer.subscribe([TOPIC])
        uncommitted = 0
        last_commit = time.monotonic()

        def commit() -> None:
            nonlocal uncommitted, last_commit
            try:
                result = consumer.commit(asynchronous=False) or []
            except KafkaException as exc:
                self.commit_errors.append(exc.args[0].name())
                return
            finally:
                last_commit = time.monotonic()
            uncommitted = 0
            with self._lock:
                for tp in result:
                    if tp.error is None and tp.offset >= 0:
                        self.commits[tp.partition] = max(self.commits.get(tp.partition, 0), tp.offset)
                    elif tp.error is not None:
                        self.commit_errors.append(tp.error.name())

        try:
            while not self.stopping.is_set():
                for msg in consumer.consume(100, 0.2):
                    if msg.error():
                        continue
                    history.record_read(msg.topic(), msg.partition(), msg.offset(), msg.value())
                    self.consumed.append(msg.value())
                    uncommitted += 1
                if uncommitted and (uncommitted >= 50 or time.monotonic() - last_commit >= 0.5):
                    commit()
            if uncommitted:
                commit()
        finally:
            consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_continues_across_its_coordinators_failover(scenario: Scenario, protocol: str) -> None:
    c = scenario.start(config=KIP848_CONFIG if protocol == "consumer" else None)
    scenario.create_topic(TOPIC, PARTITIONS)
    commits: dict[int, int] = {}
    members = [Member(scenario, f"m{i}", protocol, commits) for i in range(2)]
    with scenario.workload(TOPIC, producers=[ProducerSpec("idem", rate=200)], readers=[]) as load:
        for member in members:
            member.start()
        load.wait_acked(300, "before the fault")
        scenario.wait_for(
            lambda: len(commits) == PARTITIONS and all(m.consumed for m in members),
            "both members consuming and every partition committed",
        )
        coordinator_partition = scenario.coordinator_partition(OFFSETS_TOPIC, GROUP)
        old = scenario.state(OFFSETS_TOPIC, coordinator_partition)
        before = dict(commits)
        c.kill(old.leader)
        scenario.event(f"group coordinator {old.leader} killed (commits acknowledged: {before})")
        scenario.wait_new_leader(OFFSETS_TOPIC, coordinator_partition, old)

        def survived() -> bool:
            now = scenario.committed_offsets(GROUP, TOPIC)
            return all(now.get(p, -1) >= offset for p, offset in before.items())

        scenario.wait_for(survived, f"the new coordinator to answer at least the commits {before}", 60)
        load.wait_acked(300, "after the failover")
        progressed = dict(commits)
        scenario.wait_for(
            lambda: sum(commits.values()) > sum(progressed.values()) + 100, "the group committing again"
        )
        c.start_broker(old.leader)
        scenario.event(f"broker {old.leader} restarted")
        load.wait_acked(200, "after the restart")
    acked = {a.value for a in scenario.history.acks}
    consumed: set[bytes] = set()

    def all_consumed() -> bool:
        consumed.clear()
        for member in members:
            consumed.update(member.consumed)
        return acked <= consumed

    scenario.wait_for(all_consumed, "the group to consume every acknowledged message", 90)
    ends = {p: max(scenario.history.reads[(TOPIC, p)]) + 1 for p in range(PARTITIONS)}
    scenario.wait_for(lambda: commits == ends, f"the group's commits to reach {ends}", 30)
    for member in members:
        member.stop()
    assert consumed <= set(scenario.history.sent), sorted(consumed - set(scenario.history.sent))[:5]
    logs = scenario.verify()
    assert ends == {p: logs[(TOPIC, p)].high_watermark for p in range(PARTITIONS)}
    assert scenario.committed_offsets(GROUP, TOPIC) == ends
