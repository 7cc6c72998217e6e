"""Consumers kept across Spark tasks in one executor's Python worker, as Spark's connector pools them.

Invariants:

- One pool per Python worker process (:data:`POOL`); a consumer is keyed by its full configuration
  (which holds the query's executor group id) and its one topic-partition, so queries never share one.
- A consumer is either borrowed by exactly one read or idle in the pool, released (unassigned: it
  fetches nothing and holds no queued records while idle; its connections and metadata stay warm).
- An idle consumer remembers ``next_offset``, the first offset its previous read did not yield, and the
  records it had already taken off its queue at or past that offset (``leftover``, in offset order).
  A read that starts exactly there yields those first and assigns the offset after them; any other
  start assigns its own offset. A read that failed or stopped early never returns its consumer (it is closed), as Spark
  invalidates a failed task's consumer. That close waits at most :data:`CLOSE_TIMEOUT_S`: a librdkafka
  client whose own threads deadlocked (confluentinc/librdkafka#5476: a leader dying while an
  OffsetForLeaderEpoch request to it is in flight; the read then fails with ``kafkaConsumer.pollTimeoutMs``)
  blocks its ``close()`` forever, and the task must fail so that Spark retries it, not hang. Such a consumer
  is left referenced (destroying it blocks its destroyer too) and a warning names it.
- At most :data:`CAPACITY` idle consumers; the least recently returned one is closed first.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message

__all__ = ["CAPACITY", "CLOSE_TIMEOUT_S", "POOL", "ConsumerPool", "PooledConsumer", "pool_key"]

log = logging.getLogger("tidelog.spark.consumer_pool")

CAPACITY = 16
CLOSE_TIMEOUT_S = 30.0
_UNCLOSED: list[Consumer] = []
"""Consumers whose close did not return; each also holds a reference nothing releases, since deallocating
one (even in the interpreter's final collection at exit) would block as its close did."""


@dataclass
class PooledConsumer:
    consumer: Consumer
    next_offset: int | None = None
    leftover: list[Message] = field(default_factory=list)


def pool_key(config: Mapping[str, object], topic: str, partition: int) -> Hashable:
    return (tuple(sorted((k, repr(v)) for k, v in config.items())), topic, partition)


class ConsumerPool:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._idle: OrderedDict[Hashable, PooledConsumer] = OrderedDict()
        self.created = 0
        self.reused = 0

    def __len__(self) -> int:
        return len(self._idle)

    def borrow(self, key: Hashable, make: Callable[[], Consumer]) -> PooledConsumer:
        entry = self._idle.pop(key, None)
        if entry is not None:
            self.reused += 1
            return entry
        self.created += 1
        return PooledConsumer(make())

    def give_back(self, key: Hashable, entry: PooledConsumer, release: Callable[[Consumer], None]) -> None:
        release(entry.consumer)
        old = self._idle.pop(key, None)
        if old is not None:
            old.consumer.close()
        self._idle[key] = entry
        while len(self._idle) > self.capacity:
            _, evicted = self._idle.popitem(last=False)
            evicted.consumer.close()

    @staticmethod
    def discard(entry: PooledConsumer, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Close a failed read's consumer, waiting at most ``timeout_s`` (see the module docstring)."""
        consumer = entry.consumer
        closed = threading.Event()
        failure: list[BaseException] = []

        def close() -> None:
            try:
                consumer.close()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                failure.append(exc)
            finally:
                closed.set()

        threading.Thread(target=close, name="tidelog-consumer-close", daemon=True).start()
        if not closed.wait(timeout_s):
            _UNCLOSED.append(consumer)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(consumer))  # never deallocated: that would block too
            log.warning(
                "a Kafka consumer of a failed read did not close within %g s and is left behind (its librdkafka "
                "threads look deadlocked, confluentinc/librdkafka#5476)",
                timeout_s,
            )
            return
        if failure:
            raise failure[0]

    def clear(self) -> None:
        while self._idle:
            _, entry = self._idle.popitem()
            entry.consumer.close()


POOL = ConsumerPool()
