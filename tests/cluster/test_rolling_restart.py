"""A rolling controlled restart under continuous acks=all load, as the README's procedure does it: each broker
in turn is stopped with SIGTERM (a controlled shutdown moves its leaderships to other ISR members first),
started again and waited for until it is back in every ISR (ZooKeeper's view, then ``tidelog brokers list``
agreeing) before the next. With replication factor 3 and ``min.insync.replicas`` = RF - 1 = 2:

- producers (confluent-kafka idempotent and not, aiokafka) see no failed delivery at all: every value sent
  was acknowledged (the errors they met on the way were retriable and retried);
- nothing acknowledged is lost (the checker, replicas compared on disk);
- the confluent-kafka reader was given every record of every partition exactly once, in offset order, and
  the idempotent producer's records sit in each partition in the order it sent them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.checker import check_order
from tests.cluster.harness import Scenario
from tests.cluster.workload import ProducerSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "orders"
PARTITIONS = 3
TIDELOG = str(Path(sys.executable).parent / "tidelog")


def brokers_list(scenario: Scenario) -> list[dict[str, Any]]:
    """``tidelog brokers list --json --zookeeper ...``'s brokers, as an operator checks between restarts."""
    out = subprocess.run(
        [
            TIDELOG,
            "brokers",
            "list",
            "--json",
            "-b",
            scenario.bootstrap,
            "--zookeeper",
            scenario.c.connect_string,
        ],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    brokers: list[dict[str, Any]] = json.loads(out)["brokers"]
    return brokers


def every_partition(scenario: Scenario) -> list[tuple[str, int]]:
    """Every partition of the cluster, the internal topics' included (ZooKeeper's view)."""
    zk = scenario.zk()
    return [
        (topic, int(p))
        for topic in scenario.all_topics()
        for p in zk.get_children(f"/brokers/topics/{topic}/partitions")
    ]


def test_rolling_controlled_restart(scenario: Scenario) -> None:
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    producers = [
        ProducerSpec("idem"),
        ProducerSpec("plain", idempotent=False),
        ProducerSpec("aio", client="aiokafka", rate=100),
    ]
    order = [1, 2, 3]
    scenario.rng.shuffle(order)
    with scenario.workload(TOPIC, producers=producers) as load:
        load.wait_acked(300, "before the restarts")
        for broker in order:
            led = [p for p in range(PARTITIONS) if scenario.leader(TOPIC, p) == broker]
            c.stop(broker)
            scenario.event(f"broker {broker} stopped (controlled)")
            moved = {p: scenario.state(TOPIC, p) for p in led}
            assert all(s.leader not in (broker, -1) for s in moved.values()), (
                f"a controlled shutdown of {broker} left partitions without a live leader: {moved}"
            )
            c.start_broker(broker)
            scenario.event(f"broker {broker} started")
            scenario.wait_for(
                lambda: all(scenario.full_isr(t, p) for t, p in every_partition(scenario)),
                f"broker {broker} back in every ISR",
                90,
            )
            scenario.wait_for(
                lambda: all(b["alive"] and b["out_of_isr_partitions"] == [] for b in brokers_list(scenario)),
                f"brokers list to show broker {broker} alive and in every ISR",
            )
            load.wait_acked(200, f"after broker {broker}'s restart")
    assert scenario.history.failure_counts() == {}
    assert scenario.history.fatal == []
    for spec in producers:
        assert scenario.history.acked_by(spec.name) == load.sent_by[spec.name], spec.name
    final = scenario.verify()
    check_order(scenario.history, final, in_send_order=["idem"])
