"""Faust (faust-streaming) against tidelog: a word-count table survives a restart with an empty data dir.

The app (tests/support/faust_count_app.py) runs as a worker subprocess of ``.venv-faust/bin/python``
(``scripts/setup.sh test`` builds that virtualenv, keeping Faust's own aiokafka and mode-streaming out of
tidelog's). It counts words in a ``Table`` kept in memory and backed by a compacted changelog topic that
Faust creates, and writes every new count to an output topic. Faust uses a consumer group (with its own
partition assignor), CreateTopics with topic configs, and under ``exactly_once`` one transactional producer
per partition whose transactions carry the changelog writes and the group's offsets (TxnOffsetCommit).

Each test:

1. starts a worker and produces the first half of ``EVENTS`` (a known multiset of words, the word as the
   record key) to a 3-partition input topic;
2. once the group has committed the whole input and the output shows every event counted, stops the worker
   (SIGTERM: Faust stops its agents, flushes, commits and leaves the group, exit code 0);
3. waits until the broker's cleaner has compacted every changelog partition (tiny changelog segments), then
   starts a fresh worker with an empty data dir: it must restore the table from the changelog before it
   processes anything (Faust logs ``Done reading from changelog topics``);
4. produces the second half, waits as in 2., stops the worker, and checks exact outcomes: each word's
   output counts are exactly 1, 2, ..., its number of events (one output record per event: a count that
   restarted from zero or an event counted twice or never shows up here), the changelog's latest value per
   word (read_committed) is the word's total, and the changelog is ``cleanup.policy=compact`` with the
   ``segment.bytes`` the app asked for.

Faust's ``exactly_once`` makes the changelog writes and the offsets atomic (one transaction per input
partition); the app's other output is sent outside the transactions (Faust finds no transactional producer
for a topic it does not consume), so the output is exact here because both stops are graceful. Its changelog
transactions span several of the tiny segments, their markers often in the active segment: the cleaner has
to take them for decided, not open, to compact anything before the restart.

Not tested: a SIGKILLed worker under ``exactly_once``. Faust 0.15.3 may then count events twice: a commit
sends the offsets of the events acked so far in the same transaction as the changelog writes of events
processed but not acked yet (seen against tidelog: a committed transaction holding changelog writes for
input offsets 525-539 and the offset commit 525; faust-streaming issue #517). The killed worker's open
transaction is aborted and invisible to the restore, as it must be.
"""

from __future__ import annotations

import collections
import random
import signal
import subprocess
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
FAUST_VENV = REPO / ".venv-faust"
APP = REPO / "tests" / "support" / "faust_count_app.py"

# An eager cleaner, so the changelog (whose segments the app makes tiny) is compacted before the restart
# reads it back. The app's producer keeps its batches under BATCH_BYTES (a batch larger than a segment is
# refused).
BROKER_CONFIG = {
    "log.cleaner.min.cleanable.ratio": 0.01,
    "log.cleaner.backoff.ms": 100,
    "group.initial.rebalance.delay.ms": 0,
}
CHANGELOG_SEGMENT_BYTES = 4096
BATCH_BYTES = 2048
PARTITIONS = 3
APP_ID = "word-counter"
CHANGELOG = f"{APP_ID}-word_counts-changelog"
INPUT = "words"
OUTPUT = "word-counts"
SESSION_TIMEOUT_S = 10.0


def make_events() -> list[str]:
    """Words with different frequencies (word k appears 20 + 6k times), in a fixed shuffled order."""
    events = [f"word{k:02d}" for k in range(30) for _ in range(20 + 6 * k)]
    random.Random(20240611).shuffle(events)
    return events


EVENTS = make_events()
FIRST_RUN = len(EVENTS) // 2


def _faust_python() -> Path:
    return venv_python(FAUST_VENV, "run scripts/setup.sh test")


class FaustWorker:
    """One Faust worker process; each start gets a fresh data dir and its own log file."""

    def __init__(self, broker: Broker, workdir: Path, guarantee: str) -> None:
        self.broker = broker
        self.workdir = workdir
        self.guarantee = guarantee
        self.runs = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "worker-0.log"
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self.runs += 1
        self.log_path = self.workdir / f"worker-{self.runs}.log"
        data_dir = self.workdir / f"data-{self.runs}"
        assert not data_dir.exists()
        self._log = self.log_path.open("wb")
        command = [
            str(_faust_python()),
            str(APP),
            "--broker",
            self.broker.bootstrap_servers,
            "--app-id",
            APP_ID,
            "--data-dir",
            str(data_dir),
            "--input",
            INPUT,
            "--output",
            OUTPUT,
            "--partitions",
            str(PARTITIONS),
            "--guarantee",
            self.guarantee,
            "--changelog-segment-bytes",
            str(CHANGELOG_SEGMENT_BYTES),
            "--batch-bytes",
            str(BATCH_BYTES),
            "--session-timeout",
            str(SESSION_TIMEOUT_S),
        ]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)
        wait_for(lambda: "[^---Recovery]: Worker ready" in self.log(), "the Faust worker is ready", 60, self)

    def stop(self) -> int:
        assert self.process is not None
        self.check_running()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        finally:
            self._close()
        return code

    def check_running(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"Faust worker exited with {self.process.returncode}:\n{self.log_tail()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._close()


def produce(broker: Broker, words: list[str]) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, "log_level": 3}
    )
    errors: list[object] = []
    for word in words:
        producer.produce(INPUT, key=word.encode(), value=b"1", on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None] * len(words)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_word_counts_restored_from_the_changelog_are_exact(
    fresh_broker: Broker, tmp_path: Path, guarantee: str
) -> None:
    broker = fresh_broker
    _faust_python()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    for name, partitions in ((INPUT, PARTITIONS), (OUTPUT, 1)):
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=20)

    worker = FaustWorker(broker, tmp_path, guarantee)
    watcher = OutputWatcher(broker, OUTPUT, int)
    try:
        worker.start()
        assert "Restoring state from changelog topics" not in worker.log()
        produce(broker, EVENTS[:FIRST_RUN])
        wait_for(lambda: watcher.poll() == FIRST_RUN, "the first run counted its events", 60, worker)
        wait_for(
            lambda: committed_everything(broker, APP_ID, INPUT, PARTITIONS),
            "the first run committed its input",
            30,
            worker,
        )
        assert worker.stop() == 0, worker.log_tail()

        config = describe_topic_config(broker, CHANGELOG)
        assert (config["cleanup.policy"], config["segment.bytes"]) == (
            "compact",
            str(CHANGELOG_SEGMENT_BYTES),
        )
        wait_for(
            lambda: (
                len(cleaned_offsets(broker, CHANGELOG)) == PARTITIONS
                and all(o > 0 for o in cleaned_offsets(broker, CHANGELOG).values())
            ),
            "the cleaner compacted every changelog partition",
            30,
        )

        # A fresh worker with an empty data dir: restores the table from the changelog, then goes on.
        worker.start()
        log = worker.log()
        assert "Restoring state from changelog topics" in log
        assert "Done reading from changelog topics" in log
        produce(broker, EVENTS[FIRST_RUN:])
        wait_for(lambda: watcher.poll() == len(EVENTS), "the second run counted its events", 60, worker)
        wait_for(
            lambda: committed_everything(broker, APP_ID, INPUT, PARTITIONS),
            "the second run committed its input",
            30,
            worker,
        )
        assert worker.stop() == 0, worker.log_tail()
    finally:
        watcher.close()
        worker.close()

    expected = collections.Counter(EVENTS)
    # One output record per event: each word's counts are 1, 2, ... its number of events.
    counts: dict[str, list[int]] = collections.defaultdict(list)
    for key, value in read_records(broker, OUTPUT):
        assert value is not None
        counts[key.decode()].append(int(value))
    assert {word: len(seen) for word, seen in counts.items()} == dict(expected)
    assert all(seen == list(range(1, len(seen) + 1)) for seen in counts.values())
    # The changelog's latest value per word (keys and values JSON, Faust's default) is the word's total.
    table = dict(read_records(broker, CHANGELOG))
    assert table == {f'"{word}"'.encode(): str(n).encode() for word, n in expected.items()}
