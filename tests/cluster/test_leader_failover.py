"""Leader failover under continuous acks=all load (RF 3, min.insync.replicas 2): a leader's kill -9 and
its rejoin with truncation, a follower's restart followed by the leader's kill (KIP-101), and two
failovers back to back (KIP-279). Every scenario ends with the checker: nothing acknowledged lost or
moved, nothing invented, nothing read lost, idempotent producers once each, replicas byte-identical below
the high watermark."""

from __future__ import annotations

import re

import pytest
from tests.cli.cli_support import ok, tidelog_cli
from tests.cluster.harness import Scenario
from tests.cluster.workload import ProducerSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "orders"
PARTITIONS = 3


def truncations(scenario: Scenario, broker: int, topic: str, partition: int) -> list[tuple[int, int]]:
    """(from, to) of every divergence truncation the broker logged for the partition."""
    pattern = re.compile(
        rf"{re.escape(topic)}-{partition}: the log diverged .* truncating from (\d+) to (\d+)"
    )
    text = scenario.c.broker(broker).log_path.read_text(errors="replace")
    return [(int(m.group(1)), int(m.group(2))) for m in pattern.finditer(text)]


def test_leader_kill_then_restart_truncates_its_unreplicated_tail(scenario: Scenario) -> None:
    """The leader takes writes its followers never fetch (both paused, shorter than any timeout), dies
    with kill -9; a follower takes over without them, producers carry on, and the old leader, restarted,
    truncates its tail to the new leader's log and rejoins the ISR."""
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    partition = scenario.rng.randrange(PARTITIONS)
    with scenario.workload(TOPIC) as load:
        load.wait_acked(300, "before the fault")
        old = scenario.state(TOPIC, partition)
        followers = [b for b in old.isr if b != old.leader]
        for b in followers:
            c.pause(b)
        scenario.event(f"followers {followers} paused")
        sent = len(scenario.history.sent)
        load.wait_until(lambda: len(scenario.history.sent) >= sent + 60, "writes the followers miss", 30)
        c.kill(old.leader)
        scenario.event(f"leader {old.leader} killed")
        for b in followers:
            c.resume(b)
        new = scenario.wait_new_leader(TOPIC, partition, old)
        assert new.leader in followers
        load.wait_acked(300, "on the new leader")
        c.start_broker(old.leader)
        scenario.event(f"broker {old.leader} restarted")
        scenario.wait_for(lambda: scenario.full_isr(TOPIC, partition), f"broker {old.leader} back in the ISR")
        load.wait_acked(200, "after the rejoin")
        # ElectLeaders (KIP-460) through the CLI, under load: leadership goes back to the preferred replica
        preferred = scenario.replicas(TOPIC, partition)[0]
        moved = scenario.leader(TOPIC, partition) != preferred
        out = ok(tidelog_cli("leader-election", "--election-type", "preferred", "--topic", TOPIC,
                             "--partition", str(partition), "-b", scenario.bootstrap))  # fmt: skip
        name = f"{TOPIC}-{partition}"
        expected = (
            f"Successfully completed leader election (PREFERRED) for partitions {name}"
            if moved
            else f"Valid replica already elected for partitions {name}"
        )
        assert out.splitlines() == [expected]
        scenario.event(f"preferred leader election of {TOPIC}-{partition} (leader moved: {moved})")
        scenario.wait_for(
            lambda: scenario.leader(TOPIC, partition) == preferred, f"broker {preferred} leading"
        )
        load.wait_acked(100, "after the preferred leader election")
    scenario.verify()
    cut = truncations(scenario, old.leader, TOPIC, partition)
    assert cut, f"broker {old.leader} never truncated {TOPIC}-{partition}"
    assert all(to < start for start, to in cut), cut


def test_follower_restart_then_leader_kill_keeps_acknowledged_writes(scenario: Scenario) -> None:
    """KIP-101: a follower restarts (kill -9) and catches up; the moment it is back in the ISR the leader
    is killed. Whoever leads next must not have cut its log to a stale high watermark: every acknowledged
    write survives, and the replicas agree byte for byte."""
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    partition = scenario.rng.randrange(PARTITIONS)
    with scenario.workload(TOPIC) as load:
        load.wait_acked(300, "before the fault")
        old = scenario.state(TOPIC, partition)
        replicas = scenario.replicas(TOPIC, partition)
        # the follower next in assignment order after the leader: the one an election picks first
        order = replicas[replicas.index(old.leader) + 1 :] + replicas[: replicas.index(old.leader)]
        follower = order[0] if scenario.rng.random() < 0.75 else order[1]
        c.kill(follower)
        scenario.event(f"follower {follower} killed")
        c.start_broker(follower)
        scenario.event(f"follower {follower} restarted")
        scenario.wait_for(
            lambda: follower in scenario.state(TOPIC, partition).isr, f"{follower} back in the ISR"
        )
        current = scenario.state(TOPIC, partition)
        c.kill(current.leader)
        scenario.event(f"leader {current.leader} killed")
        scenario.wait_new_leader(TOPIC, partition, current)
        load.wait_acked(300, "on the new leader")
        c.start_broker(current.leader)
        scenario.wait_for(lambda: scenario.full_isr(TOPIC, partition), "the old leader back in the ISR")
        load.wait_acked(100, "after the rejoin")
    scenario.verify()


def test_two_failovers_back_to_back(scenario: Scenario) -> None:
    """KIP-279: the leader is killed, and the new leader right after its election; the last replica leads
    alone (acks=all producers wait: below min.insync.replicas), the two others come back, each truncating
    logs that diverged over more than one leader epoch, and the load carries on with nothing lost."""
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    partition = scenario.rng.randrange(PARTITIONS)
    with scenario.workload(TOPIC) as load:
        load.wait_acked(300, "before the faults")
        first = scenario.state(TOPIC, partition)
        c.kill(first.leader)
        scenario.event(f"leader {first.leader} killed")
        second = scenario.wait_new_leader(TOPIC, partition, first)
        c.kill(second.leader)
        scenario.event(f"new leader {second.leader} killed")
        third = scenario.wait_new_leader(TOPIC, partition, second)
        assert third.isr == (third.leader,)
        for broker in scenario.rng.sample([first.leader, second.leader], 2):
            c.start_broker(broker)
            scenario.event(f"broker {broker} restarted")
        scenario.wait_for(lambda: scenario.full_isr(TOPIC, partition), "both back in the ISR", 90)
        load.wait_acked(300, "after both rejoined")
    scenario.verify()


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_leader_kill_with_python_clients(scenario: Scenario, client: str) -> None:
    """The same failover seen by kafka-python / aiokafka producers (acks=all, idempotent) and a
    kafka-python reader, beside a confluent-kafka producer."""
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    producers = [ProducerSpec("py", client=client, rate=100), ProducerSpec("idem", rate=100)]
    with scenario.workload(TOPIC, producers=producers, readers=["kafka-python"]) as load:
        load.wait_acked(100, "before the fault", producer="py")
        partition = scenario.rng.randrange(PARTITIONS)
        old = scenario.state(TOPIC, partition)
        c.kill(old.leader)
        scenario.event(f"leader {old.leader} killed")
        scenario.wait_new_leader(TOPIC, partition, old)
        load.wait_acked(200, "after the failover", producer="py")
        c.start_broker(old.leader)
        scenario.wait_for(lambda: scenario.full_isr(TOPIC, partition), "the old leader back in the ISR")
    scenario.verify()
