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
  invalidates a failed task's consumer.
- At most :data:`CAPACITY` idle consumers; the least recently returned one is closed first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message

__all__ = ["CAPACITY", "POOL", "ConsumerPool", "PooledConsumer", "pool_key"]

CAPACITY = 16


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
    def discard(entry: PooledConsumer) -> None:
        entry.consumer.close()

    def clear(self) -> None:
        while self._idle:
            _, entry = self._idle.popitem()
            entry.consumer.close()


POOL = ConsumerPool()
