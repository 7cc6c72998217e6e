"""The /metrics endpoint of a broker with ``metrics.listener`` on port 0, scraped after real clients produced
and consumed: exact counts, Kafka's (JMX exporter's) names, parsed with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tidelog.server.broker import Broker
from tidelog.server.config import load_broker_config
from tidelog.server.config.errors import ConfigError

TOPIC = "observed"
MESSAGES = 50
CONSUMED = 30
GROUP = "metrics-group"


@dataclass
class Running:
    broker: Broker
    loop: asyncio.AbstractEventLoop
    data: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        port = self.broker.metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples


def run_broker(data: Path, **overrides: str) -> Iterator[Running]:
    config, _ = load_broker_config(
        None, {"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0", **overrides}
    )
    started = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        broker = Broker(config)
        stop = asyncio.Event()
        holder["broker"], holder["loop"], holder["stop"] = broker, asyncio.get_running_loop(), stop
        await broker.start()
        started.set()
        await stop.wait()
        await broker.stop()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(30)
    loop = holder["loop"]
    assert isinstance(loop, asyncio.AbstractEventLoop)
    broker = holder["broker"]
    assert isinstance(broker, Broker)
    try:
        yield Running(broker, loop, data)
    finally:
        stop = holder["stop"]
        assert isinstance(stop, asyncio.Event)
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A broker with metrics on; MESSAGES produced to TOPIC, CONSUMED of them consumed and committed."""
    yield from run_broker(tmp_path_factory.mktemp("metrics"), **{"metrics.listener": "http://127.0.0.1:0"})


@pytest.fixture(scope="module")
def traffic(observed: Running) -> Running:
    producer = Producer({"bootstrap.servers": observed.bootstrap, "linger.ms": 5})
    for i in range(MESSAGES):
        producer.produce(TOPIC, key=b"k%d" % i, value=b"value-%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": observed.bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen: list[bytes | None] = []
    while len(seen) < MESSAGES:
        message = consumer.poll(10)
        assert message is not None
        assert message.error() is None
        seen.append(message.value())
    assert seen == [b"value-%d" % i for i in range(MESSAGES)]
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, CONSUMED)], asynchronous=False)
    consumer.close()
    return observed


def test_topic_counters_count_exactly_what_was_produced_and_sent(traffic: Running) -> None:
    samples = traffic.scrape()
    topic = (("topic", TOPIC),)
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == MESSAGES
    assert samples[("kafka_server_brokertopicmetrics_bytesin_total", topic)] > 0
    assert samples[("kafka_server_brokertopicmetrics_bytesout_total", topic)] > 0
    total = samples[("kafka_server_brokertopicmetrics_messagesin_total", ())]
    offsets = samples[
        ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "__consumer_offsets"),))
    ]
    assert offsets == 1  # the group's commit: Kafka counts appends to internal topics too
    assert total == MESSAGES + offsets  # the all-topics MBean


def test_requests_errors_and_latency_per_api(traffic: Running) -> None:
    samples = traffic.scrape()
    produced = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Produce"
    }
    assert sum(produced.values()) >= 1
    assert any(
        dict(labels)["request"] == "Fetch" for (name, labels) in samples if name.endswith("requests_total")
    )
    assert (
        samples[("kafka_network_requestmetrics_errors_total", (("error", "NONE"), ("request", "Produce")))]
        >= 1
    )
    count = samples[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))]
    assert count == sum(produced.values())
    for part in ("totaltimems", "requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems"):
        assert (
            f"kafka_network_requestmetrics_{part}",
            (("quantile", "0.99"), ("request", "Produce")),
        ) in samples


def test_log_gauges_match_the_disk(traffic: Running) -> None:
    samples = traffic.scrape()
    labels = (("partition", "0"), ("topic", TOPIC))
    on_disk = sum(f.stat().st_size for f in (traffic.data / f"{TOPIC}-0").glob("*.log"))
    assert samples[("kafka_log_log_size", labels)] == on_disk
    assert samples[("kafka_log_log_numlogsegments", labels)] == 1
    assert samples[("kafka_log_log_logendoffset", labels)] == MESSAGES


def test_group_lag_is_the_unconsumed_count(traffic: Running) -> None:
    samples = traffic.scrape()
    labels = (("consumergroup", GROUP), ("partition", "0"), ("topic", TOPIC))
    assert samples[("kafka_consumergroup_current_offset", labels)] == CONSUMED
    assert samples[("kafka_consumergroup_lag", labels)] == MESSAGES - CONSUMED


def test_broker_health_gauges(traffic: Running) -> None:
    samples = traffic.scrape()
    assert samples[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert samples[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert samples[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0
    assert (
        samples[("kafka_server_delayedoperationpurgatory_purgatorysize", (("delayedOperation", "Produce"),))]
        == 0
    )
    assert samples[("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),))] >= 0
    assert not [key for key in samples if key[0].startswith("kafka_server_quota_")]  # no quota ever set
    assert samples[("process_open_fds", ())] > 0


def test_only_metrics_is_served(observed: Running) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"http://127.0.0.1:{observed.broker.metrics_port}/other", timeout=10)
    raised.value.close()
    assert raised.value.code == 404


def test_off_when_unset(tmp_path: Path) -> None:
    for running in run_broker(tmp_path):
        assert running.broker.metrics is None
        assert running.broker.metrics_port is None
        assert running.broker.replicas.topic_metrics is None


@pytest.mark.parametrize(
    "value", ["https://127.0.0.1:9404", "127.0.0.1:9404", "http://127.0.0.1", "http://:9404", "http://h:1/x"]
)
def test_bad_listener_is_a_config_error_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_broker_config(None, {"metrics.listener": value})
    assert raised.value.key == "metrics.listener"


def test_a_taken_metrics_port_stops_the_broker_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tidelog",
                "broker",
                "--set",
                f"log.dirs={tmp_path}",
                "--set",
                "listeners=PLAINTEXT://127.0.0.1:0",
                "--set",
                f"metrics.listener=http://127.0.0.1:{port}",
            ],
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert f"cannot start broker: metrics.listener http://127.0.0.1:{port}: cannot bind" in stderr
    assert "Traceback" not in stderr
