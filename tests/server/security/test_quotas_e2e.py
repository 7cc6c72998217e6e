"""Client quotas against a real broker: the ``tidelog configs`` quota commands, two producers of which one is
quota'd by client id (it is held near its quota, the other keeps its throughput), a consumer with a
``consumer_byte_rate``, and a burst of topic creations refused by ``controller_mutation_rate``.

The broker measures over 2 windows of 1 s (``quota.window.num=2``), so a fresh client's first burst is
allowed 1 s of quota rather than Kafka's default 10 s, and the rates are taken after a 1 s warm-up.
Bounds are generous (0.5x-1.6x the quota): this is behaviour, not speed.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, ThrottleEvent, TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from tests.cli.cli_support import failed, ok, tidelog_cli
from tests.server.security.test_sasl_broker import SASL_CONFIG, client_config
from tests.support.users import add_user_offline

from tidelog.client.wire import WireClient
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from tidelog.server.zookeeper_process import free_port
from tidelog.testing import Broker, broker

QUOTA = 200 * 1024
VALUE = b"x" * 10_000
WARM_UP_S = 1.0
MEASURE_S = 3.0


@pytest.fixture(scope="module")
def running() -> Iterator[Broker]:
    metrics = f"http://127.0.0.1:{free_port()}"
    config = {
        "quota.window.num": 2,
        "quota.window.size.seconds": 1,
        "num.partitions": 1,
        "metrics.listener": metrics,
    }
    with broker(config) as b:
        yield b


def _quota_series(b: Broker, name: str) -> dict[tuple[str, str, str], float]:
    """``kafka_server_quota_<name>`` from the broker's /metrics, by (resource, user, clientId)."""
    with urllib.request.urlopen(b.config["metrics.listener"] + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.labels["resource"], s.labels["user"], s.labels["clientId"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == f"kafka_server_quota_{name}"
    }


def _configs(b: Broker, *args: str) -> str:
    return ok(tidelog_cli("configs", "--bootstrap-server", b.bootstrap_servers, *args))


def test_cli_sets_describes_and_removes_quotas(running: Broker) -> None:
    _configs(
        running,
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--alter",
        "--add-config",
        "producer_byte_rate=1024,request_percentage=12.5",
    )
    _configs(
        running,
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
        "--alter",
        "--add-config",
        "consumer_byte_rate=2048",
    )
    assert _configs(
        running, "--entity-type", "users", "--entity-name", "alice", "--describe"
    ).splitlines() == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0, request_percentage=12.5"
    ]
    assert _configs(running, "--entity-type", "users", "--describe").splitlines() == [
        "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0, request_percentage=12.5"
    ]
    assert _configs(running, "--user", "alice", "--client-defaults", "--describe").splitlines() == [
        "Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=2048.0"
    ]
    message = failed(
        tidelog_cli(
            "configs",
            "--bootstrap-server",
            running.bootstrap_servers,
            "--user",
            "bob",
            "--alter",
            "--add-config",
            "producer_byte_rate=-5",
        )
    )
    assert (
        "cannot alter the quotas of user-principal 'bob': Quota producer_byte_rate must be greater than 0"
        in message
    )
    _configs(
        running, "--user", "alice", "--alter", "--delete-config", "producer_byte_rate,request_percentage"
    )
    _configs(
        running, "--user", "alice", "--client-defaults", "--alter", "--delete-config", "consumer_byte_rate"
    )
    assert _configs(running, "--entity-type", "users", "--describe") == ""


class _Meter:
    """Bytes acknowledged after the warm-up, and the throttle times the client was told."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.bytes = 0
        self.throttles: list[float] = []

    def count(self, nbytes: int) -> None:
        if time.monotonic() - self.start >= WARM_UP_S:
            self.bytes += nbytes

    def throttled(self, event: ThrottleEvent) -> None:
        self.throttles.append(event.throttle_time)

    def rate(self) -> float:
        return self.bytes / MEASURE_S


def _produce_flat_out(b: Broker, client_id: str, meter: _Meter, extra: dict[str, str] | None = None) -> None:
    producer = Producer(
        {
            **(extra or {}),
            "bootstrap.servers": b.bootstrap_servers,
            "client.id": client_id,
            "linger.ms": 5,
            "throttle_cb": meter.throttled,
            "queue.buffering.max.kbytes": 4096,
            "batch.size": 65536,
        }
    )

    def delivered(err: object, msg: object) -> None:
        if err is None:
            meter.count(len(VALUE))

    deadline = meter.start + WARM_UP_S + MEASURE_S
    while time.monotonic() < deadline:
        try:
            producer.produce("quota-produce", VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.poll(0.2)
    producer.purge()
    producer.flush(5)


def test_a_quotad_producer_is_held_near_its_quota_and_the_other_is_not(running: Broker) -> None:
    _configs(
        running,
        "--entity-type",
        "clients",
        "--entity-name",
        "slow",
        "--alter",
        "--add-config",
        f"producer_byte_rate={QUOTA}",
    )
    slow, fast = _Meter(), _Meter()
    threads = [
        threading.Thread(target=_produce_flat_out, args=(running, "slow", slow)),
        threading.Thread(target=_produce_flat_out, args=(running, "fast", fast)),
    ]
    for t in threads:
        t.start()
    # while they run, the scrape shows Kafka's Produce sensors of each client id (no user label: the
    # quota is by client id); polled, as the throttle-time average only covers the quota window
    throttle: dict[tuple[str, str, str], float] = {}
    while any(t.is_alive() for t in threads) and not throttle.get(("Produce", "", "slow")):
        throttle, byte_rate = _quota_series(running, "throttle_time"), _quota_series(running, "byte_rate")
        threads[0].join(0.2)
    for t in threads:
        t.join(60)
    assert throttle[("Produce", "", "slow")] > 0
    assert throttle.get(("Produce", "", "fast"), 0) == 0
    assert byte_rate[("Produce", "", "slow")] > 0
    assert byte_rate[("Produce", "", "fast")] > 0
    print(
        f"slow producer {slow.rate() / 1024:.0f} KiB/s (quota {QUOTA // 1024}), fast {fast.rate() / 1024:.0f} KiB/s"
    )
    assert 0.5 * QUOTA <= slow.rate() <= 1.6 * QUOTA
    assert fast.rate() > 3 * QUOTA
    assert slow.throttles
    assert max(slow.throttles) > 0
    assert not fast.throttles


def test_a_quotad_consumer_is_held_near_its_quota(running: Broker) -> None:
    # batches well below what one quota window allows (quota * (samples - 1) * window = 200 KiB here): a
    # batch larger than that is sent whole, counted, throttled and taken back, again and again (Kafka too)
    producer = Producer(
        {
            "bootstrap.servers": running.bootstrap_servers,
            "client.id": "filler",
            "linger.ms": 5,
            "batch.size": 65536,
        }
    )
    for _ in range(int(QUOTA * (WARM_UP_S + MEASURE_S) * 3 / len(VALUE))):
        producer.produce("quota-consume", VALUE)
        producer.poll(0)
    assert producer.flush(30) == 0
    del producer
    _configs(running, "--client", "reader", "--alter", "--add-config", f"consumer_byte_rate={QUOTA}")
    meter = _Meter()
    consumer = Consumer(
        {
            "bootstrap.servers": running.bootstrap_servers,
            "client.id": "reader",
            "group.id": "quota-readers",
            "auto.offset.reset": "earliest",
            "throttle_cb": meter.throttled,
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 65536,  # small steps: a 3 s measurement is not all quantization
        }
    )
    consumer.assign([TopicPartition("quota-consume", 0, 0)])
    try:
        first = consumer.poll(30)  # the clock starts at the first record: setting up is not measured
        assert first is not None
        assert first.error() is None
        meter.start = time.monotonic()
        while time.monotonic() < meter.start + WARM_UP_S + MEASURE_S:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                meter.count(len(message.value() or b""))
    finally:
        consumer.close()
    print(f"quota'd consumer {meter.rate() / 1024:.0f} KiB/s (quota {QUOTA // 1024})")
    assert 0.5 * QUOTA <= meter.rate() <= 1.6 * QUOTA
    assert meter.throttles


def test_a_burst_of_topic_creations_is_refused_over_the_mutation_rate(running: Broker) -> None:
    _configs(running, "--client", "mutator", "--alter", "--add-config", "controller_mutation_rate=1")
    topics = [
        CreateTopicsRequest.CreatableTopic(name=f"burst-{i}", num_partitions=4, replication_factor=1)
        for i in range(5)
    ]
    host, port = running.bootstrap_servers.rsplit(":", 1)
    with WireClient(host, int(port), timeout=30, client_id="mutator") as wire:
        response = wire.call(
            CreateTopicsRequest(topics=topics, timeout_ms=10_000), 7, expect=CreateTopicsResponse
        )
    # 11 tokens (11 windows of 1 s at 1 partition/s): 4 + 4 + 4 taken, then the bucket is negative
    assert [t.error_code for t in response.topics] == [0, 0, 0] + [ErrorCode.THROTTLING_QUOTA_EXCEEDED] * 2
    assert response.topics[3].error_message == "The throttling quota has been exceeded."
    assert response.throttle_time_ms > 0


def test_a_user_quota_holds_that_user_whatever_its_client_id(tmp_path: Path) -> None:
    """SASL users alice and bob, both with client id "shared": a quota on users/alice holds alice only."""
    for user in ("admin", "alice", "bob"):
        add_user_offline(tmp_path, user, f"{user}-secret")
    with Broker(
        {**SASL_CONFIG, "quota.window.num": 2, "quota.window.size.seconds": 1}, data_dir=tmp_path
    ) as b:
        with WireClient(b.host, b.port, timeout=30, sasl=("PLAIN", "admin", "admin-secret")) as wire:
            entity = [AlterClientQuotasRequest.EntityData(entity_type="user", entity_name="alice")]
            op = AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=QUOTA)
            answer = wire.call(
                AlterClientQuotasRequest(
                    entries=[AlterClientQuotasRequest.EntryData(entity=entity, ops=[op])]
                ),
                expect=AlterClientQuotasResponse,
            )
        assert [e.error_code for e in answer.entries] == [0]
        alice, bob = _Meter(), _Meter()
        threads = [
            threading.Thread(
                target=_produce_flat_out,
                args=(b, "shared", meter, client_config(b, "PLAIN", user, f"{user}-secret")),
            )
            for user, meter in (("alice", alice), ("bob", bob))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    print(
        f"user alice {alice.rate() / 1024:.0f} KiB/s (quota {QUOTA // 1024}), bob {bob.rate() / 1024:.0f} KiB/s"
    )
    assert 0.5 * QUOTA <= alice.rate() <= 1.6 * QUOTA
    assert bob.rate() > 3 * QUOTA
    assert alice.throttles
    assert not bob.throttles
