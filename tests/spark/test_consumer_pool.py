"""The consumer pool's close of a failed read's consumer: bounded, so a deadlocked librdkafka client
(confluentinc/librdkafka#5476) fails the task instead of hanging it."""

from __future__ import annotations

import logging
import threading
from typing import cast

import pytest
from confluent_kafka import Consumer

from tidelog.spark import consumer_pool
from tidelog.spark.consumer_pool import ConsumerPool, PooledConsumer


class _Closing:
    """A consumer whose ``close()`` blocks until ``release`` is set (as a deadlocked librdkafka's does), or
    raises ``error``."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.release = threading.Event()
        self.closed = threading.Event()
        self.error = error

    def close(self) -> None:
        if self.error is not None:
            raise self.error
        self.release.wait()
        self.closed.set()


def test_a_close_that_never_returns_is_left_behind_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    stuck = _Closing()
    with caplog.at_level(logging.WARNING, logger="tidelog.spark.consumer_pool"):
        ConsumerPool.discard(PooledConsumer(cast(Consumer, stuck)), timeout_s=0.2)
    assert not stuck.closed.is_set()
    assert any(stuck is c for c in consumer_pool._UNCLOSED)
    expected = (
        "a Kafka consumer of a failed read did not close within 0.2 s and is left behind (its librdkafka "
        "threads look deadlocked, confluentinc/librdkafka#5476)"
    )
    assert [r.getMessage() for r in caplog.records] == [expected]
    stuck.release.set()  # the close thread ends with the test
    assert stuck.closed.wait(5)


def test_a_close_that_returns_is_waited_for_and_its_error_raised() -> None:
    quick = _Closing()
    quick.release.set()
    ConsumerPool.discard(PooledConsumer(cast(Consumer, quick)), timeout_s=5)
    assert quick.closed.is_set()
    assert not any(quick is c for c in consumer_pool._UNCLOSED)
    failing = _Closing(RuntimeError("Consumer closed"))
    with pytest.raises(RuntimeError, match="Consumer closed"):
        ConsumerPool.discard(PooledConsumer(cast(Consumer, failing)), timeout_s=5)
