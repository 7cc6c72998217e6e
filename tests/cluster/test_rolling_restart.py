"""A rolling controlled restart under continuous acks=all load: each broker in turn is stopped with SIGTERM
(a controlled shutdown moves its leaderships to other ISR members first), started again and waited for
until it is back in every ISR. Producers (confluent-kafka idempotent and not, aiokafka) see no failed
delivery at all (the errors they met on the way were retriable and retried), and nothing is lost."""

from __future__ import annotations

import pytest
from tests.cluster.harness import Scenario
from tests.cluster.workload import ProducerSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "orders"
PARTITIONS = 3


def test_rolling_controlled_restart(scenario: Scenario) -> None:
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
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
                lambda: all(scenario.full_isr(TOPIC, p) for p in range(PARTITIONS)),
                f"broker {broker} back in every ISR",
                90,
            )
            load.wait_acked(200, f"after broker {broker}'s restart")
    assert scenario.history.failure_counts() == {}
    scenario.verify()
