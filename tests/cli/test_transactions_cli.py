"""``tidelog transactions`` run as a user runs it (a subprocess) against a real broker with real transactions.

- ``list`` shows every transactional id with its coordinator, producer id and state (JSON asserted
  exactly), filtered by state and producer id on the broker, and by duration.
- ``describe`` shows an ongoing transaction's state, producer, timeout and partitions, and a completed one;
  an unknown transactional id is an error naming it (exit 1) after the known ones are printed.
- An unreachable broker exits 1, ``-X`` and an unknown state exit 2, all without a traceback.
"""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import Iterator

import pytest
from tests.cli import cli_support
from tests.cli.cli_support import ok, tidelog_cli
from tests.server.txn_support import TxnProducer, create_topics

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

failed = functools.partial(cli_support.failed, marker="Error")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("txn-cli")
    with Broker({}, data_dir=base / "data", run_dir=base / "run") as running:
        yield running


@pytest.fixture(scope="module")
def transactions(broker: Broker) -> Iterator[dict[str, int]]:
    """An ongoing transaction on two partitions ("open-txn") and a committed one ("done-txn");
    returns their producer ids."""
    create_topics(broker.bootstrap_servers, {"cli-t": 2})
    open_txn = TxnProducer("confluent-kafka", broker.bootstrap_servers, "open-txn", timeout_ms=120_000)
    done = TxnProducer("confluent-kafka", broker.bootstrap_servers, "done-txn")
    try:
        for producer in (open_txn, done):
            producer.init()
            producer.begin()
            producer.send("cli-t", 0, b"a")
            producer.send("cli-t", 1, b"b")
            producer.flush()
        done.commit()
        ids = {}
        for name in ("open-txn", "done-txn"):
            described = json.loads(
                ok(
                    tidelog_cli(
                        "transactions", "describe", name, "-b", broker.bootstrap_servers, "-f", "json"
                    )
                )
            )
            ids[name] = described[0]["producer_id"]
        yield ids
    finally:
        open_txn.close()
        done.close()


def test_list(broker: Broker, transactions: dict[str, int]) -> None:
    listed = json.loads(ok(tidelog_cli("transactions", "list", "-b", broker.bootstrap_servers, "-f", "json")))
    assert listed == [
        {
            "transactional_id": "done-txn",
            "coordinator": 1,
            "producer_id": transactions["done-txn"],
            "state": "CompleteCommit",
        },
        {
            "transactional_id": "open-txn",
            "coordinator": 1,
            "producer_id": transactions["open-txn"],
            "state": "Ongoing",
        },
    ]
    ongoing = ok(
        tidelog_cli(
            "transactions", "list", "-b", broker.bootstrap_servers, "--state", "ongoing", "-f", "plain"
        )
    )
    assert ongoing.split() == ["open-txn"]
    by_producer = ok(
        tidelog_cli(
            "transactions",
            "list",
            "-b",
            broker.bootstrap_servers,
            "--producer-id",
            str(transactions["done-txn"]),
            "-f",
            "plain",
        )
    )
    assert by_producer.split() == ["done-txn"]
    long_running = ok(
        tidelog_cli(
            "transactions", "list", "-b", broker.bootstrap_servers, "--min-duration", "3600000", "-f", "plain"
        )
    )
    assert long_running.split() == []
    table = ok(tidelog_cli("transactions", "list", "-b", broker.bootstrap_servers))
    assert "2 transaction(s)" in table
    assert "open-txn" in table
    assert "Ongoing" in table


def test_describe(broker: Broker, transactions: dict[str, int]) -> None:
    (described,) = json.loads(
        ok(tidelog_cli("transactions", "describe", "open-txn", "-b", broker.bootstrap_servers, "-f", "json"))
    )
    assert described["state"] == "Ongoing"
    assert described["coordinator"] == 1
    assert described["producer_epoch"] == 0
    assert described["timeout_ms"] == 120_000
    assert described["partitions"] == ["cli-t-0", "cli-t-1"]
    assert described["start_time_ms"] > 0
    assert described["duration_ms"] >= 0
    table = ok(
        tidelog_cli("transactions", "describe", "open-txn", "done-txn", "-b", broker.bootstrap_servers)
    )
    assert "CompleteCommit" in table
    assert "cli-t-0, cli-t-1" in table
    result = tidelog_cli("transactions", "describe", "done-txn", "nope", "-b", broker.bootstrap_servers)
    assert "done-txn" in result.stdout.decode()
    assert "transactional id 'nope' not found" in failed(result)


def test_errors(broker: Broker) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert "cannot reach broker at 127.0.0.1:" in failed(
        tidelog_cli("transactions", "list", "-b", f"127.0.0.1:{port}", "--timeout", "1")
    )
    assert (
        "security properties (sasl.mechanism, sasl.mechanisms, sasl.password, sasl.username, security.protocol, ssl.ca.location, ssl.certificate.location, ssl.endpoint.identification.algorithm, ssl.key.location, ssl.key.password), not a"
        in failed(tidelog_cli("transactions", "list", "-b", broker.bootstrap_servers, "-X", "a=b"), code=2)
    )
    failed(tidelog_cli("transactions", "list", "-b", broker.bootstrap_servers, "--state", "Bogus"), code=2)
    failed(tidelog_cli("transactions", "describe", "-b", broker.bootstrap_servers), code=2)
