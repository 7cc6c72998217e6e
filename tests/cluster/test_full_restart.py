"""The whole cluster killed with kill -9 under continuous acks=all load, and started again in each of the
six orders of its three brokers (three of them in CI, all six in the soak: see ``CI_ORDERS``).

Before the full kill one broker, the *stale* one, dies first (kill -9, its session expired at once) and
drops out of every ISR while writes go on without it; then the two others die back to back. They are
started again one by one in the order under test. A broker outside a partition's last ISR that is up
while no ISR member is must leave the partition offline (no unclean election): for as long as that
lasts, ZooKeeper shows no live leader for it and the broker's Metadata answers none. Once an ISR member
is back the partition is led again, the stale broker truncates and catches up, and nothing acknowledged
is lost.
"""

from __future__ import annotations

import itertools
import time

import pytest
from tests.cluster.harness import Scenario

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "orders"
PARTITIONS = 3
ORDERS = ["".join(p) for p in itertools.permutations("SXY")]
# CI restarts the stale broker first, second and last, once with X before Y and once with Y before X; the
# other three orders mirror these (X and Y are both ISR members, killed back to back, drawn at random from
# the two non-stale brokers) and run in the soak.
CI_ORDERS = ("SXY", "YSX", "XYS")


def metadata_leaders(scenario: Scenario, broker: int) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": scenario.c.broker(broker).bootstrap_servers, "log_level": 3})
    topic = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
    return {p: m.leader for p, m in topic.partitions.items()}


def assert_offline_meanwhile(
    scenario: Scenario, live: set[int], isr_at_death: dict[int, tuple[int, ...]]
) -> None:
    """While only ``live`` brokers run: every partition none of whose last ISR members is live has no live
    leader, in ZooKeeper and in every live broker's Metadata. Observed for a seeded while once the live
    controller has taken over (the fault's duration: the test waits for nothing to happen)."""
    offline = [p for p, isr in isr_at_death.items() if not live & set(isr)]
    if not offline:
        return
    controller = scenario.controller
    scenario.wait_for(lambda: controller() in live, f"a controller among {sorted(live)}")
    me = controller()
    epoch = scenario.controller_epoch()
    log_path = scenario.c.broker(me).log_path
    scenario.wait_for(
        lambda: (
            f"Ready to serve as the new controller with epoch {epoch}" in log_path.read_text(errors="replace")
        ),
        f"controller {me} ready",
    )
    until = time.monotonic() + scenario.rng.uniform(1.0, 2.0)
    checks = 0
    while time.monotonic() < until:
        for p in offline:
            state = scenario.state(TOPIC, p)
            assert state.leader not in live, (
                f"{TOPIC}-{p} elected {state.leader} (ISR {list(state.isr)}) though its last ISR was "
                f"{list(isr_at_death[p])}: an unclean election"
            )
        for b in live:
            answered = metadata_leaders(scenario, b)
            assert all(answered[p] < 0 for p in offline), f"broker {b} answers leaders {answered}"
        checks += 1
    scenario.event(f"partitions {offline} stayed offline with {sorted(live)} up ({checks} checks)")


@pytest.mark.parametrize(
    "order", [o if o in CI_ORDERS else pytest.param(o, marks=pytest.mark.soak) for o in ORDERS]
)
def test_full_cluster_kill_and_restart(scenario: Scenario, order: str) -> None:
    c = scenario.start()
    scenario.create_topic(TOPIC, PARTITIONS)
    # the stale broker is not the controller: a controller taking over does not touch the ISRs of
    # partitions whose leaders live (Kafka's too: their leaders shrink them after replica.lag.time.max.ms),
    # which would only make the test longer
    controller = scenario.controller()
    stale = scenario.rng.choice([b for b in (1, 2, 3) if b != controller])
    others = [b for b in (1, 2, 3) if b != stale]
    scenario.rng.shuffle(others)
    role = {"S": stale, "X": others[0], "Y": others[1]}
    with scenario.workload(TOPIC) as load:
        load.wait_acked(200, "before the faults")
        c.kill(stale)
        c.expire_session(stale)
        scenario.event(f"stale broker {stale} killed")
        scenario.wait_for(
            lambda: scenario.out_of_every_isr(TOPIC, stale),
            f"{stale} out of every ISR",
        )
        load.wait_acked(200, f"without {stale}")
        c.kill(role["X"])
        c.kill(role["Y"])
        scenario.event(f"brokers {role['X']} and {role['Y']} killed")
        for name in "XY":  # their registrations go now, not a session timeout later: restarts need that
            c.expire_session(role[name])
        isr_at_death = {p: scenario.state(TOPIC, p).isr for p in range(PARTITIONS)}
        scenario.event(f"ISRs at death {isr_at_death}")
        assert all(stale not in isr for isr in isr_at_death.values())
        live: set[int] = set()
        for name in order:
            broker = role[name]
            c.start_broker(broker)
            live.add(broker)
            scenario.event(f"{name} = broker {broker} started")
            assert_offline_meanwhile(scenario, live, isr_at_death)
        scenario.wait_converged()
        load.wait_acked(300, "after the restart")
    scenario.verify()
