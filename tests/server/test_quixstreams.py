"""quixstreams against tidelog: a stateful per-key count survives a restart with an empty state directory.

The app (tests/support/quix_count_app.py) runs as a subprocess of ``.venv-quix/bin/python`` (quixstreams
pins confluent-kafka < 2.13; ``scripts/setup.sh test`` builds that virtualenv). It counts events per key in
a state store backed by a compacted changelog topic that quixstreams creates, and writes every new count to
an output topic. Each test:

1. starts the app, then produces ``EVENTS`` JSON events over ``KEYS`` keys to a 3-partition input topic at
   a steady pace in the background;
2. once the app's output shows ``FIRST_RUN_EVENTS`` counted events, stops it (SIGTERM: quixstreams commits
   its checkpoint and exits 0; or SIGKILL while it hangs in the middle of a transaction, ``--pause-after``);
3. waits until the broker's cleaner has compacted the changelog (small segments, see ``BROKER_CONFIG``),
   deletes the app's state directory and starts it again: it must restore its counts from the changelog
   (quixstreams logs ``Recovery successful`` per changelog partition) and process the rest;
4. once the group has committed the whole input, stops the app and reads the output topic
   (read_committed): each key's counts must be exactly 1, 2, ..., its number of events, one record per
   event. A count that restarted from zero, double-counted a replayed event, lost one or leaked from an
   aborted transaction shows up here.

It also checks the changelog topic is ``cleanup.policy=compact`` (DescribeConfigs), that its latest value
per key is the key's final count, and how many output records were written at all (read_uncommitted):
exactly one per event after a graceful stop, more after a SIGKILL (the killed transaction's, aborted).

At-least-once is exact only with a graceful stop; exactly-once is exact even after SIGKILL (the
transaction open at the kill is aborted once the broker times it out, and its offsets with it).
"""

from __future__ import annotations

import collections
import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.server.stream_apps import (
    OutputWatcher,
    cleaned_offsets,
    committed_everything,
    describe_topic_config,
    read_records,
    venv_python,
    wait_for,
)

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
QUIX_VENV = REPO / ".venv-quix"
APP = REPO / "tests" / "support" / "quix_count_app.py"

# Tiny segments by default (so the changelog quixstreams creates rolls often) and an eager cleaner, so the
# changelog is compacted before the restart reads it back. The test's own topics get ordinary segments.
# The app's producer keeps its batches under BATCH_BYTES (a batch larger than a segment is refused).
BROKER_CONFIG = {
    "log.segment.bytes": 4096,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "log.cleaner.backoff.ms": 100,
    "group.initial.rebalance.delay.ms": 0,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
}
TOPIC_CONFIG = {"segment.bytes": str(1 << 20)}
BATCH_BYTES = 2048
EVENTS = 20_000
KEYS = 50
PARTITIONS = 3
EVENTS_PER_SECOND = 2_000
FIRST_RUN_EVENTS = 8_000  # stop the first run once its output shows about this many processed events
# quixstreams writes each key's latest state once per checkpoint; checkpoints this often in the first run
# fill several changelog segments for the cleaner.
FIRST_RUN_COMMIT_INTERVAL = 0.05
TRANSACTION_TIMEOUT_MS = 5_000
# A SIGKILLed member stays in the group until its session times out; the restarted app waits for that.
SESSION_TIMEOUT_MS = 6_000


def _quix_python() -> Path:
    return venv_python(QUIX_VENV, "run scripts/setup.sh test")


class QuixApp:
    """One run of the count app; its output goes to ``log_path``."""

    def __init__(self, broker: Broker, workdir: Path, names: dict[str, str], guarantee: str) -> None:
        self.broker = broker
        self.state_dir = workdir / "state"
        self.workdir = workdir
        self.names = names
        self.guarantee = guarantee
        self.runs = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "app-0.log"
        self._log: IO[bytes] | None = None
        self._start_args = (1.0, 0)
        self.seek_race_restarts = 0

    def start(self, commit_interval: float = 1.0, pause_after: int = 0) -> None:
        self._start_args = (commit_interval, pause_after)
        self.runs += 1
        self.log_path = self.workdir / f"app-{self.runs}.log"
        self._log = self.log_path.open("wb")
        command = [
            str(_quix_python()),
            str(APP),
            "--broker",
            self.broker.bootstrap_servers,
            "--group",
            self.names["group"],
            "--state-dir",
            str(self.state_dir),
            "--input",
            self.names["input"],
            "--output",
            self.names["output"],
            "--guarantee",
            self.guarantee,
            "--commit-interval",
            str(commit_interval),
            "--pause-after",
            str(pause_after),
            "--transaction-timeout-ms",
            str(TRANSACTION_TIMEOUT_MS),
            "--batch-bytes",
            str(BATCH_BYTES),
            "--session-timeout-ms",
            str(SESSION_TIMEOUT_MS),
        ]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)

    def stop(self, signum: signal.Signals) -> int:
        assert self.process is not None
        self.check_running()
        self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout=60)
        finally:
            self._close()
        return code

    def check_running(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None and self._restart_after_seek_race():
            return
        if self.process.poll() is not None:
            pytest.fail(f"quixstreams app exited with {self.process.returncode}:\n{self.log_tail()}")

    def _restart_after_seek_race(self) -> bool:
        """Restart the app (as its supervisor would) when quixstreams lost its own recovery race.

        quixstreams' recovery seeks a changelog partition right after assigning it; librdkafka
        refuses a seek (``_STATE``, "Erroneous state") until the partition's fetcher has started,
        which waits for the group's OffsetFetch answer. On a loaded machine that answer can come
        after the seek, and the app exits with code 1 before it has processed or committed
        anything. It is the client's race (the broker answered correctly); recovery is idempotent,
        so a restart is what a user's supervisor does. At most twice, and only for this error.
        """
        assert self.process is not None
        text = self.log_path.read_text(errors="replace")
        lost_race = (
            self.process.returncode == 1
            and "_prime_changelog_partition" in text
            and "Failed to seek to offset" in text
            and "Erroneous state" in text
        )
        if not lost_race or self.seek_race_restarts >= 2:
            return False
        self.seek_race_restarts += 1
        self._close()
        self.start(*self._start_args)
        return True

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._close()


class EventProducer(threading.Thread):
    """Produces the input in the background at a steady pace while the app runs, so that the app works on
    all partitions at once (given a backlog, it would drain one partition after the other) and is always
    in the middle of something when it is stopped."""

    def __init__(self, broker: Broker, topic: str) -> None:
        super().__init__(name="event-producer", daemon=True)
        self.broker = broker
        self.topic = topic
        self.errors: list[object] = []
        self.expected: collections.Counter[str] = collections.Counter(event_key(i) for i in range(EVENTS))

    def run(self) -> None:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": self.broker.bootstrap_servers,
                "linger.ms": 5,
                "log_level": 3,
            }
        )

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                self.errors.append(err)

        started = time.monotonic()
        for i in range(EVENTS):
            producer.produce(
                self.topic,
                key=event_key(i).encode(),
                value=json.dumps({"i": i}).encode(),
                on_delivery=on_delivery,
            )
            if i % 100 == 99:
                producer.poll(0)
                time.sleep(max(0.0, started + (i + 1) / EVENTS_PER_SECOND - time.monotonic()))
        if producer.flush(60) != 0:
            self.errors.append("flush timed out")


def event_key(i: int) -> str:
    return f"key-{(i * 7919) % KEYS:02d}"  # every key in turn, in a scrambled order


CASES = [
    pytest.param("at-least-once", signal.SIGTERM, id="at-least-once-sigterm"),
    pytest.param("exactly-once", signal.SIGTERM, id="exactly-once-sigterm"),
    pytest.param("exactly-once", signal.SIGKILL, id="exactly-once-sigkill"),
]


@pytest.mark.parametrize(("guarantee", "stop_signal"), CASES)
def test_counts_restored_from_the_changelog_are_exact(
    fresh_broker: Broker, tmp_path: Path, guarantee: str, stop_signal: signal.Signals
) -> None:
    broker = fresh_broker
    _quix_python()
    names = {"input": "events", "output": "counts", "group": "counter"}
    changelog = f"changelog__{names['group']}--{names['input']}--default"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    for name, partitions in ((names["input"], PARTITIONS), (names["output"], 1)):
        admin.create_topics([NewTopic(name, partitions, 1, config=TOPIC_CONFIG)])[name].result(timeout=20)

    app = QuixApp(broker, tmp_path, names, guarantee)
    watcher = OutputWatcher(
        broker, names["output"], lambda value: json.loads(value)["count"], "read_uncommitted"
    )
    events = EventProducer(broker, names["input"])
    try:
        # First run: stopped once it has counted part of the input, while events keep arriving.
        # SIGKILL: the app hangs in the middle of a transaction, its output already written (seen below).
        killed = stop_signal == signal.SIGKILL
        app.start(commit_interval=FIRST_RUN_COMMIT_INTERVAL, pause_after=FIRST_RUN_EVENTS if killed else 0)
        wait_for(lambda: "The application started" in app.log_path.read_text(), "the app started", 60, app)
        events.start()
        wait_for(lambda: watcher.poll() >= FIRST_RUN_EVENTS, "the first run's output", 60, app)
        code = app.stop(stop_signal)
        assert code == (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL), app.log_tail()
        assert watcher.poll() < EVENTS // 2

        assert describe_topic_config(broker, changelog)["cleanup.policy"] == "compact"
        wait_for(
            lambda: (
                len(cleaned_offsets(broker, changelog)) == PARTITIONS
                and all(o > 0 for o in cleaned_offsets(broker, changelog).values())
            ),
            "the cleaner compacted every changelog partition",
            30,
        )

        # Second run from an empty state directory: restores from the changelog, then finishes.
        shutil.rmtree(app.state_dir)
        app.start()
        events.join(timeout=60)
        assert not events.is_alive()
        assert not events.errors, events.errors[:3]
        wait_for(
            lambda: committed_everything(broker, names["group"], names["input"], PARTITIONS),
            "the app committed the whole input",
            90,
            app,
        )
        assert app.stop(signal.SIGTERM) == 0, app.log_tail()
        log = app.log_path.read_text(errors="replace")
        restored = [
            p
            for p in range(PARTITIONS)
            if f'Recovery successful for <RecoveryPartition "{changelog}[{p}]">' in log
        ]
        assert restored == list(range(PARTITIONS)), log[-4000:]
    finally:
        watcher.close()
        app.close()

    # Exactly one committed output record per event: each key's counts are 1, 2, ... its number of events
    # (nothing lost, nothing counted twice, no aborted record visible, no count starting again from 1).
    counts: dict[str, list[int]] = collections.defaultdict(list)
    for key, value in read_records(broker, names["output"]):
        assert value is not None
        counts[key.decode()].append(json.loads(value)["count"])
    assert {key: len(seen) for key, seen in counts.items()} == dict(events.expected)
    assert all(seen == list(range(1, len(seen) + 1)) for seen in counts.values())
    # A graceful stop commits what the app wrote; a SIGKILL leaves an open transaction whose records (the
    # first run's last, all written again by the second run) were aborted: visible only read_uncommitted.
    written = len(read_records(broker, names["output"], "read_uncommitted"))
    if killed:
        assert written > EVENTS
    else:
        assert written == EVENTS
    # The changelog holds each key's final count as its latest state value; its keys are quixstreams'
    # "<message key as JSON>|<state key as JSON>".
    state = {
        json.loads(key.split(b"|", 1)[0]): json.loads(value) if value is not None else None
        for key, value in read_records(broker, changelog)
    }
    assert state == dict(events.expected)
