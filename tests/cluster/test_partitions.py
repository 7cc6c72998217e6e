"""Network partitions under continuous acks=all load (RF 3, min.insync.replicas 2): every member in a network
namespace of its own (``Scenario.start(network=True)``), cuts made and healed with nft drop rules.

- The leader cut from ZooKeeper and its followers, not from the clients: a zombie that still believes it
  leads. It must acknowledge nothing from the moment it lost leadership (a raw acks=all Produce sent to it
  is refused or times out), the producers move to the new leader, and once healed it rejoins as a
  follower, truncating what it appended alone.
- The leader cut from its followers only: it shrinks its ISR to itself by its own conditional write in
  ZooKeeper, then refuses acks=all writes (NOT_ENOUGH_REPLICAS); healed, the followers catch up and rejoin.
- One follower cut from everyone: the ISRs shrink without it, writes go on with the two others (same
  leaders, same leader epochs); healed, it rejoins.
- A random partition loop (:mod:`tests.cluster.partition_loop`), seeded by the scenario's seed.

Every scenario ends with the checker's full verification (:meth:`Scenario.verify`).
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest
from tests.cluster.harness import Scenario
from tests.cluster.partition_loop import partition_rounds, plan, run_partition_loop
from tests.cluster.workload import ProducerSpec

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ProduceRequest, ProduceResponse, RequestHeader
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.testing.netns import unavailable_reason

_NO_NETWORK = unavailable_reason()

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(_NO_NETWORK is not None, reason=f"network partitions: {_NO_NETWORK}"),
]

TOPIC = "orders"
PARTITIONS = 3
# a produce stuck on a leader that cannot commit is given up (and retried elsewhere) after 10 s, not 30 s
LOOP_REPLICA_LAG_MS = 4000
PRODUCERS = (
    ProducerSpec("idem", config=(("request.timeout.ms", 10_000),)),
    ProducerSpec("plain", idempotent=False, config=(("request.timeout.ms", 10_000),)),
)


def produce_directly(address: str, topic: str, partition: int, value: bytes, timeout_ms: int) -> ErrorCode:
    """One acks=all Produce (v9) of ``value`` sent to the broker at ``address`` itself, whatever the
    cluster's metadata says: the error code it answers (NONE: acknowledged)."""
    host, port = address.rsplit(":", 1)
    request = ProduceRequest(
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=partition,
                        records=encode_batch(
                            [SimpleRecord(key=None, value=value, timestamp=int(time.time() * 1000))]
                        ),
                    )
                ],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=ProduceRequest.API_KEY, request_api_version=9, correlation_id=1, client_id="probe"
    )
    with socket.create_connection((host, int(port)), timeout=timeout_ms / 1000 + 20) as sock:
        sock.sendall(encode_request(header, request))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, f"{address} closed the connection without answering the probe"
            data += chunk
    _header, response = decode_response(data[4:], ProduceRequest.API_KEY, 9)
    assert isinstance(response, ProduceResponse)
    return ErrorCode(response.responses[0].partition_responses[0].error_code)


def truncations(scenario: Scenario, broker: int, topic: str, partition: int) -> list[tuple[int, int]]:
    """(from, to) of every divergence truncation the broker logged for the partition."""
    pattern = re.compile(
        rf"{re.escape(topic)}-{partition}: the log diverged .* truncating from (\d+) to (\d+)"
    )
    text = scenario.c.broker(broker).log_path.read_text(errors="replace")
    return [(int(m.group(1)), int(m.group(2))) for m in pattern.finditer(text)]


def test_leader_cut_from_zookeeper_and_followers_acknowledges_nothing_and_rejoins(scenario: Scenario) -> None:
    """The leader loses ZooKeeper and its followers but keeps its clients. Its session expires, the
    controller elects new leaders, and it goes on believing it leads: acks=all writes sent to it are
    appended and never acknowledged (its high watermark cannot move, its ISR cannot shrink without
    ZooKeeper). The producers time out there and move to the new leaders. Healed, it learns its session
    expired, registers again, follows, and truncates what it appended alone."""
    c = scenario.start(network=True)
    scenario.create_topic(TOPIC, PARTITIONS)
    partition = scenario.rng.randrange(PARTITIONS)
    with scenario.workload(TOPIC, producers=PRODUCERS) as load:
        load.wait_acked(300, "before the partition")
        zombie = scenario.leader(TOPIC, partition)
        led = {p: s for p in range(PARTITIONS) if (s := scenario.state(TOPIC, p)).leader == zombie}
        for other in [*(b for b in c.brokers if b != zombie), "zk"]:
            c.cut(zombie, other)
        scenario.event(f"leader {zombie} cut from ZooKeeper and the other brokers (not from the clients)")
        for p, old in led.items():
            scenario.wait_new_leader(TOPIC, p, old)
        for attempt in range(2):
            value = f"zombie-probe-{attempt}".encode()  # never sent by the workload: must not survive
            answer = produce_directly(c.broker(zombie).bootstrap_servers, TOPIC, partition, value, 3000)
            scenario.event(f"acks=all Produce sent to the zombie {zombie}: {answer.name}")
            assert answer != ErrorCode.NONE, (
                f"broker {zombie} acknowledged an acks=all write to {TOPIC}-{partition} after it lost "
                f"its leadership\n{scenario.history.summary()}"
            )
        load.wait_acked(300, "on the new leaders, the zombie still cut off")
        c.heal_all()
        scenario.event("healed")
        scenario.wait_for(
            lambda: all(scenario.full_isr(TOPIC, p) for p in range(PARTITIONS)),
            f"broker {zombie} back in every ISR",
            90,
        )
        assert [p for p in led if scenario.leader(TOPIC, p) == zombie] == []
        load.wait_acked(200, "after the zombie rejoined")
    scenario.verify()
    cut = truncations(scenario, zombie, TOPIC, partition)
    assert cut, f"broker {zombie} never truncated what it appended as a zombie to {TOPIC}-{partition}"


def test_leader_cut_from_its_followers_shrinks_its_isr_and_refuses_acks_all(scenario: Scenario) -> None:
    """The leader keeps ZooKeeper and its clients but loses both followers. Nobody elects anyone: the
    leader itself shrinks the ISR to itself with a write conditional on its partition epoch, and from then
    on refuses acks=all writes (NOT_ENOUGH_REPLICAS: min.insync.replicas is 2), losing nothing it
    acknowledged. Healed, the followers catch up and the leader takes them back into the ISR."""
    c = scenario.start(network=True)
    scenario.create_topic(TOPIC, PARTITIONS)
    partition = scenario.rng.randrange(PARTITIONS)
    with scenario.workload(TOPIC, producers=PRODUCERS) as load:
        load.wait_acked(300, "before the partition")
        old = scenario.state(TOPIC, partition)
        leader = old.leader
        followers = [r for r in scenario.replicas(TOPIC, partition) if r != leader]
        for follower in followers:
            c.cut(leader, follower)
        scenario.event(f"leader {leader} of {TOPIC}-{partition} cut from its followers {followers}")
        scenario.wait_for(
            lambda: scenario.state(TOPIC, partition).isr == (leader,), f"the ISR to shrink to {leader}"
        )
        shrunk = scenario.state(TOPIC, partition)
        scenario.event(f"ISR shrank to {list(shrunk.isr)} (partition epoch {shrunk.partition_epoch})")
        assert (shrunk.leader, shrunk.leader_epoch) == (old.leader, old.leader_epoch)
        own_write = f"{TOPIC}-{partition}: ISR is now [{leader}]"
        scenario.wait_for(
            lambda: own_write in c.broker(leader).log_path.read_text(errors="replace"),
            f"broker {leader}'s log to say it wrote the shrink itself ({own_write!r})",
            10,
        )
        answers: list[ErrorCode] = []

        def refused() -> bool:
            # a probe appended before the leader applied the shrink fails once it did (..._AFTER_APPEND)
            # and may stay in the log; one sent after is refused before anything is written
            value = f"probe-{len(answers)}".encode()
            scenario.history.allow([value])
            answer = produce_directly(c.broker(leader).bootstrap_servers, TOPIC, partition, value, 5000)
            answers.append(answer)
            scenario.event(f"acks=all Produce to the lone leader {leader}: {answer.name}")
            return answer in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NONE)  # NONE: fails below

        scenario.wait_for(refused, "an acks=all produce refused with NOT_ENOUGH_REPLICAS", 30)
        assert ErrorCode.NONE not in answers, (
            f"broker {leader} acknowledged an acks=all write with an ISR of itself alone: "
            f"{[a.name for a in answers]}"
        )
        c.heal_all()
        scenario.event("healed")
        scenario.wait_for(
            lambda: all(scenario.full_isr(TOPIC, p) for p in range(PARTITIONS)),
            f"{followers} back in every ISR",
            90,
        )
        healed = scenario.state(TOPIC, partition)
        assert (healed.leader, healed.leader_epoch) == (old.leader, old.leader_epoch)
        load.wait_acked(300, "after the followers rejoined")
    scenario.verify()


def test_a_follower_cut_off_from_everyone_leaves_the_isr_and_rejoins(scenario: Scenario) -> None:
    """A broker that leads nothing is cut from ZooKeeper, the other brokers and the clients. Every ISR
    shrinks to the two others, the leaders stay (the controller, removing a dead broker's replicas from
    the ISRs, raises the leader epoch as Kafka's ZooKeeper controller does), and writes go on (two in-sync
    replicas are min.insync.replicas). Healed, it registers again, catches up and rejoins every ISR under
    the same leaders."""
    c = scenario.start(network=True)
    brokers = sorted(c.brokers)
    follower = scenario.rng.choice(brokers)
    leaders = [b for b in brokers if b != follower]
    # the two others lead in turn; the cut-off broker is the last replica of every partition
    assignment = [[leaders[p % 2], leaders[(p + 1) % 2], follower] for p in range(PARTITIONS)]
    create_topic_with_assignment(scenario, TOPIC, assignment)
    with scenario.workload(TOPIC, producers=PRODUCERS) as load:
        load.wait_acked(300, "before the partition")
        before = {p: scenario.state(TOPIC, p) for p in range(PARTITIONS)}
        assert [s.leader for s in before.values()] == [a[0] for a in assignment]
        c.isolate(follower)
        scenario.event(f"follower {follower} cut from everyone")
        scenario.wait_for(
            lambda: scenario.out_of_every_isr(TOPIC, follower),
            f"every ISR to shrink without {follower}",
        )
        load.wait_acked(300, f"with {follower} cut off")
        during = {p: scenario.state(TOPIC, p) for p in range(PARTITIONS)}
        assert {p: (s.leader, sorted(s.isr)) for p, s in during.items()} == {
            p: (s.leader, sorted(leaders)) for p, s in before.items()
        }
        c.heal_all()
        scenario.event("healed")
        scenario.wait_for(
            lambda: all(scenario.full_isr(TOPIC, p) for p in range(PARTITIONS)),
            f"{follower} back in every ISR",
            90,
        )
        after = {p: scenario.state(TOPIC, p) for p in range(PARTITIONS)}
        assert {p: s.leader for p, s in after.items()} == {p: s.leader for p, s in before.items()}
        load.wait_acked(300, f"after {follower} rejoined")
    scenario.verify()


def test_random_partition_loop(scenario: Scenario, request: pytest.FixtureRequest) -> None:
    """Seeded rounds of random partitions (:mod:`tests.cluster.partition_loop`), each healed and converged
    before the next, under continuous load; then the full verification. ``replica.lag.time.max.ms`` is
    below the session timeout, so that cuts between brokers shrink ISRs in some rounds, not in others."""
    c = scenario.start(config={"replica.lag.time.max.ms": LOOP_REPLICA_LAG_MS}, network=True)
    scenario.create_topic(TOPIC, PARTITIONS)
    faults = plan(scenario.rng, partition_rounds(request.config), sorted(c.brokers), PARTITIONS)
    with scenario.workload(TOPIC, producers=PRODUCERS) as load:
        load.wait_acked(300, "before the first partition")
        run_partition_loop(scenario, load, TOPIC, faults)
    scenario.verify()


def create_topic_with_assignment(scenario: Scenario, name: str, assignment: list[list[int]]) -> None:
    """Create ``name`` with an explicit replica assignment (the first replica leads) and wait until it is
    led with full ISRs and every broker's metadata has it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    expected = set(scenario.c.brokers)
    for broker in scenario.c.brokers.values():  # a broker checks the assignment against its own metadata
        scenario.wait_for(
            lambda broker=broker: (
                {
                    b.id
                    for b in AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
                    .list_topics(timeout=5)
                    .brokers.values()
                }
                == expected
            ),
            f"broker {broker.bootstrap_servers}'s metadata to list every broker",
        )
    admin = AdminClient({"bootstrap.servers": scenario.bootstrap, "log_level": 3})
    admin.create_topics(
        [NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)], operation_timeout=30
    )[name].result(60)
    scenario.topics[name] = len(assignment)
    scenario.wait_for(
        lambda: all(scenario.full_isr(name, p) for p in range(len(assignment))),
        f"topic {name}: every partition led with its full ISR",
    )
    scenario.wait_metadata(name, len(assignment))
