"""The log cleaner's I/O throttle: :class:`Throttler` on a fake clock (every sleep computed exactly),
``log.cleaner.io.max.bytes.per.second`` parsed and wired into the cleaner task, and a throttled cleaning
aborted in the middle of its sleep when the task is cancelled."""

from __future__ import annotations

import asyncio
import itertools
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.storage.cleaner_support import CompactedLog, random_updates, read_records

from tidelog.server.config import BrokerConfig, ConfigError, ConfigSource, describe_broker_configs
from tidelog.server.log_cleaner_task import THROTTLE_CHECK_INTERVAL_MS, LogCleanerTask, cleaner_config
from tidelog.server.throttler import Throttler
from tidelog.storage.cleaner import CleanerConfig

MS = 1_000_000
"""Nanoseconds per millisecond."""
KEY = "log.cleaner.io.max.bytes.per.second"


class FakeTime:
    """A nanosecond clock that only moves when told to, or by the sleeps it records."""

    def __init__(self) -> None:
        self.ns = 0
        self.sleeps: list[float] = []

    def clock(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ns += round(seconds * 1_000_000_000)


def throttler(rate: float, fake: FakeTime, interval_ms: int = 300) -> Throttler:
    return Throttler(rate, check_interval_ms=interval_ms, clock_ns=fake.clock)


def test_no_check_until_the_interval_has_passed_then_sleep_to_the_desired_rate() -> None:
    fake = FakeTime()
    limit = throttler(1000, fake)
    fake.ns = 100 * MS
    limit.maybe_throttle(4000, fake.sleep)
    fake.ns = 300 * MS  # exactly the interval: not more than it, no check yet
    limit.maybe_throttle(6000, fake.sleep)
    assert fake.sleeps == []
    fake.ns = 300 * MS + 1
    limit.maybe_throttle(0, fake.sleep)
    # 10000 bytes at 1000 B/s take 10 s; 300 ms of them have passed.
    assert fake.sleeps == [9.7]
    assert fake.ns == 10_000 * MS + 1
    # The next period starts after the sleep: 300 ms later, 300 bytes is exactly the rate, no sleep.
    fake.ns += 300 * MS + 1
    limit.maybe_throttle(300, fake.sleep)
    assert fake.sleeps == [9.7]
    # ... and that check started another period: 900 bytes in the next 301.5 ms is too fast.
    fake.ns += 301 * MS + MS // 2
    limit.maybe_throttle(900, fake.sleep)
    assert fake.sleeps == [9.7, 0.599]  # 900 ms - 301 ms (elapsed truncated to whole milliseconds)


def test_sleep_rounds_half_up_as_javas_math_round() -> None:
    fake = FakeTime()
    limit = throttler(2000, fake)
    fake.ns = 301 * MS + 900_000  # 301.9 ms: counts as 301
    limit.maybe_throttle(999, fake.sleep)  # 499.5 ms of budget - 301 = 198.5 ms -> 199 (not banker's 198)
    assert fake.sleeps == [0.199]


def test_a_sleep_that_rounds_to_nothing_is_skipped_but_the_period_restarts() -> None:
    fake = FakeTime()
    limit = throttler(4000, fake)
    fake.ns = 300 * MS + 100_000  # 300.1 ms
    limit.maybe_throttle(1201, fake.sleep)  # 4002 B/s: 300.25 ms of budget - 300 = 0.25 ms -> 0
    assert fake.sleeps == []
    fake.ns += 300 * MS + 1
    limit.maybe_throttle(1300, fake.sleep)  # measured from the restart: 325 ms of budget - 300 ms
    assert fake.sleeps == [0.025]


def test_reports_of_nothing_neither_check_nor_restart_the_period() -> None:
    fake = FakeTime()
    limit = throttler(1000, fake)
    fake.ns = 1000 * MS
    limit.maybe_throttle(0, fake.sleep)
    fake.ns = 1100 * MS
    limit.maybe_throttle(2000, fake.sleep)  # the period still began at 0: 2000 ms of budget - 1100 ms
    assert fake.sleeps == [0.9]


def test_kafkas_default_rate_never_sleeps_and_a_tiny_rate_sleeps_at_most_timeout_max() -> None:
    fake = FakeTime()
    unlimited = throttler(sys.float_info.max, fake)
    fake.ns = 301 * MS
    unlimited.maybe_throttle(2**62, fake.sleep)
    assert fake.sleeps == []
    tiny = throttler(5e-324, fake)
    fake.ns += 301 * MS
    tiny.maybe_throttle(1, fake.sleep)
    assert fake.sleeps == [threading.TIMEOUT_MAX]


def test_a_sleep_cut_short_still_ends_the_period() -> None:
    fake = FakeTime()
    limit = throttler(1000, fake)
    asked: list[float] = []
    fake.ns = 500 * MS
    limit.maybe_throttle(5000, asked.append)  # the sleep returns at once (an abort), the clock stays
    assert asked == [4.5]
    fake.ns = 801 * MS
    limit.maybe_throttle(400, asked.append)  # the period began at 500 ms: 400 ms of budget - 301 ms
    assert asked == [4.5, 0.099]


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_the_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        Throttler(rate)


# ---- the broker config -------------------------------------------------------------------------------


def test_the_config_defaults_to_kafkas_unlimited_and_reaches_the_cleaner_task(tmp_path: Path) -> None:
    default = BrokerConfig.from_mapping({})
    assert default.log_cleaner_io_max_bytes_per_second == sys.float_info.max
    (entry,) = describe_broker_configs(default, [KEY])
    assert (entry.value, entry.source) == ("1.7976931348623157E308", ConfigSource.DEFAULT_CONFIG)
    configured = BrokerConfig.from_mapping({KEY: " 1.5e6"})
    assert cleaner_config(configured).io_max_bytes_per_second == 1_500_000.0
    (entry,) = describe_broker_configs(configured, [KEY])
    assert (entry.value, entry.source) == ("1.5e6", ConfigSource.STATIC_BROKER_CONFIG)
    log = CompactedLog(tmp_path)
    try:
        task = LogCleanerTask(log.manager, cleaner_config(configured), clock_ms=lambda: 0)
        assert task.throttler.desired_rate_per_sec == 1_500_000.0
        assert task.throttler.check_interval_ms == THROTTLE_CHECK_INTERVAL_MS == 300
    finally:
        log.close()


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("0", "Value must be greater than 0"),
        ("-5", "Value must be greater than 0"),
        ("fast", "Not a number of type DOUBLE"),
        ("Infinity", "Not a number of type DOUBLE"),
    ],
)
def test_the_config_must_be_a_positive_finite_double(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"for configuration {KEY}: {problem}") as info:
        BrokerConfig.from_mapping({KEY: raw})
    assert info.value.key == KEY


# ---- the cleaner task ------------------------------------------------------------------------------------


class SpyThrottler(Throttler):
    """A throttler whose sleeps are recorded and announced before they begin, and last at most a minute (a
    sleep the task fails to cut short fails the test rather than hanging it)."""

    def __init__(self, rate: float, clock_ns: Callable[[], int]) -> None:
        super().__init__(rate, check_interval_ms=THROTTLE_CHECK_INTERVAL_MS, clock_ns=clock_ns)
        self.observed: list[int] = []
        self.sleeps: list[float] = []
        self.sleeping = threading.Event()

    def maybe_throttle(self, observed: int, sleep: Callable[[float], object] = time.sleep) -> None:
        def announced(seconds: float) -> object:
            self.sleeps.append(seconds)
            self.sleeping.set()
            return sleep(min(seconds, 60.0))

        self.observed.append(observed)
        super().maybe_throttle(observed, announced)


def test_cancelling_the_task_cuts_a_throttled_sleep_short(tmp_path: Path) -> None:
    log = CompactedLog(tmp_path)
    random_updates(log, random.Random(3), keys=10, records=120, now_ms=0)
    log.settle(0, roll=True)
    first_segment = min(log.partition_dir.glob("*.log")).stat().st_size
    # 1 byte/s on a clock that moves one second per reading: the first read is checked and owes ~1000 s.
    clock = itertools.count(0, 1000 * MS).__next__
    spy = SpyThrottler(1.0, clock)
    task = LogCleanerTask(log.manager, CleanerConfig(), clock_ms=lambda: 0, throttler=spy)

    async def scenario() -> None:
        run = asyncio.ensure_future(task.run_once())
        assert await asyncio.to_thread(spy.sleeping.wait, 30)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(run, 30)

    try:
        asyncio.run(scenario())
        assert spy.observed == [first_segment]  # the header scan's first read, then nothing more
        assert spy.sleeps == [first_segment - 1.0]  # first_segment s of budget - 1 s elapsed
        assert task.cleanings == 0
        assert not list(log.partition_dir.glob("*.cleaned"))
        assert read_records(log.log) == log.written
        assert task.cleaner.clean_once(0)  # the aborted cleaning left nothing in progress
    finally:
        log.close()
