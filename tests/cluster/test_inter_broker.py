"""Inter-broker traffic on a real cluster without faults: requests a broker sends to another (transaction
markers, a follower's fetches) never wait behind each other."""

from __future__ import annotations

import pytest
from tests.cluster.harness import Scenario

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]


def test_transaction_markers_do_not_hold_up_the_followers_fetches(scenario: Scenario) -> None:
    """A WriteTxnMarkers answer waits until the marker is replicated, which takes the follower's next
    fetch; a coordinator's broker that sent its markers on the connection its fetcher uses blocked that
    fetch behind the answer it waited for (responses come in order), until the leader dropped it from the
    ISR after replica.lag.time.max.ms. Transactions over every partition, committed while other producers
    keep the fetchers busy (so a marker often goes out while no fetch is in flight), must commit with
    every ISR untouched."""
    from confluent_kafka import Producer

    scenario.start()
    scenario.create_topic("ledger", 3)
    producer = Producer(
        {"bootstrap.servers": scenario.bootstrap, "transactional.id": "tx-markers", "log_level": 3}
    )
    producer.init_transactions(30)
    with scenario.workload("ledger", readers=[]) as load:
        load.wait_acked(200, "load before the transactions")
        for round_ in range(10):
            producer.begin_transaction()
            for partition in range(3):
                value = f"tx-{round_}-{partition}".encode()
                scenario.history.allow([value])
                producer.produce("ledger", value=value, partition=partition)
            producer.commit_transaction(60)
    scenario.verify()
    states = {p: scenario.state("ledger", p) for p in range(3)}
    assert {p: (len(s.isr), s.partition_epoch) for p, s in states.items()} == dict.fromkeys(
        range(3), (3, 0)
    ), states
