"""The log cleaner in the broker: chooses and swaps on the event loop, cleans in a worker thread.

Invariants:

- Everything that touches a ``PartitionLog`` runs on the event loop: choosing the log and planning the
  cleaning (which opens the segment files it will read), then swapping the result in and writing the
  checkpoint. The worker thread only runs ``CleaningJob.run``: it reads through its own descriptors and
  writes ``.cleaned`` files, so appends, reads, retention and topic deletion go on meanwhile (the swap
  checks what changed).
- One cleaning at a time (Kafka's ``log.cleaner.threads``; more than one is treated as one). After a round
  with nothing left to clean the task sleeps ``log.cleaner.backoff.ms`` (``Broker._every``).
- Stopping the broker cancels the task: the worker is told to abort and is awaited, and its files are
  removed, before the task ends; ``LogManager.shutdown`` never races it.
- A cleaning that fails is logged as a warning and its log left alone until it is recreated or the broker
  restarts; the broker goes on.
- The worker's reads and writes go through one :class:`Throttler` for the task's life, held to
  ``log.cleaner.io.max.bytes.per.second`` and checked every 300 ms (Kafka's ``LogCleaner``). Its sleeps
  wait on the cleaning's abort event, so a stopping broker never waits for a throttled cleaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from typing import Final

from tidelog.server.config import BrokerConfig
from tidelog.server.throttler import Throttler
from tidelog.storage.cleaner import CleanerConfig, LogCleaner
from tidelog.storage.cleaner_job import CleanerStats
from tidelog.storage.log_manager import LogManager

__all__ = ["LogCleanerTask", "cleaner_config"]

log = logging.getLogger("tidelog.log_cleaner")

_MAX_CLEANINGS_PER_ROUND: Final = 16
"""Cleanings back to back before the task sleeps anyway (a log that keeps getting dirty cannot hog it)."""

THROTTLE_CHECK_INTERVAL_MS: Final = 300
"""How often the cleaner's I/O rate is checked (Kafka's ``LogCleaner`` uses 300 ms)."""


def cleaner_config(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enable=config.log_cleaner_enable and config.log_cleaner_threads > 0,
        threads=max(config.log_cleaner_threads, 1),
        dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
        io_buffer_size=config.log_cleaner_io_buffer_size,
        io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
        backoff_ms=config.log_cleaner_backoff_ms,
    )


class LogCleanerTask:
    """Runs :class:`LogCleaner` rounds for the broker."""

    def __init__(
        self,
        logs: LogManager,
        config: CleanerConfig,
        *,
        clock_ms: Callable[[], int],
        after_swap: Callable[[], None] | None = None,
        throttler: Throttler | None = None,
    ) -> None:
        """``throttler``: by default one at ``config.io_max_bytes_per_second`` on the monotonic clock."""
        self.cleaner = LogCleaner(logs, config)
        self.config = config
        self.throttler = throttler or Throttler(
            config.io_max_bytes_per_second, check_interval_ms=THROTTLE_CHECK_INTERVAL_MS
        )
        self._clock_ms = clock_ms
        self._after_swap = after_swap
        self.cleanings = 0
        self.last_stats: CleanerStats | None = None
        """The figures of the last completed cleaning (the cleaner's metrics read them)."""

    @property
    def enabled(self) -> bool:
        return self.config.enable

    async def run_once(self) -> None:
        """Clean logs, one after the other, until none needs it."""
        for _ in range(_MAX_CLEANINGS_PER_ROUND):
            cleaning = self.cleaner.grab_filthiest_log(self._clock_ms())
            if cleaning is None:
                return
            abort = threading.Event()
            throttle = functools.partial(self.throttler.maybe_throttle, sleep=abort.wait)
            work = asyncio.ensure_future(asyncio.to_thread(cleaning.job.run, abort.is_set, throttle))
            try:
                result = await asyncio.shield(work)
            except asyncio.CancelledError:
                abort.set()
                with contextlib.suppress(BaseException):
                    await work
                self.cleaner.abandon(cleaning)
                log.info("Cleaning of %s aborted: the broker is stopping", cleaning.job.topic_partition)
                raise
            except Exception as exc:  # noqa: BLE001 - any failure leaves the log uncleanable, as in Kafka
                self.cleaner.abandon(cleaning, exc)
                continue
            if self.cleaner.complete(cleaning, result, self._clock_ms()):
                self.cleanings += 1
                self.last_stats = result.stats
                if self._after_swap is not None:
                    self._after_swap()
