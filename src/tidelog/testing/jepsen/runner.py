"""One checker run: a broker subprocess, the clients of :mod:`~tidelog.testing.jepsen.workers` writing
and reading while the :class:`~tidelog.testing.jepsen.faults.Nemesis` injects ``cycles`` faults, then the
final read back and the analysis.

Invariants:

- The idempotent producers write to topic ``jepsen`` (no transactions, so its consumers must read
  consecutive offsets), the transactional producer to ``jepsen-txn`` (read back and consumed
  read_committed).
- Producers run until the last fault healed, then finish what they have in flight; the read back happens
  with no fault running; consumers then drain to the final high watermarks.
- The same seed gives the same fault schedule and transaction decisions; :attr:`Report.rerun` is the
  command that repeats the run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing._broker import Broker, ConfigValue
from tidelog.testing.jepsen.analysis import Report, analyse
from tidelog.testing.jepsen.faults import Fault, Nemesis, fault_named
from tidelog.testing.jepsen.history import History
from tidelog.testing.jepsen.readback import read_back
from tidelog.testing.jepsen.workers import (
    AiokafkaProducer,
    ConfluentConsumer,
    ConfluentProducer,
    ConfluentTransactions,
    KafkaPythonProducer,
    Worker,
)

__all__ = ["CLIENTS", "TOPIC", "TXN_TOPIC", "RunConfig", "run"]

TOPIC = "jepsen"
TXN_TOPIC = "jepsen-txn"
# one partition each for the internal topics: a restart after kill -9 recovers every partition's log
SMALL_INTERNAL_TOPICS: dict[str, ConfigValue] = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
}
CLIENTS = ("confluent", "kafka-python", "aiokafka")
_PRODUCERS: dict[str, type[ConfluentProducer | KafkaPythonProducer | AiokafkaProducer]] = {
    "confluent": ConfluentProducer,
    "kafka-python": KafkaPythonProducer,
    "aiokafka": AiokafkaProducer,
}


@dataclass(slots=True)
class RunConfig:
    seed: int
    cycles: int = 5
    faults: Sequence[str | Fault] = ("kill9", "pause")
    clients: Sequence[str] = CLIENTS
    transactions: bool = True
    partitions: int = 3
    quiet: tuple[float, float] = (0.3, 1.5)
    broker_config: Mapping[str, ConfigValue] = field(default_factory=dict)
    startup_timeout: float = 120.0  # a restart recovers every log after kill -9; slow on a loaded machine

    def command(self) -> str:
        faults = ",".join(f if isinstance(f, str) else f.name for f in self.faults)
        return (
            f"python -m tidelog.testing.jepsen --seed {self.seed} --cycles {self.cycles} --faults {faults}"
            f" --clients {','.join(self.clients)}" + ("" if self.transactions else " --no-transactions")
        )


def run(
    config: RunConfig,
    *,
    data_dir: Path | None = None,
    history_path: Path | None = None,
    log: Callable[[str], None] = lambda _text: None,
) -> Report:
    """Run the scenario against a fresh broker (its data in ``data_dir`` if given) and analyse it."""
    rng = random.Random(config.seed)
    faults = [fault_named(f) if isinstance(f, str) else f for f in config.faults]
    unknown = set(config.clients) - set(_PRODUCERS)
    if unknown:
        raise ValueError(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
    history = History(config.seed)
    broker_config = {**SMALL_INTERNAL_TOPICS, **config.broker_config}
    with Broker(broker_config, data_dir=data_dir, startup_timeout=config.startup_timeout) as broker:
        bootstrap = broker.bootstrap_servers
        _create_topics(bootstrap, config.partitions)
        producers: list[Worker] = [
            _PRODUCERS[c](f"{c}-idem", history, bootstrap, TOPIC, config.partitions) for c in config.clients
        ]
        consumers = [
            ConfluentConsumer("reader", history, bootstrap, TOPIC, config.partitions, "read_uncommitted")
        ]
        if config.transactions:
            producers.append(
                ConfluentTransactions(
                    "confluent-txn",
                    history,
                    bootstrap,
                    TXN_TOPIC,
                    config.partitions,
                    random.Random(rng.random()),
                )
            )
            consumers.append(
                ConfluentConsumer(
                    "txn-reader", history, bootstrap, TXN_TOPIC, config.partitions, "read_committed"
                )
            )
        workers = [*producers, *consumers]
        for worker in workers:
            worker.start()
        _wait_for_traffic(history, len(config.clients))
        log(f"jepsen seed {config.seed}: {config.cycles} fault cycles against {bootstrap}")

        def record(text: str) -> None:
            history.fault(text)
            log(text)

        Nemesis(faults, rng, cycles=config.cycles, quiet=config.quiet).run(broker, record)
        for producer in producers:
            producer.stop()
        for producer in producers:
            producer.join(150)
        final = read_back(bootstrap, TOPIC, config.partitions)
        if config.transactions:
            final |= read_back(bootstrap, TXN_TOPIC, config.partitions, isolation_level="read_committed")
        for consumer in consumers:
            consumer.drain({p: final[(consumer.topic, p)].high_watermark for p in range(config.partitions)})
        for consumer in consumers:
            consumer.join(90)
    if history_path is not None:
        history.dump(history_path)
    report = analyse(history, final, gapless_topics={TOPIC}, committed_topics={TXN_TOPIC})
    report.rerun = config.command()
    for worker in workers:
        for error in worker.errors:
            report.add("fatal", error)
    return report


def _create_topics(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in (TOPIC, TXN_TOPIC)])
    for future in futures.values():
        future.result(30)


def _wait_for_traffic(history: History, producers: int, timeout: float = 30.0) -> None:
    """Until every idempotent producer had an acknowledgement (the clients are connected and warm)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len({op.client for op in history.ops if op.kind == "ack"}) >= producers:
            return
        time.sleep(0.05)
