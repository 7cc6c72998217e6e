"""Losing ZooKeeper under continuous acks=all load: the leader's session expires (it stops leading,
registers again with a new broker epoch and rejoins), the controller's session expires (another
controller takes over with a higher epoch), and ZooKeeper itself is killed with kill -9 and restarted
(brokers keep serving what they lead meanwhile; afterwards the cluster converges)."""

from __future__ import annotations

import time

import pytest
from tests.cluster.harness import Scenario

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "orders"
PARTITIONS = 3


def broker_epoch(scenario: Scenario, broker: int) -> int:
    """The broker epoch: the czxid of its ephemeral registration."""
    _data, stat = scenario.zk().get(f"/brokers/ids/{broker}")
    return int(stat.czxid)


def test_leader_session_expiry(scenario: Scenario) -> None:
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    partition = scenario.rng.randrange(PARTITIONS)
    with scenario.workload(TOPIC) as load:
        load.wait_acked(300, "before the expiry")
        old = scenario.state(TOPIC, partition)
        led = [p for p in range(PARTITIONS) if scenario.leader(TOPIC, p) == old.leader]
        olds = {p: scenario.state(TOPIC, p) for p in led}
        epoch = broker_epoch(scenario, old.leader)
        c.expire_session(old.leader)
        scenario.event(f"leader {old.leader}'s session expired")
        for p in led:
            scenario.wait_new_leader(TOPIC, p, olds[p])
        scenario.wait_for(
            lambda: broker_epoch(scenario, old.leader) > epoch, f"broker {old.leader} registered again"
        )
        scenario.wait_for(
            lambda: all(scenario.full_isr(TOPIC, p) for p in led), f"{old.leader} back in the ISRs", 90
        )
        load.wait_acked(300, "after the rejoin")
    scenario.verify()


def test_controller_session_expiry(scenario: Scenario) -> None:
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    with scenario.workload(TOPIC) as load:
        load.wait_acked(300, "before the expiry")
        controller, epoch = scenario.controller(), scenario.controller_epoch()
        led = {
            p: scenario.state(TOPIC, p) for p in range(PARTITIONS) if scenario.leader(TOPIC, p) == controller
        }
        c.expire_session(controller)
        scenario.event(f"controller {controller}'s session expired")
        scenario.wait_for(
            lambda: scenario.controller_epoch() > epoch and scenario.controller() >= 0, "a new controller"
        )
        scenario.event(f"controller {scenario.controller()} at epoch {scenario.controller_epoch()}")
        for p, old in led.items():
            scenario.wait_new_leader(TOPIC, p, old)
        scenario.wait_converged()
        load.wait_acked(300, "after the new controller")
        # the new controller acts: a leader kill is handled
        victim = scenario.state(TOPIC, 0)
        c.kill(victim.leader)
        scenario.event(f"leader {victim.leader} killed")
        scenario.wait_new_leader(TOPIC, 0, victim)
        c.start_broker(victim.leader)
        load.wait_acked(200, "after a failover under the new controller")
    scenario.verify()


def test_zookeeper_kill_and_restart(scenario: Scenario) -> None:
    """kill -9 of ZooKeeper: leaders keep leading and acks=all writes keep being acknowledged (the ISR
    needs no change); after the restart every broker is registered and every ISR full again, and a
    failover still works."""
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    assert c.zookeeper is not None
    with scenario.workload(TOPIC, readers=["kafka-python"]) as load:
        load.wait_acked(300, "before the kill")
        before = {p: scenario.state(TOPIC, p) for p in range(PARTITIONS)}
        c.zookeeper.kill()
        down = scenario.rng.uniform(2.0, 8.0)
        scenario.event(f"ZooKeeper killed for {down:.1f} s")
        started = time.monotonic()
        load.wait_acked(300, "while ZooKeeper is down", timeout=down + 30)
        time.sleep(max(0.0, down - (time.monotonic() - started)))  # the outage's duration
        c.zookeeper.restart()
        scenario.event("ZooKeeper restarted")
        scenario.wait_converged()
        load.wait_acked(300, "after ZooKeeper is back")
        after = {p: scenario.state(TOPIC, p) for p in range(PARTITIONS)}
        leaders = {p: s.leader for p, s in after.items()}
        assert leaders == {p: s.leader for p, s in before.items()}, (
            f"{scenario.leadership()}\n{scenario.log_tails(40)}"
        )
        victim = after[0]
        c.kill(victim.leader)
        scenario.event(f"leader {victim.leader} killed")
        scenario.wait_new_leader(TOPIC, 0, victim)
        c.start_broker(victim.leader)
        load.wait_acked(200, "after a failover")
    scenario.verify()
